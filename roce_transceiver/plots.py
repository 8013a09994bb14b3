"""PNG plots for reports, drawn with matplotlib (the ``plots`` extra).

- :func:`plot_latency`: a latency histogram (the JSON :class:`~roce_transceiver.histogram.
  Histogram` writes, as the apps' ``latency.json``): the bins with p50 / p99 / p99.9 and the
  floor of the same run marked, beside the tail as a CCDF on log scales.
- :func:`plot_ingest`: ``bench ingest --json``'s rows: Gb/s per payload size for each crew,
  with and without the metadata record, against the copy floors measured in the same run.

The input is checked before anything is drawn: a file that is not what it should be is a
:class:`PlotError` naming the file and the key (``rows[3].gbit_per_s: missing``). Figures are
drawn on matplotlib's Agg canvas without pyplot, so the caller's backend is left alone.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = [
    "DPI",
    "INGEST_SIZE",
    "LATENCY_SIZE",
    "PlotError",
    "load_json",
    "plot_ingest",
    "plot_latency",
]

DPI = 100
#: Figure sizes in pixels (width, height) at DPI.
LATENCY_SIZE = (1200, 500)
INGEST_SIZE = (1200, 500)
_INSTALL = "pip install roce-transceiver[plots]"


class PlotError(ValueError):
    """Input that cannot be plotted, or no matplotlib; the message names the file and key."""


def _figure(size: tuple[int, int]) -> Any:
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise PlotError(f"plots need matplotlib, which is not installed: {_INSTALL}") from None
    return Figure(figsize=(size[0] / DPI, size[1] / DPI), dpi=DPI, layout="constrained")


def load_json(path: str | Path) -> Any:
    """The JSON in ``path``; PlotError naming the file, and the line and column of bad JSON."""
    try:
        text = Path(path).read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise PlotError(f"{path}: cannot read: {getattr(e, 'strerror', None) or e}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise PlotError(f"{path}: not JSON: line {e.lineno} column {e.colno}: {e.msg}") from None


class _Reader:
    """Typed access to a JSON document, each failure naming the file and the dotted key."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, key: str, problem: str) -> PlotError:
        return PlotError(f"{self.source}: {key}: {problem}")

    def mapping(self, data: Any, key: str) -> Mapping[str, Any]:
        if not isinstance(data, Mapping):
            raise self.fail(key or "(top level)", f"must be an object, not {type(data).__name__}")
        return data

    def get(self, data: Mapping[str, Any], name: str, where: str) -> Any:
        if name not in data:
            raise self.fail(f"{where}{name}", "missing")
        return data[name]

    def number(self, value: Any, key: str, *, minimum: float | None = None) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.fail(key, f"must be a number, not {json.dumps(value)[:40]}")
        if not math.isfinite(value) or (minimum is not None and value < minimum):
            raise self.fail(key, f"{value} is out of range (at least {minimum})")
        return float(value)

    def numbers(self, value: Any, key: str, *, minimum: float | None = None) -> list[float]:
        if not isinstance(value, list) or not value:
            raise self.fail(key, "must be a non-empty list of numbers")
        return [self.number(v, f"{key}[{i}]", minimum=minimum) for i, v in enumerate(value)]


