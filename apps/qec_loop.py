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
from roce_transceiver.operators.app_config import PEER
from roce_transceiver.operators.app_runner import (
    HOLOSCAN_ARGV,
    LATENCY_FILES,
    Report,
    latency_report,
    main_for,
    peer_network,
    round_trip_graph,
    run_graph,
)
from roce_transceiver.operators.params import validated
from roce_transceiver.operators.transceiver_op import roce_parameters
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
    """Composed from the file ``app.config()`` loaded: each operator takes its section with
    ``self.kwargs`` (operators/params.py validates it)."""

    def __init__(self, namespace: Any = None, argv: list[str] | None = None) -> None:
        self.namespace = namespace
        super().__init__(argv)

    def compose(self) -> None:
        transceiver, _ = roce_parameters(self, self.kwargs("transceiver"), {})
        peer, _ = validated(self, PEER, self.kwargs("peer"), name="peer", what="peer")
        distance = transceiver["qec"]["distance"]
        errors = sample_errors(distance, peer["pool"], peer["error_rate"], peer["seed"])
        roce = round_trip_graph(
            self, title=f"qec d={distance}", qec=errors, namespace=self.namespace
        )
        checker = QecCheckerOp(
            self, name="qec_check", distance=distance, **self.kwargs("qec_check")
        )
        self.add_flow(roce, checker, {("messages", "messages")})


def run(cfg: dict[str, Any]) -> Report:
    with peer_network(cfg) as (cfg, namespace):
        ops = run_graph(QecLoopApp(namespace, HOLOSCAN_ARGV), cfg)
    d = cfg["transceiver"]["qec"]["distance"]
    report = latency_report(f"qec loop (d={d}, lookup table in the loop)", ops, cfg)
    lat, peer, c = ops["latency"], ops["qpu"], ops["qec_check"]
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
    return main_for(NAME, __doc__.splitlines()[0], DEFAULTS, run, argv, LATENCY_FILES)


if __name__ == "__main__":
    sys.exit(main())
