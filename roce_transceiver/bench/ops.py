"""Where the cuda executor's time goes: SM cycles of each piece of the engine.

One warp on one SM times decode, the ICRC (one thread and one warp), encode, the echo handler,
the release/acquire operations the loop uses in device and pinned memory, and whole
``engine_step`` calls on rings in device memory, for a SEND Only request of ``size`` payload
bytes (``_core.device_op_costs``). Printed as cycles and nanoseconds at the SM clock measured
in the same run; a GPU round trip is read against this table (docs/performance.md).

``roce-transceiver bench ops [--size 32] [--transport UC|RC] [--repeats 32] [--json FILE]``
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, TextIO

from roce_transceiver import _core
from roce_transceiver.bench.machine import machine_info
from roce_transceiver.protocol import build

__all__ = ["request_frame", "run"]


def request_frame(size: int, transport: str) -> bytes:
    """The request the engine under test receives: a SEND Only of ``size`` payload bytes; on RC
    with AckReq, as an RC requester sends it, so the engine's steps include the ACK."""
    if transport not in ("RC", "UC"):
        raise ValueError(f"transport {transport!r}: must be 'RC' or 'UC'")
    payload = bytes(i & 0xFF for i in range(size))
    return build(
        f"{transport}_SEND_ONLY", payload, dest_qp=0x12, psn=100, ack_req=transport == "RC"
    )


def run(
    size: int = 32,
    transport: str = "UC",
    repeats: int = 32,
    json_path: str | None = None,
    out: TextIO | None = None,
) -> dict[str, Any]:
    out = out or sys.stdout
    ops, ghz, express_taken = _core.device_op_costs(request_frame(size, transport), repeats)
    rows = [
        {
            "op": name,
            "min_cycles": lo,
            "median_cycles": med,
            "median_ns": med / ghz if ghz else None,
        }
        for name, lo, med in ops
    ]
    width = max(len(r["op"]) for r in rows)
    print(f"{transport} SEND Only, {size}-byte payload; SM at {ghz:.3f} GHz", file=out)
    print(f"{'piece':<{width}}  {'min cyc':>9}  {'p50 cyc':>9}  {'p50 ns':>8}", file=out)
    for r in rows:
        ns = f"{r['median_ns']:8.1f}" if r["median_ns"] is not None else "       -"
        line = f"{r['op']:<{width}}  {r['min_cycles']:9.0f}  {r['median_cycles']:9.0f}  {ns}"
        print(line, file=out)
    print(
        f"express path taken by {express_taken} of the {3 * repeats} express-step requests",
        file=out,
    )
    result = {
        "benchmark": "ops",
        "size": size,
        "transport": transport,
        "repeats": repeats,
        "sm_ghz": ghz,
        "ops": rows,
        "express_taken": express_taken,
        "express_offered": 3 * repeats,
        "machine": machine_info(),
    }
    if json_path:
        Path(json_path).write_text(json.dumps(result, indent=2) + "\n")
    return result
