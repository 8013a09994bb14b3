"""Round trip against payload size through both far ends (cuda executor).

How the round trip grows with the bytes moved and checksummed says where
the loop's time goes; run by bench/h200.sh on the GPU machine.
"""

from roce_transceiver.transceiver import Transceiver

for far in ("cpu", "gpu"):
    for tr in ("UC", "RC"):
        cfg = {"executor": "cuda", "far_end": far, "completions": False, "qp": {"transport": tr}}
        with Transceiver(cfg) as t:
            for size in (1, 32, 256, 1024):
                r = t.roundtrip(count=3000, size=size, timeout=20)
                p = r.percentiles()
                line = f"p50 {p.p50:.2f} us, p99 {p.p99:.2f} us" if p else "no replies"
                print(far, tr, size, r.status, r.received, r.wrong, r.bad_frames, line, flush=True)