# ----------------------------------------------------------------------------- latency
def _latency_data(data: Any, source: str) -> dict[str, Any]:
    r = _Reader(source)
    top = r.mapping(data, "")
    unit = r.get(top, "unit", "")
    if not isinstance(unit, str):
        raise r.fail("unit", "must be a string (us, ns)")
    edges = r.numbers(r.get(top, "edges", ""), "edges")
    counts = r.numbers(r.get(top, "counts", ""), "counts", minimum=0)
    if len(edges) != len(counts) + 1:
        raise r.fail("edges", f"{len(edges)} edges for {len(counts)} counts (need one more)")
    if any(b < a for a, b in itertools.pairwise(edges)):
        raise r.fail("edges", "must not decrease")
    summary = r.mapping(r.get(top, "summary", ""), "summary")
    s = {k: r.number(r.get(summary, k, "summary."), f"summary.{k}") for k in ("p50", "p99", "p999")}
    out: dict[str, Any] = {"unit": unit, "edges": edges, "counts": counts, "summary": s}
    out["count"] = int(summary.get("count", sum(counts)))
    if "tail" in top:
        tail = r.mapping(top["tail"], "tail")
        lat = r.numbers(r.get(tail, "latency", "tail."), "tail.latency")
        ccdf = r.numbers(r.get(tail, "ccdf", "tail."), "tail.ccdf", minimum=0)
        if len(lat) != len(ccdf):
            raise r.fail("tail.ccdf", f"{len(ccdf)} values for {len(lat)} latencies")
        out["tail"] = (lat, ccdf)
    if top.get("floor") is not None:
        floor = r.mapping(top["floor"], "floor")
        out["floor"] = {
            "name": str(floor.get("name", "floor")),
            "p50": r.number(r.get(floor, "p50", "floor."), "floor.p50"),
        }
    return out


def _ccdf_from_bins(edges: list[float], counts: list[float]) -> tuple[list[float], list[float]]:
    """P(latency >= left edge) per bin: the tail view of a histogram without ``tail``."""
    total = sum(counts) or 1.0
    left, out = total, []
    for c in counts:
        out.append(left / total)
        left -= c
    return edges[:-1], out


def plot_latency(
    hist: Mapping[str, Any] | str | Path, png: str | Path, title: str = "round trip"
) -> None:
    """Draw a latency histogram (a :meth:`Histogram.as_dict` mapping, or its JSON file)."""
    source = str(hist) if isinstance(hist, (str, Path)) else "histogram"
    d = _latency_data(load_json(hist) if isinstance(hist, (str, Path)) else hist, source)
    fig = _figure(LATENCY_SIZE)
    ax_hist, ax_tail = fig.subplots(1, 2, width_ratios=(3, 2))
    edges, counts, unit, s = d["edges"], d["counts"], d["unit"], d["summary"]
    widths = [b - a for a, b in itertools.pairwise(edges)]
    ax_hist.bar(edges[:-1], counts, width=widths, align="edge", color="steelblue")
    marks = [("p50", s["p50"], "tab:green"), ("p99", s["p99"], "tab:orange")]
    marks.append(("p99.9", s["p999"], "tab:red"))
    if "floor" in d:
        f = d["floor"]
        marks.insert(0, (f"floor p50 ({f['name']})", f["p50"], "black"))
    for name, value, colour in marks:
        for ax in (ax_hist, ax_tail):
            ax.axvline(value, color=colour, linestyle="--", linewidth=1.2, label=None)
        ax_hist.plot([], [], color=colour, linestyle="--", label=f"{name} {value:.2f} {unit}")
    ax_hist.set_xlabel(f"latency ({unit}); the last bin holds everything past p99.9")
    ax_hist.set_ylabel("round trips per bin")
    ax_hist.set_title(f"{title}: {d['count']} samples")
    ax_hist.legend(loc="best", fontsize="small")
    lat, ccdf = d.get("tail") or _ccdf_from_bins(edges, counts)
    points = [(x, y) for x, y in zip(lat, ccdf, strict=True) if x > 0 and y > 0]
    if points:
        xs, ys = zip(*points, strict=True)
        ax_tail.step(xs, ys, where="post", color="steelblue")
        ax_tail.set_xscale("log")
        ax_tail.set_yscale("log")
    ax_tail.set_xlabel(f"latency ({unit})")
    ax_tail.set_ylabel("fraction of round trips at least this slow")
    ax_tail.set_title("tail (CCDF, log-log)")
    ax_tail.grid(True, which="both", alpha=0.3)
    fig.savefig(str(png), format="png")


