"""Where a user handler's round trip goes: the built-in echo in the built-in module, the same
built-in echo in a user's linked module (the relocatable engine, its handler warp idle), and the
user's echo in that module, alternating, a fresh transceiver a loop (issue 30).

The middle row separates what the module costs (relocatable code, nvJitLink) from what the
user's handler costs (its warp's handoff, the copy). Internal API: a probe, not a command.
Usage (GPU machine, the package installed): python3 bench/probes/linked_module_probe.py
[--count N] [--repeats R] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from roce_transceiver import custom_handler as ch
from roce_transceiver.transceiver import Transceiver, _gpu_arch


class _EchoInLinkedModule(Transceiver):
    """The built-in echo, launched from a user's linked module (the image given)."""

    image = b""

    def _make_core(self) -> Any:
        from roce_transceiver import _core
        from roce_transceiver.config import core_config
        from roce_transceiver.netinfo import with_resolved_macs

        core = core_config(with_resolved_macs(self.config), self.executor, None)
        core["custom_kernel_image"] = self.image
        return _core.Transceiver(core, self.nic)


def p50(t: Transceiver, count: int) -> float:
    t.roundtrip(count=1000, size=32)  # warm-up, as bench roundtrip's
    r = t.roundtrip(count=count, size=32, timeout=max(10.0, count * 1e-4))
    assert (r.status, r.wrong) == ("done", 0), (r.status, r.wrong)
    return r.percentiles("us").p50


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--count", type=int, default=20000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json")
    args = ap.parse_args()
    echo = ch.example_path("echo.cu")
    custom = {"source": str(echo), "entry": "echo"}
    out: dict[str, Any] = {}
    for far_end in ("gpu", "cpu"):
        base = {"executor": "cuda", "far_end": far_end, "handler": "echo"}
        base["qp"] = {"transport": "UC"}
        image = ch.compile_engine_file(echo, entry="echo", arch=_gpu_arch(0), kernels=3).image
        _EchoInLinkedModule.image = image
        rows: dict[str, list[float]] = {
            "built-in echo": [],
            "echo, linked module": [],
            "user echo": [],
        }
        for _ in range(args.repeats):
            with Transceiver(base) as t:
                rows["built-in echo"].append(p50(t, args.count))
            with _EchoInLinkedModule(base) as t:
                rows["echo, linked module"].append(p50(t, args.count))
            with Transceiver({**base, "handler": "custom", "custom": custom}) as t:
                rows["user echo"].append(p50(t, args.count))
        best = {k: min(v) for k, v in rows.items()}
        print(f"far end {far_end}: p50 us (fastest of {args.repeats})")
        for k, v in rows.items():
            ratio = best[k] / best["built-in echo"]
            print(f"  {k:22s} {best[k]:6.3f}  x{ratio:.3f}   ({', '.join(f'{x:.2f}' for x in v)})")
        out[far_end] = {"p50_us": rows, "fastest_us": best}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
