"""Latency histograms: bins over the samples, written as JSON and drawn as a PNG.

The JSON holds the bins, the percentiles, the tail (the CCDF at up to ``TAIL_POINTS``
latencies from the samples themselves, past the last bin's clipping) and, once measured, the
floor of the same run. The PNG is drawn by roce_transceiver.plots (matplotlib); ``roce-transceiver
plot latency FILE.json`` redraws it from the JSON.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from roce_transceiver.stats import Percentiles

__all__ = ["TAIL_POINTS", "Histogram"]

#: Points of the tail kept in the JSON: enough for a smooth CCDF, few enough for a small file.
TAIL_POINTS = 200


def _tail(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(latency, P(sample >= latency)) at exceedance probabilities spaced evenly on a log
    scale from 1 to 1/n: the empirical CCDF, the slowest sample always included."""
    s = np.sort(a)
    n = s.size
    p = np.geomspace(1.0, 1.0 / n, min(TAIL_POINTS, n))
    idx = np.unique(np.clip(n - np.ceil(p * n).astype(np.int64), 0, n - 1))
    return s[idx], (n - idx) / n


@dataclass(frozen=True)
class Histogram:
    """Counts of samples in ``bins`` equal bins from min to p99.9 (the tail past p99.9 is
    counted in the last bin, so that one outlier cannot flatten the picture)."""

    edges: np.ndarray  # bins + 1 edges, in ``unit``
    counts: np.ndarray  # per bin
    summary: Percentiles
    unit: str
    tail: tuple[np.ndarray, np.ndarray] | None = None  # (latency, CCDF) from the samples
    floor: dict[str, Any] | None = None  # the floor of the same run: name, p50, p99, ...

    @classmethod
    def from_samples(cls, samples: np.ndarray, unit: str = "us", bins: int = 60) -> Histogram:
        if bins < 1:
            raise ValueError(f"bins={bins}: must be at least 1")
        a = np.asarray(samples, dtype=np.float64)
        summary = Percentiles.from_samples(a, unit)
        hi = summary.p999 if summary.p999 > summary.min else summary.min + 1e-9
        edges = np.linspace(summary.min, hi, bins + 1)
        counts, _ = np.histogram(np.clip(a, summary.min, hi), bins=edges)
        return cls(edges, counts, summary, unit, _tail(a))

    def with_floor(self, floor: Percentiles, name: str) -> Histogram:
        """The same histogram with ``floor`` (in this unit), measured in the same run."""
        return replace(self, floor={"name": name, **floor.to(self.unit).as_dict()})

    def as_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "unit": self.unit,
            "edges": [float(e) for e in self.edges],
            "counts": [int(c) for c in self.counts],
            "summary": self.summary.as_dict(),
        }
        if self.tail is not None:
            d["tail"] = {
                "latency": [float(x) for x in self.tail[0]],
                "ccdf": [float(y) for y in self.tail[1]],
            }
        if self.floor is not None:
            d["floor"] = self.floor
        return d

    def write_json(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.as_dict(), indent=2) + "\n")

    def write_png(self, path: str | Path, title: str) -> None:
        """The histogram with its percentiles (and floor) marked, beside the tail as a CCDF
        (roce_transceiver.plots; matplotlib, the ``plots`` extra)."""
        from roce_transceiver.plots import plot_latency

        plot_latency(self.as_dict(), path, title)
