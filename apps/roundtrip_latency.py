"""The NVQLink-style round-trip demo: 32-byte messages echoed by the persistent loop (GPU or
CPU), timed by the far end, inside a Holoscan graph that stays off the critical path.

    qpu peer --results--> latency statistics (percentiles, histogram PNG + JSON)
    roce (RoceTransceiverOp) --messages--> echo checker
                             --stats-->    counters

The far end is the loopback NIC's (no network) unless ``peer.link: udp`` puts the qpu peer
on the other side of the socket NIC. After the graph, the ping-pong floor the round trip is
read against is measured in the same run (cpu: two threads; cuda: host <-> persistent kernel).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from holoscan.core import Application

from roce_transceiver.operators import EchoCheckerOp
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

NAME = "roundtrip_latency"

#: The embedded default: the in-memory far end, no network needed.
DEFAULTS: dict[str, Any] = {
    "app": {"name": NAME, "count": 10_000},
    "transceiver": {"handler": "echo", "qp": {"transport": "UC"}},
    "peer": {"link": "loopback", "size": 32},
    "latency": {"png": "roundtrip_latency.png", "json": "roundtrip_latency.json"},
}


class RoundTripLatencyApp(Application):
    """Composed from the file ``app.config()`` loaded: each operator takes its section with
    ``self.kwargs`` (operators/params.py validates it)."""

    def __init__(self, namespace: Any = None, argv: list[str] | None = None) -> None:
        self.namespace = namespace
        super().__init__(argv)

    def compose(self) -> None:
        roce = round_trip_graph(self, title="echo round trip", namespace=self.namespace)
        self.add_flow(roce, EchoCheckerOp(self, name="echo_check"), {("messages", "messages")})


def run(cfg: dict[str, Any]) -> Report:
    with peer_network(cfg) as (cfg, namespace):
        ops = run_graph(RoundTripLatencyApp(namespace, HOLOSCAN_ARGV), cfg)
    report = latency_report("roundtrip latency (echo)", ops, cfg)
    if cfg["transceiver"]["completions"]:
        e = ops["echo_check"]
        report.check(
            "echo records",
            e.ok,
            f"{e.records} checked, {e.wrong} wrong, {e.no_reply} no reply"
            + (f" ({e.first_wrong})" if e.first_wrong else ""),
        )
    return report


def main(argv: Sequence[str] | None = None) -> int:
    return main_for(NAME, __doc__.splitlines()[0], DEFAULTS, run, argv, LATENCY_FILES)


if __name__ == "__main__":
    sys.exit(main())
