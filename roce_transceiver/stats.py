"""Latency statistics shared by the Transceiver's results and the benchmarks."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

__all__ = ["Mean", "Percentiles", "check_unit"]

_NS_PER_UNIT: dict[str, float] = {"ns": 1.0, "us": 1e3}


@dataclass(frozen=True)
class Percentiles:
    """Summary of latency samples: order statistics, mean and count, in ``unit`` ("ns" or "us").

    Percentiles are numpy's default (linear interpolation between closest ranks), so p99.9 of
    fewer than 1000 samples lies between the two largest.
    """

    min: float
    p50: float
    p99: float
    p999: float
    max: float
    mean: float
    count: int
    unit: str = "ns"

    @classmethod
    def from_samples(cls, samples: Sequence[float] | np.ndarray, unit: str = "ns") -> Percentiles:
        """Summarise ``samples``, which are already in ``unit``."""
        check_unit(unit)
        a = np.asarray(samples, dtype=np.float64)
        if a.ndim != 1 or a.size == 0:
            raise ValueError(f"need a non-empty 1-D list of samples, got shape {a.shape}")
        if not np.all(np.isfinite(a)):
            raise ValueError(f"samples hold {int(np.sum(~np.isfinite(a)))} non-finite values")
        p50, p99, p999 = np.percentile(a, [50.0, 99.0, 99.9])
        return cls(
            min=float(a.min()),
            p50=float(p50),
            p99=float(p99),
            p999=float(p999),
            max=float(a.max()),
            mean=float(a.mean()),
            count=int(a.size),
            unit=unit,
        )

    def to(self, unit: str) -> Percentiles:
        """The same figures in ``unit``."""
        check_unit(unit)
        k = _NS_PER_UNIT[self.unit] / _NS_PER_UNIT[unit]
        return Percentiles(
            min=self.min * k,
            p50=self.p50 * k,
            p99=self.p99 * k,
            p999=self.p999 * k,
            max=self.max * k,
            mean=self.mean * k,
            count=self.count,
            unit=unit,
        )

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Mean:
    """A figure timed only in total (``count`` events in one span, total / count): its mean and
    no order statistics, where a loop keeps no time of each event (a table shows '-' for them)."""

    mean: float
    count: int
    unit: str = "ns"

    def to(self, unit: str) -> Mean:
        """The same figure in ``unit``."""
        check_unit(unit)
        return Mean(self.mean * _NS_PER_UNIT[self.unit] / _NS_PER_UNIT[unit], self.count, unit)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def check_unit(unit: str) -> None:
    if unit not in _NS_PER_UNIT:
        raise ValueError(f"unit={unit!r}: must be one of {', '.join(_NS_PER_UNIT)}")
