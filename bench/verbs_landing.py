"""What our engine costs for Verbs mode's request shapes, alone, fed from Python (until issue 16
the engine was the responder of Verbs mode's requests; now the software ConnectX is, and the
engine is the peer's NIC: docs/verbs_mode.md).

``python bench/verbs_landing.py [--executor cuda] [--count N] [--json FILE]``

For each variant, ``count`` times: inject the peer's packets into a Transceiver (RC, our ring
and signal word as regions, no serve loop) and time, on the host, until the engine's
acknowledgement of the last one has been collected. Variants: an RC SEND echo (the Ethernet
mode's request, answered by a reply and an ACK), an RDMA WRITE alone (ACK), a FETCH_ADD alone
(ATOMIC ACK), and WRITE + FETCH_ADD (Verbs mode's request). Python's own cost is in every row
alike; read the rows against each other and against the floor of the same run (pinned_pingpong
for cuda, cpu_thread_pingpong for cpu).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from roce_transceiver.bench.floors import Percentiles, format_table, measure_floors
from roce_transceiver.protocol import build
from roce_transceiver.transceiver import Transceiver

RING_VA, RING_KEY, SIG_VA, SIG_KEY = 0x1000_0000, 0x1001, 0x2000_0000, 0x1002
ADDR = {
    "eth_src": "02:00:00:00:00:02",
    "eth_dst": "02:00:00:00:00:01",
    "ip_src": "10.0.0.2",
    "ip_dst": "10.0.0.1",
    "dest_qp": 0x31,
}


def _frames(kind: str, psn: int) -> list[bytes]:
    payload = bytes(range(40))
    write = build(
        "RC_RDMA_WRITE_ONLY", payload, psn=psn, ack_req=True, va=RING_VA, rkey=RING_KEY, **ADDR
    )
    if kind == "send":
        return [build("RC_SEND_ONLY", payload[:32], psn=psn, ack_req=True, **ADDR)]
    if kind == "write":
        return [write]
    add = build(
        "RC_FETCH_ADD",
        psn=psn + (kind == "write+fetch_add"),
        va=SIG_VA,
        rkey=SIG_KEY,
        swap_add=1,
        **ADDR,
    )
    return [add] if kind == "fetch_add" else [write, add]


def run(executor: str, count: int) -> dict[str, Percentiles]:
    config = {
        "executor": executor,
        "handler": "echo",
        "completions": False,
        "qp": {"transport": "RC", "qpn": 0x31, "peer_qpn": 0x32},
        "regions": [
            {"va": RING_VA, "rkey": RING_KEY, "length": 4096},
            {"va": SIG_VA, "rkey": SIG_KEY, "length": 8},
        ],
    }
    rows: dict[str, Percentiles] = {}
    for kind in ("send", "write", "fetch_add", "write+fetch_add"):
        with Transceiver(config) as t:
            psn, samples = 0, []
            for i in range(count + 100):  # the first 100: warm-up
                frames = _frames(kind, psn)
                psn += len(frames)
                want = len(frames) + (kind == "send")  # a SEND gets its reply too
                t0 = time.perf_counter_ns()
                for f in frames:
                    assert t.inject(f)
                got: list[bytes] = []
                deadline = t0 + 2_000_000_000
                while len(got) < want and time.perf_counter_ns() < deadline:
                    got += t.collect(max_frames=want - len(got))  # no sleep: a tight poll
                t1 = time.perf_counter_ns()
                assert len(got) == want, f"{kind} {i}: {len(got)} of {want} answers"
                if i >= 100:
                    samples.append(t1 - t0)
        rows[kind] = Percentiles.from_samples(np.array(samples, dtype=np.float64), "ns")
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--executor", choices=("cpu", "cuda"), default="cuda")
    ap.add_argument("--count", type=int, default=2000)
    ap.add_argument("--json", metavar="FILE")
    args = ap.parse_args()
    rows: dict[str, Percentiles | str] = dict(run(args.executor, args.count))
    floor = "pinned_pingpong" if args.executor == "cuda" else "cpu_thread_pingpong"
    rows.update(measure_floors([floor], args.count))
    print(format_table(rows, "us"))
    if args.json:
        out = {k: v.as_dict() if isinstance(v, Percentiles) else v for k, v in rows.items()}
        Path(args.json).write_text(json.dumps({"executor": args.executor, "rows": out}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
