"""LatencyStatsOp: round trips in, percentiles and a histogram (PNG and JSON) out."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from holoscan.core import Fragment, Operator, OperatorSpec

from roce_transceiver.histogram import Histogram
from roce_transceiver.operators.app_config import LATENCY
from roce_transceiver.operators.params import operator_parameters
from roce_transceiver.operators.peer_ops import RoundTripStep
from roce_transceiver.stats import Percentiles

__all__ = ["LatencyStatsOp"]


class LatencyStatsOp(Operator):
    """Collects :class:`RoundTripStep` messages on ``results``; when the graph ends,
    ``percentiles`` holds the percentiles (us) and the histogram is written to ``png`` and
    ``json`` (in ``output_dir`` unless absolute; None for none). ``png``, ``json``, ``bins``,
    ``floor``, ``floor_iterations`` are the ``latency`` keys, validated (the floor is measured
    by the app after the graph, with these two)."""

    def __init__(
        self,
        fragment: Fragment,
        *args: Any,
        output_dir: str | Path = ".",
        title: str = "round trip",
        **params: Any,
    ) -> None:
        p, holoscan = operator_parameters(fragment, LATENCY, params, "LatencyStatsOp")
        out = Path(output_dir)
        self.png: Path | None = out / p["png"] if p["png"] else None
        self.json: Path | None = out / p["json"] if p["json"] else None
        self.bins: int = p["bins"]
        self.floor: bool = p["floor"]
        self.floor_iterations: int = p["floor_iterations"]
        self.title = title
        self.sent = self.received = self.wrong = self.lost = self.logical_failures = 0
        self.busy_s = 0.0
        self._samples: list[np.ndarray] = []
        self.percentiles: Percentiles | None = None
        self.histogram: Histogram | None = None
        #: Files that could not be written, by key: what the OS said (the app reports it).
        self.write_errors: dict[str, str] = {}
        super().__init__(fragment, *args, **holoscan)

    def setup(self, spec: OperatorSpec) -> None:
        spec.input("results")

    def compute(self, op_input: Any, op_output: Any, context: Any) -> None:
        step: RoundTripStep = op_input.receive("results")
        self.sent += step.sent
        self.received += step.received
        self.wrong += step.wrong
        self.lost += step.lost
        self.logical_failures += step.logical_failures
        self.busy_s += step.elapsed_s
        self._samples.append(step.rtt_us)

    def stop(self) -> None:
        samples = np.concatenate(self._samples) if self._samples else np.empty(0)
        if samples.size == 0:
            return
        self.histogram = Histogram.from_samples(samples, "us", self.bins)
        self.percentiles = self.histogram.summary
        self.write_histogram()

    def write_histogram(self) -> None:
        """``self.histogram`` to ``png`` and ``json`` (again once the floor is known). A write
        that fails is noted in ``write_errors``, not raised: raised from ``stop()``, Holoscan
        would print its stack and the run lose its summary for a file."""
        if self.histogram is None:
            return
        histogram = self.histogram
        for key, path, write in (
            ("latency.png", self.png, lambda p: histogram.write_png(p, self.title)),
            ("latency.json", self.json, histogram.write_json),
        ):
            if path is None:
                continue
            try:
                write(path)
            except OSError as e:
                self.write_errors[key] = f"{key} {path}: not written: {e.strerror or e}"
            else:
                self.write_errors.pop(key, None)

    @property
    def messages_per_s(self) -> float:
        return self.received / self.busy_s if self.busy_s else 0.0
