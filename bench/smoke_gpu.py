"""Quick check of the cuda executor: echo and qec through both far ends."""

from roce_transceiver.transceiver import Transceiver

for far in ("cpu", "gpu"):
    for tr in ("UC", "RC"):
        cfg = {"executor": "cuda", "far_end": far, "completions": False, "qp": {"transport": tr}}
        with Transceiver(cfg) as t:
            for size in (1, 32, 1500):
                r = t.roundtrip(count=5000, size=size, timeout=20)
                p = {k: round(v, 2) for k, v in r.percentiles_us().items()}
                print(far, tr, size, r.status, r.sent, r.received, r.wrong, r.bad_frames, p)
            print({k: v for k, v in t.stats().items() if v})
