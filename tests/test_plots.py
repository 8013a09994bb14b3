"""PNG plots (roce_transceiver.plots, ``roce-transceiver plot``) drawn with matplotlib.

Goal: the latency histogram and the ingest benchmark come out as PNGs of the promised size,
from the JSON the runs write (an ingest result checked in under bench/results, a histogram of
known samples), and input that is not what it should be is one error naming the file and the
key. Oracles: Pillow decoding the PNG; the tail's CCDF recomputed from the samples by brute
force; the messages.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from roce_transceiver import cli
from roce_transceiver.histogram import TAIL_POINTS, Histogram
from roce_transceiver.plots import (
    INGEST_SIZE,
    LATENCY_SIZE,
    PlotError,
    plot_ingest,
    plot_latency,
)
from roce_transceiver.stats import Percentiles

INGEST = Path(__file__).resolve().parents[1] / "bench/results/2026-12-01-h200-ingest-crew.json"
INGEST_CPU_LIKE = {
    "benchmark": "ingest",
    "executor": "cpu",
    "rows": [
        {
            "payload": p,
            "metadata": m,
            "warps": 0,
            "gbit_per_s": g,
            "floor": {"copy_one_thread_gbit_per_s": 80.0},
        }
        for p, m, g in ((64, False, 0.5), (1024, False, 4.0), (64, True, 0.4), (1024, True, 3.5))
    ],
}


def _samples(n: int = 5000) -> np.ndarray:
    rng = np.random.default_rng(7)
    a = 6.5 + rng.lognormal(-1.0, 0.6, n)
    a[:3] = (40.0, 300.0, 1300.0)  # a tail past p99.9, which the bins clip
    return a


def _png_size(path: Path) -> tuple[int, int]:
    with Image.open(path) as png:
        assert png.format == "PNG"
        png.load()  # decodes the whole image, not just its header
        return png.size


def test_histogram_tail_is_the_samples_ccdf():
    a = _samples()
    h = Histogram.from_samples(a)
    lat, ccdf = h.tail
    assert len(lat) <= TAIL_POINTS and ccdf[0] == 1.0 and ccdf[-1] == 1 / a.size
    assert lat[-1] == a.max() and np.all(np.diff(lat) > 0) and np.all(np.diff(ccdf) < 0)
    brute = np.array([np.mean(a >= x) for x in lat])
    np.testing.assert_allclose(ccdf, brute)


def test_latency_plot_from_the_json_with_floor_and_tail(tmp_path):
    floor = Percentiles.from_samples(np.full(100, 3.1), "us")
    h = Histogram.from_samples(_samples()).with_floor(floor, "pinned_pingpong")
    h.write_json(tmp_path / "lat.json")
    data = json.loads((tmp_path / "lat.json").read_text())
    assert data["floor"]["name"] == "pinned_pingpong" and data["floor"]["p50"] == 3.1
    assert len(data["tail"]["latency"]) == len(data["tail"]["ccdf"])
    plot_latency(tmp_path / "lat.json", tmp_path / "lat.png", "echo")
    assert _png_size(tmp_path / "lat.png") == LATENCY_SIZE


def test_latency_plot_of_a_json_without_tail_or_floor(tmp_path):
    d = Histogram.from_samples(_samples()).as_dict()
    del d["tail"]  # as histograms written before the tail was kept
    plot_latency(d, tmp_path / "old.png")
    assert _png_size(tmp_path / "old.png") == LATENCY_SIZE


def test_ingest_plot_of_the_checked_in_h200_result(tmp_path):
    plot_ingest(INGEST, tmp_path / "ingest.png")
    assert _png_size(tmp_path / "ingest.png") == INGEST_SIZE


def test_ingest_plot_of_cpu_rows(tmp_path):
    plot_ingest(INGEST_CPU_LIKE, tmp_path / "cpu.png")
    assert _png_size(tmp_path / "cpu.png") == INGEST_SIZE


def test_cli_plot_draws_both(tmp_path, capsys):
    Histogram.from_samples(_samples()).write_json(tmp_path / "lat.json")
    assert (
        cli.main(["plot", "latency", str(tmp_path / "lat.json"), "-o", str(tmp_path / "a.png")])
        == 0
    )
    assert (
        cli.main(["plot", "ingest", str(INGEST), "-o", str(tmp_path / "b.png"), "--title", "x"])
        == 0
    )
    assert _png_size(tmp_path / "a.png") == LATENCY_SIZE
    assert _png_size(tmp_path / "b.png") == INGEST_SIZE


@pytest.mark.parametrize(
    ("kind", "text", "message"),
    [
        ("ingest", '{"rows": [', "not JSON: line 1 column 11"),
        ("ingest", "[]", "(top level): must be an object, not list"),
        ("ingest", '{"rows": []}', "rows: must be a non-empty list"),
        (
            "ingest",
            '{"rows": [{"payload": 64, "metadata": false, "floor": {}, "gbit_per_s": 1},'
            ' {"payload": 64, "metadata": true, "floor": {}}]}',
            "rows[1].gbit_per_s: missing",
        ),
        (
            "ingest",
            '{"rows": [{"payload": 64, "metadata": false, "gbit_per_s": 1,'
            ' "floor": {"copy_one_sm_gbit_per_s": "fast"}}]}',
            'rows[0].floor.copy_one_sm_gbit_per_s: must be a number, not "fast"',
        ),
        ("latency", '{"unit": "us", "edges": [1, 2], "counts": [1]}', "summary: missing"),
        (
            "latency",
            '{"unit": "us", "edges": [1, 2, 3], "counts": [1], "summary": {}}',
            "edges: 3 edges for 1 counts",
        ),
        (
            "latency",
            '{"unit": "us", "edges": [1, 2], "counts": [1], "summary": {"p50": 1, "p99": 2}}',
            "summary.p999: missing",
        ),
    ],
)
def test_bad_json_is_one_error_naming_the_file_and_key(tmp_path, capsys, kind, text, message):
    bad = tmp_path / "bad.json"
    bad.write_text(text)
    with pytest.raises(PlotError) as e:
        (plot_ingest if kind == "ingest" else plot_latency)(bad, tmp_path / "x.png")
    assert str(e.value).startswith(f"{bad}: {message}")
    assert cli.main(["plot", kind, str(bad), "-o", str(tmp_path / "x.png")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("roce-transceiver: error: ") and f"{bad}: {message}" in err
    assert not (tmp_path / "x.png").exists()


def test_missing_file_names_it(tmp_path, capsys):
    assert cli.main(["plot", "latency", str(tmp_path / "nope.json"), "-o", "x.png"]) == 2
    assert f"{tmp_path / 'nope.json'}: cannot read" in capsys.readouterr().err


def test_without_matplotlib_the_error_names_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)  # import fails as if absent
    with pytest.raises(PlotError, match=r"pip install roce-transceiver\[plots\]"):
        plot_ingest(INGEST, tmp_path / "x.png")
