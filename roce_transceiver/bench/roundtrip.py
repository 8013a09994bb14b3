"""``roce-transceiver bench roundtrip`` and ``bench qec``: the echo and decoder
loops through the loopback NIC, next to the latency floors of the same run.

Round trips are timed by the far end (where a request starts and its reply
ends): the host clock for a CPU far end, %globaltimer for a GPU one. Each
figure is printed with the floor it should be read against and the ratio:

- cpu executor                -> cpu_thread_pingpong (two threads, shared memory)
- cuda executor, cpu far end  -> pinned_pingpong (host <-> persistent kernel)
- cuda executor, gpu far end  -> device_block_pingpong (block <-> block)
- any cuda run                -> launch_per_message (what a kernel per message costs)
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from roce_transceiver.bench.floors import Percentiles, format_table, measure_floors
from roce_transceiver.bench.machine import machine_info
from roce_transceiver.transceiver import RoundTrip, Transceiver

__all__ = ["run_qec", "run_roundtrip"]


def _reference_floor(executor: str, far_end: str) -> str:
    if executor == "cpu":
        return "cpu_thread_pingpong"
    return "device_block_pingpong" if far_end == "gpu" else "pinned_pingpong"


def _floors_for(executor: str, far_end: str) -> list[str]:
    names = [_reference_floor(executor, far_end)]
    if executor == "cuda":
        names += ["launch_per_message", "launch_per_message_graph"]
    return names


def _loop_row(rt: RoundTrip) -> Percentiles | str:
    p = rt.percentiles("ns")
    return p if p is not None else f"no replies ({rt.status}, sent {rt.sent})"


def _report(
    title: str,
    rt: RoundTrip,
    floors: dict[str, Percentiles | str],
    executor: str,
    far_end: str,
    extra: dict[str, Any],
    json_path: str | None,
    out: TextIO,
) -> dict[str, Any]:
    loop = _loop_row(rt)
    rows: dict[str, Percentiles | str] = {title: loop, **floors}
    print(format_table(rows, "us"), file=out)
    ratios: dict[str, float] = {}
    ref = _reference_floor(executor, far_end)
    if isinstance(loop, Percentiles):
        if isinstance(floors.get(ref), Percentiles):
            ratios[f"p50 / {ref} p50"] = loop.p50 / floors[ref].p50  # type: ignore[union-attr]
        launch = floors.get("launch_per_message")
        if isinstance(launch, Percentiles):
            ratios["launch_per_message p50 / p50"] = launch.p50 / loop.p50
    for k, v in ratios.items():
        print(f"  {k}: {v:.2f}", file=out)
    print(
        f"  {rt.received}/{rt.sent} replies, {rt.wrong} wrong, {rt.bad_frames} bad frames, "
        f"{rt.messages_per_s:,.0f} msgs/s, status {rt.status}",
        file=out,
    )
    result: dict[str, Any] = {
        "benchmark": title,
        "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "executor": executor,
        "far_end": far_end,
        **extra,
        "loop": loop.as_dict() if isinstance(loop, Percentiles) else loop,
        "floors": {k: v.as_dict() if isinstance(v, Percentiles) else v for k, v in floors.items()},
        "ratios": ratios,
        "replies": rt.received,
        "sent": rt.sent,
        "wrong": rt.wrong,
        "bad_frames": rt.bad_frames,
        "messages_per_s": rt.messages_per_s,
        "status": rt.status,
        "machine": machine_info(),
    }
    if isinstance(loop, Percentiles):
        p = loop.to("us")
        print(
            f"{title}: p50 {p.p50:.2f} us, p99 {p.p99:.2f} us over {p.count} round trips "
            + "; ".join(f"{k} {v:.2f}" for k, v in ratios.items()),
            file=out,
        )
    if json_path:
        Path(json_path).write_text(json.dumps(result, indent=2) + "\n")
    return result


def _express_use(t: Transceiver, out: TextIO) -> dict[str, Any]:
    """How many requests took the express path (after stop(): final counters)."""
    stats = t.stats()
    express, rx = stats["express"], stats["rx_packets"]
    on = t.config["express"]
    print(f"express path {'on' if on else 'off'}: {express} of {rx} packets took it", file=out)
    return {"express": on, "express_packets": express, "rx_packets": rx}


def run_roundtrip(
    executor: str = "auto",
    far_end: str = "cpu",
    size: int = 32,
    count: int = 10_000,
    transport: str = "UC",
    floor_iterations: int = 10_000,
    express: bool = True,
    json_path: str | None = None,
    out: TextIO = sys.stdout,
) -> dict[str, Any]:
    """Echo ping-pong (window 1) of ``count`` ``size``-byte messages, then the floors."""
    config = {
        "executor": executor,
        "far_end": far_end,
        "handler": "echo",
        "completions": False,
        "express": express,
        "qp": {"transport": transport},
    }
    with Transceiver(config) as t:
        print(t.executor_reason, file=out)
        t.roundtrip(count=min(count, 1000), size=size)  # warm-up: caches, clocks, first faults
        rt = t.roundtrip(count=count, size=size, timeout=max(10.0, count * 1e-4))
        used = t.executor
    floors = measure_floors(_floors_for(used, far_end), floor_iterations, size=size)
    extra = {"size": size, "count": count, "transport": transport, **_express_use(t, out)}
    return _report("echo", rt, floors, used, far_end, extra, json_path, out)


def run_qec(
    executor: str = "auto",
    far_end: str = "cpu",
    distance: int = 5,
    count: int = 100_000,
    rate: float | None = None,
    window: int = 64,
    transport: str = "UC",
    floor_iterations: int = 10_000,
    express: bool = True,
    seed: int = 1,
    json_path: str | None = None,
    out: TextIO = sys.stdout,
) -> dict[str, Any]:
    """The decoder loop at an offered ``rate`` (None: as fast as ``window`` allows);
    every correction is checked against the Python decoder."""
    from roce_transceiver.qec import random_syndromes

    requests, expected = random_syndromes(distance, 1024, seed=seed)
    config = {
        "executor": executor,
        "far_end": far_end,
        "handler": "qec",
        "qec": {"distance": distance},
        "completions": False,
        "express": express,
        "qp": {"transport": transport},
    }
    with Transceiver(config) as t:
        print(t.executor_reason, file=out)
        t.roundtrip(count=min(count, 2000), payloads=requests, expected=expected, window=window)
        rt = t.roundtrip(
            count=count,
            payloads=requests,
            expected=expected,
            window=window,
            rate=rate,
            timeout=max(10.0, count * 1e-4),
        )
        used = t.executor
    floors = measure_floors(_floors_for(used, far_end), floor_iterations, size=len(requests[0]))
    extra = {
        "distance": distance,
        "count": count,
        "rate": rate,
        "window": window,
        **_express_use(t, out),
    }
    return _report("qec", rt, floors, used, far_end, extra, json_path, out)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m roce_transceiver.bench.roundtrip [echo|qec]`` for quick runs."""
    args = list(argv if argv is not None else sys.argv[1:])
    if args and args[0] == "qec":
        run_qec()
    else:
        run_roundtrip()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
