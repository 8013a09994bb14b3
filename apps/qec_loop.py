"""The quantum-classical loop: syndromes in, lookup-table decoding inside the persistent loop,
corrections out; every correction checked, logical errors counted against pymatching.

    qpu peer --results--> latency statistics (percentiles, histogram)
    roce (RoceTransceiverOp, qec handler) --messages--> QEC checker (table, pymatching sample)
                                          --stats-->    counters

The peer samples independent X and Z errors (``peer.error_rate``), sends their syndromes and
knows, for each answer, whether the correction left a logical error; the same errors decoded
by pymatching give the reference logical error count.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from holoscan.core import Application

from roce_transceiver.operators import QecCheckerOp
from roce_transceiver.operators.app_runner import (
    Report,
    latency_report,
    main_for,
    peer_network,
    round_trip_graph,
    run_graph,
)
from roce_transceiver.qec import sample_errors

NAME = "qec_loop"

DEFAULTS: dict[str, Any] = {
    "app": {"name": NAME, "count": 10_000},
    "transceiver": {"handler": "qec", "qec": {"distance": 3}, "qp": {"transport": "UC"}},
    "peer": {"link": "loopback", "error_rate": 0.03, "pool": 4096},
    "latency": {"png": "qec_loop_latency.png", "json": "qec_loop_latency.json"},
    "qec_check": {"sample": 1000},
}


class QecLoopApp(Application):
    def __init__(self, cfg: dict[str, Any], namespace: Any = None) -> None:
        self.cfg, self.namespace = cfg, namespace
        super().__init__()

    def compose(self) -> None:
        cfg, peer = self.cfg, self.cfg["peer"]
        distance = cfg["transceiver"]["qec"]["distance"]
        self.errors = sample_errors(distance, peer["pool"], peer["error_rate"], peer["seed"])
        round_trip_graph(self, cfg, title=f"qec d={distance}", qec=self.errors)
        self.checker = QecCheckerOp(
            self, name="qec_check", distance=distance, sample=cfg["qec_check"]["sample"]
        )
        self.add_flow(self.roce, self.checker, {("messages", "messages")})


def run(cfg: dict[str, Any]) -> Report:
    with peer_network(cfg) as (cfg, namespace):
        app = QecLoopApp(cfg, namespace)
        run_graph(app, cfg)
    d = cfg["transceiver"]["qec"]["distance"]
    report = latency_report(f"qec loop (d={d}, lookup table in the loop)", app, cfg)
    lat, peer, c = app.latency, app.peer, app.checker
    n = max(lat.received, 1)
    report.rows["logical errors"] = (
        f"loop {lat.logical_failures} ({lat.logical_failures / n:.2e}), pymatching on the "
        f"same errors {peer.reference_failures} ({peer.reference_failures / n:.2e})"
    )
    report.data["logical_failures"] = lat.logical_failures
    report.data["logical_failures_pymatching"] = peer.reference_failures
    report.check(
        "corrections",
        c.ok,
        f"{c.records} records: {c.wrong} not the table's, {c.no_reply} without a reply"
        + (f" ({c.first_wrong})" if c.first_wrong else ""),
    )
    report.check(
        "vs pymatching",
        c.matching_checked > 0 and c.heavier_than_matching == 0,
        f"{c.matching_checked} decoded by both: {c.heavier_than_matching} heavier than "
        f"matching, {c.logical_disagreements} differ by a logical (equal weight)",
    )
    return report


def main(argv: Sequence[str] | None = None) -> int:
    return main_for(NAME, __doc__.splitlines()[0], DEFAULTS, run, argv)


if __name__ == "__main__":
    sys.exit(main())
