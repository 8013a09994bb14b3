"""Diagnose the RC requester on the cuda executor: counters after a lossless roundtrip."""

import sys

from roce_transceiver.transceiver import Transceiver

for far_end in ("cpu", "gpu"):
    for window in (1, 16):
        for warps in (1, 0):
            qp = {"transport": "RC", "retransmit": True, "ack_timeout_us": 100_000}
            cfg = {"executor": "cuda", "far_end": far_end, "qp": qp, "cuda": {"warps": warps}}
            with Transceiver(cfg) as t:
                r = t.roundtrip(count=2000, size=32, window=window, timeout=5.0)
                p = r.percentiles("us")
                s = {k: v for k, v in t.stats().items() if v}
            print(
                far_end,
                window,
                warps,
                r.status,
                r.sent,
                r.received,
                f"p50 {p.p50:.2f}" if p else "-",
                s,
                flush=True,
            )
sys.exit(0)
