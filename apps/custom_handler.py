"""Your own handler in the loop: repetition-code readings in, the majority-vote corrections of
examples/handlers/majority_vote.cu out (handler: custom), every correction checked against a
Python majority vote.

    qpu peer --results--> latency statistics (percentiles, histogram PNG + JSON)
    roce (RoceTransceiverOp, custom handler) --messages--> majority checker
                                             --stats-->    counters

The handler is the user's source, compiled at start (docs/handlers.md, "Your own handler"):
the file ``transceiver.custom.source`` names, read from the YAML file's folder. The peer
sends the readings of ``d`` copies of random bits, each copy flipped with probability
``peer.error_rate`` (``peer.pool`` distinct readings, in turn), and expects the Python
majority's correction; a reading with more than ``d / 2`` flips is corrected to the wrong bit
(a logical error, counted, not a failure). ``d`` is the handler's parameter
(``transceiver.custom.params``: ``{distance: d}``, a uint32, or ``[d]``, one byte), read as the
handler reads it.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from holoscan.core import Application

import roce_transceiver
from roce_transceiver.config import ConfigError, custom_params_bytes
from roce_transceiver.operators import MajorityVoteCheckerOp, MessagePool
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

NAME = "custom_handler"

#: The largest distance majority_vote.cu takes.
MAX_DISTANCE = 0xFFFF


def shipped_handler(name: str) -> Path:
    """An example handler as the package installs it (roce_transceiver/examples/handlers/),
    else from the checkout this file is in (examples/handlers/, beside apps/)."""
    installed = Path(roce_transceiver.__file__).parent / "examples" / "handlers" / name
    checkout = Path(__file__).resolve().parents[1] / "examples" / "handlers" / name
    return installed if installed.is_file() or not checkout.is_file() else checkout


#: The embedded default: the shipped majority vote, d = 5, on the cpu executor.
DEFAULTS: dict[str, Any] = {
    "app": {"name": NAME, "count": 10_000},
    "transceiver": {
        "executor": "cpu",
        "handler": "custom",
        "custom": {
            "source": str(shipped_handler("majority_vote.cu")),
            "entry": "majority_vote",
            "params": {"distance": 5},
        },
        "qp": {"transport": "UC"},
    },
    "peer": {"link": "loopback", "error_rate": 0.05, "pool": 4096},
    "latency": {"png": "custom_handler_latency.png", "json": "custom_handler_latency.json"},
}


def vote_distance(params: Any) -> int:
    """The code distance majority_vote.cu reads from its parameters: 4 bytes or more, a uint32
    (``{distance: d}``); 1 to 3, the first byte (``[d]``); none, 3. ConfigError when it is not
    a distance the handler takes (odd, at most MAX_DISTANCE)."""
    raw = custom_params_bytes(params)
    d = int.from_bytes(raw[:4], "little") if len(raw) >= 4 else raw[0] if raw else 3
    if d % 2 == 0 or d > MAX_DISTANCE:
        raise ConfigError(
            f"the majority vote's distance is {d} (read as majority_vote.cu reads it): it must "
            f"be odd and at most {MAX_DISTANCE}",
            key="transceiver.custom.params",
        )
    return d


def readings(distance: int, pool: int, error_rate: float, seed: int) -> MessagePool:
    """``pool`` readings of ``distance`` copies of random bits, each copy flipped with
    probability ``error_rate``; the answer each must get (the majority's correction) and
    whether that leaves a logical error (more than distance / 2 copies flipped)."""
    rng = np.random.default_rng(seed)
    bits = rng.integers(0, 2, pool, dtype=np.uint8)
    flips = (rng.random((pool, distance)) < error_rate).astype(np.uint8)
    copies = bits[:, None] ^ flips
    majority = (copies.sum(axis=1) > distance // 2).astype(np.uint8)
    corrections = copies ^ majority[:, None]
    packed = np.packbits(copies, axis=1, bitorder="little")
    answers = np.packbits(corrections, axis=1, bitorder="little")
    return MessagePool(
        [bytes(r) for r in packed],
        [bytes(a) for a in answers],
        (flips.sum(axis=1) > distance // 2).astype(np.int64),
    )


class CustomHandlerApp(Application):
    """Composed from the file ``app.config()`` loaded: each operator takes its section with
    ``self.kwargs`` (operators/params.py validates it)."""

    def __init__(self, namespace: Any = None, argv: list[str] | None = None) -> None:
        self.namespace = namespace
        super().__init__(argv)

    def compose(self) -> None:
        transceiver, _ = roce_parameters(self, self.kwargs("transceiver"), {})
        peer, _ = validated(self, PEER, self.kwargs("peer"), name="peer", what="peer")
        d = vote_distance(transceiver["custom"]["params"])
        pool = readings(d, peer["pool"], peer["error_rate"], peer["seed"])
        roce = round_trip_graph(
            self, title=f"majority vote d={d}", messages=pool, namespace=self.namespace
        )
        checker = MajorityVoteCheckerOp(self, name="vote_check", distance=d)
        self.add_flow(roce, checker, {("messages", "messages")})


def run(cfg: dict[str, Any]) -> Report:
    d = vote_distance(cfg["transceiver"]["custom"]["params"])  # before any graph: exit 2
    with peer_network(cfg) as (cfg, namespace):
        ops = run_graph(CustomHandlerApp(namespace, HOLOSCAN_ARGV), cfg)
    custom = cfg["transceiver"]["custom"]
    report = latency_report(f"custom handler ({custom['entry']}, d={d})", ops, cfg)
    report.rows["handler"] = f"{custom['source']} ({custom['entry']})"
    lat = ops["latency"]
    n = max(lat.received, 1)
    report.rows["logical errors"] = (
        f"{lat.logical_failures} ({lat.logical_failures / n:.2e}): readings with more than "
        f"{d // 2} of {d} copies flipped"
    )
    report.data["distance"] = d
    report.data["logical_failures"] = lat.logical_failures
    errors = ops["roce"].final_stats.get("handler_errors", 0)
    report.check("handler errors", errors == 0, f"{errors} (replies the handler refused)")
    if cfg["transceiver"]["completions"]:
        c = ops["vote_check"]
        report.check(
            "corrections",
            c.ok,
            f"{c.records} records: {c.wrong} not the majority's, {c.no_reply} without a reply"
            + (f" ({c.first_wrong})" if c.first_wrong else ""),
        )
    return report


def main(argv: Sequence[str] | None = None) -> int:
    return main_for(NAME, __doc__.splitlines()[0], DEFAULTS, run, argv, LATENCY_FILES)


if __name__ == "__main__":
    sys.exit(main())
