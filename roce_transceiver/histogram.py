"""Latency histograms: bins over the samples, written as JSON and drawn as a PNG.

The PNG is drawn with Pillow (bars, the p50 / p99 / p99.9 lines, axis labels in the default
bitmap font) so that a demo run leaves a picture behind without a plotting stack.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from roce_transceiver.stats import Percentiles

__all__ = ["Histogram"]

_WIDTH, _HEIGHT = 800, 420
_LEFT, _RIGHT, _TOP, _BOTTOM = 70, 20, 40, 50


@dataclass(frozen=True)
class Histogram:
    """Counts of samples in ``bins`` equal bins from min to p99.9 (the tail past p99.9 is
    counted in the last bin, so that one outlier cannot flatten the picture)."""

    edges: np.ndarray  # bins + 1 edges, in ``unit``
    counts: np.ndarray  # per bin
    summary: Percentiles
    unit: str

    @classmethod
    def from_samples(cls, samples: np.ndarray, unit: str = "us", bins: int = 60) -> Histogram:
        if bins < 1:
            raise ValueError(f"bins={bins}: must be at least 1")
        a = np.asarray(samples, dtype=np.float64)
        summary = Percentiles.from_samples(a, unit)
        hi = summary.p999 if summary.p999 > summary.min else summary.min + 1e-9
        edges = np.linspace(summary.min, hi, bins + 1)
        counts, _ = np.histogram(np.clip(a, summary.min, hi), bins=edges)
        return cls(edges, counts, summary, unit)

    def as_dict(self) -> dict[str, Any]:
        return {
            "unit": self.unit,
            "edges": [float(e) for e in self.edges],
            "counts": [int(c) for c in self.counts],
            "summary": self.summary.as_dict(),
        }

    def write_json(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.as_dict(), indent=2) + "\n")

    def write_png(self, path: str | Path, title: str) -> None:
        """Bars, percentile lines and labelled axes, ``_WIDTH`` x ``_HEIGHT`` pixels."""
        try:
            from PIL import Image, ImageDraw
        except ImportError:
            raise ValueError("a histogram PNG needs Pillow (pip install pillow)") from None
        img = Image.new("RGB", (_WIDTH, _HEIGHT), "white")
        draw = ImageDraw.Draw(img)
        plot_w, plot_h = _WIDTH - _LEFT - _RIGHT, _HEIGHT - _TOP - _BOTTOM
        lo, hi = float(self.edges[0]), float(self.edges[-1])
        span = hi - lo or 1.0
        peak = int(self.counts.max()) or 1

        def x_of(v: float) -> float:
            return _LEFT + (v - lo) / span * plot_w

        bar_w = plot_w / len(self.counts)
        for i, c in enumerate(self.counts):
            if c:
                top = _TOP + plot_h * (1 - int(c) / peak)
                x0 = _LEFT + i * bar_w
                draw.rectangle([x0, top, x0 + max(bar_w - 1, 1), _TOP + plot_h], fill="steelblue")
        s = self.summary
        for row, (name, v, colour) in enumerate((("p50", s.p50, "green"), ("p99", s.p99, "red"))):
            draw.line([x_of(v), _TOP, x_of(v), _TOP + plot_h], fill=colour, width=2)
            draw.text((x_of(v) + 4, _TOP + 2 + 14 * row), f"{name} {v:.2f}", fill=colour)
        draw.line([_LEFT, _TOP + plot_h, _LEFT + plot_w, _TOP + plot_h], fill="black")
        draw.line([_LEFT, _TOP, _LEFT, _TOP + plot_h], fill="black")
        for k in range(5):
            v = lo + span * k / 4
            x = x_of(v)
            draw.line([x, _TOP + plot_h, x, _TOP + plot_h + 4], fill="black")
            draw.text((x - 15, _TOP + plot_h + 8), f"{v:.2f}", fill="black")
        draw.text((_LEFT + plot_w // 2 - 40, _HEIGHT - 20), f"latency ({self.unit})", fill="black")
        draw.text((5, _TOP - 5), f"{peak}", fill="black")
        draw.text((5, _TOP + plot_h - 10), "0", fill="black")
        head = (
            f"{title}: n={s.count}  min {s.min:.2f}  p50 {s.p50:.2f}  p99 {s.p99:.2f}  "
            f"p99.9 {s.p999:.2f}  max {s.max:.2f} {self.unit}"
        )
        draw.text((_LEFT, 12), head, fill="black")
        img.save(str(path), format="PNG")
