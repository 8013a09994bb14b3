"""Diagnose the RC requester on the cuda executor: a lossless ping-pong's p50 and counters,
by far end and crew size, beside the same loop over RC without it."""

import sys

from roce_transceiver.transceiver import Transceiver

for far_end in ("cpu", "gpu"):
    for warps in (1, 0):
        for retransmit in (False, True):
            qp = {"transport": "RC", "retransmit": retransmit, "ack_timeout_us": 100_000}
            cfg = {"executor": "cuda", "far_end": far_end, "qp": qp, "cuda": {"warps": warps}}
            with Transceiver(cfg) as t:
                t.roundtrip(count=500, size=32)
                r = t.roundtrip(count=5000, size=32, timeout=5.0)
                p = r.percentiles("us")
                s = t.stats()
            keys = ("rx_packets", "express", "acks_received", "rc_acked", "rc_retransmits")
            print(
                far_end,
                "warps",
                warps,
                "retransmit" if retransmit else "plain",
                r.status,
                f"p50 {p.p50:.2f}" if p else "-",
                {k: s[k] for k in keys},
                flush=True,
            )
sys.exit(0)