# ----------------------------------------------------------------------------- ingest
def _ingest_rows(data: Any, source: str) -> tuple[str, list[dict[str, Any]]]:
    r = _Reader(source)
    top = r.mapping(data, "")
    rows = r.get(top, "rows", "")
    if not isinstance(rows, list) or not rows:
        raise r.fail("rows", "must be a non-empty list")
    out = []
    for i, row in enumerate(rows):
        where = f"rows[{i}]."
        row = r.mapping(row, f"rows[{i}]")
        metadata = r.get(row, "metadata", where)
        if not isinstance(metadata, bool):
            raise r.fail(f"{where}metadata", "must be true or false")
        floor = r.mapping(r.get(row, "floor", where), f"{where}floor")
        out.append(
            {
                "payload": r.number(r.get(row, "payload", where), f"{where}payload", minimum=1),
                "metadata": metadata,
                "warps": int(r.number(row.get("warps", 0), f"{where}warps", minimum=0)),
                "gbit_per_s": r.number(
                    r.get(row, "gbit_per_s", where), f"{where}gbit_per_s", minimum=0
                ),
                "floor": {k: r.number(v, f"{where}floor.{k}", minimum=0) for k, v in floor.items()},
            }
        )
    return str(top.get("executor", "?")), out


def _floor_label(key: str) -> str:
    return key.removeprefix("copy_").removesuffix("_gbit_per_s").replace("_", " ")


def plot_ingest(result: Mapping[str, Any] | str | Path, png: str | Path, title: str = "") -> None:
    """Draw ``bench ingest --json``'s rows (the mapping, or its JSON file)."""
    source = str(result) if isinstance(result, (str, Path)) else "ingest result"
    executor, rows = _ingest_rows(
        load_json(result) if isinstance(result, (str, Path)) else result, source
    )
    fig = _figure(INGEST_SIZE)
    panels = fig.subplots(1, 2, sharey=True)
    colours = ["tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown"]
    crews = sorted({r["warps"] for r in rows})
    for ax, metadata in zip(panels, (False, True), strict=True):
        mine = [r for r in rows if r["metadata"] == metadata]
        for n, warps in enumerate(crews):
            crew = sorted((r for r in mine if r["warps"] == warps), key=lambda r: r["payload"])
            if not crew:
                continue
            colour = colours[n % len(colours)]
            who = f"{warps} warp{'s' if warps != 1 else ''}" if warps else executor
            xs = [r["payload"] for r in crew]
            ax.plot(xs, [r["gbit_per_s"] for r in crew], "o-", color=colour, label=who)
            if any("copy_crew_gbit_per_s" in r["floor"] for r in crew) and warps > 1:
                ys = [r["floor"].get("copy_crew_gbit_per_s", math.nan) for r in crew]
                ax.plot(xs, ys, ":", color=colour, label=f"copy floor, {who}")
        # The floors that do not depend on the crew: one line each, from the first crew's rows.
        first = sorted((r for r in mine if r["warps"] == crews[0]), key=lambda r: r["payload"])
        keys = sorted({k for r in first for k in r["floor"]} - {"copy_crew_gbit_per_s"})
        for k, style in zip(keys, ("--", "-.", (0, (5, 1)), (0, (1, 1))), strict=False):
            xs = [r["payload"] for r in first if k in r["floor"]]
            ys = [r["floor"][k] for r in first if k in r["floor"]]
            ax.plot(
                xs, ys, linestyle=style, color="dimgray", label=f"copy floor, {_floor_label(k)}"
            )
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(sorted({r["payload"] for r in rows}))
        ax.set_xticklabels([f"{int(p)}" for p in sorted({r["payload"] for r in rows})])
        ax.set_xlabel("payload per packet (bytes)")
        ax.set_title(f"metadata record {'on' if metadata else 'off'}")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize="x-small", loc="best")
    panels[0].set_ylabel("Gb/s of payload")
    fig.suptitle(title or f"ingest ({executor} executor): engine against the copy floors")
    fig.savefig(str(png), format="png")
