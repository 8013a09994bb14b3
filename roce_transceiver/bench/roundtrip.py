"""``roce-transceiver bench roundtrip`` and ``bench qec``: the echo and decoder
loops through the loopback NIC, next to the latency floors of the same run.

``mode="verbs"`` also runs the loop in Verbs mode (roce_transceiver.verbs_mode: the peer
WRITEs and FETCH_ADDs into our NIC, the software ConnectX, which places and acknowledges them;
the serve loop answers with put_signal through it) on the same executor, one request at a time,
a row for each doorbell mode asked for (``nic_handler``: one of doca.nic_handler's values, or
``all``: CPU proxy, GPU_SM_DB and BlueFlame side by side), next to the Ethernet mode's and the
same run's floor.

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

import numpy as np

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


def _loop_dict(rt: RoundTrip) -> dict[str, Any]:
    row = _loop_row(rt)
    return {
        "latency": row.as_dict() if isinstance(row, Percentiles) else row,
        "replies": rt.received,
        "sent": rt.sent,
        "wrong": rt.wrong,
        "bad_frames": rt.bad_frames,
        "messages_per_s": rt.messages_per_s,
        "status": rt.status,
    }


def _report(
    loops: dict[str, RoundTrip],
    floors: dict[str, Percentiles | str],
    executor: str,
    far_end: str,
    extra: dict[str, Any],
    json_path: str | None,
    out: TextIO,
) -> dict[str, Any]:
    """The table (every loop, then the floors), ratios to the reference floor, JSON. The first
    loop is the benchmark's own; its figures are the top-level keys of the JSON."""
    rows: dict[str, Percentiles | str] = {name: _loop_row(rt) for name, rt in loops.items()}
    print(format_table({**rows, **floors}, "us"), file=out)
    ref = _reference_floor(executor, far_end)
    ratios: dict[str, float] = {}
    for name, row in rows.items():
        if not isinstance(row, Percentiles):
            continue
        if isinstance(floors.get(ref), Percentiles):
            ratios[f"{name} p50 / {ref} p50"] = row.p50 / floors[ref].p50  # type: ignore[union-attr]
        launch = floors.get("launch_per_message")
        if isinstance(launch, Percentiles):
            ratios[f"launch_per_message p50 / {name} p50"] = launch.p50 / row.p50
    for k, v in ratios.items():
        print(f"  {k}: {v:.2f}", file=out)
    for name, rt in loops.items():
        print(
            f"  {name}: {rt.received}/{rt.sent} replies, {rt.wrong} wrong, {rt.bad_frames} bad "
            f"frames, {rt.messages_per_s:,.0f} msgs/s, status {rt.status}",
            file=out,
        )
    title, main = next(iter(loops.items()))
    result: dict[str, Any] = {
        "benchmark": title,
        "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "executor": executor,
        "far_end": far_end,
        **extra,
        "loop": _loop_dict(main)["latency"],
        "loops": {name: _loop_dict(rt) for name, rt in loops.items()},
        "floors": {k: v.as_dict() if isinstance(v, Percentiles) else v for k, v in floors.items()},
        "ratios": ratios,
        **{k: v for k, v in _loop_dict(main).items() if k != "latency"},
        # Exit status: every loop complete and right.
        "all_done": all(rt.status == "done" and rt.wrong == 0 for rt in loops.values()),
        "machine": machine_info(),
    }
    for name, row in rows.items():
        if isinstance(row, Percentiles):
            p = row.to("us")
            print(
                f"{name}: p50 {p.p50:.2f} us, p99 {p.p99:.2f} us over {p.count} round trips",
                file=out,
            )
    if json_path:
        Path(json_path).write_text(json.dumps(result, indent=2) + "\n")
    return result


def _nic_handlers(nic_handler: str, executor: str, out: TextIO) -> tuple[str, ...]:
    """The doorbell modes a Verbs-mode run measures: one, or ``all`` of those served (on the
    GPU, BlueFlame only where this build's GPUNetIO headers can ring it)."""
    from roce_transceiver import _core
    from roce_transceiver.verbs_mode import SERVED_HANDLERS, resolve_nic_handler

    if nic_handler != "all":
        return (resolve_nic_handler(nic_handler),)
    if executor == "cuda" and not _core.gpunetio_info()["blueflame"]:
        print(
            "verbs mode: no gpu_sm_bf row: this build's GPUNetIO headers cannot ring BlueFlame "
            f"({_core.gpunetio_info()['source']}; docs/verbs_mode.md)",
            file=out,
        )
        return tuple(h for h in SERVED_HANDLERS if h != "gpu_sm_bf")
    return SERVED_HANDLERS


def _verbs_loops(
    executor: str,
    handler: str,
    count: int,
    out: TextIO,
    nic_handler: str,
    **kwargs: Any,
) -> tuple[dict[str, RoundTrip], dict[str, Any]]:
    """The loop in Verbs mode, a row per doorbell mode ("<handler> verbs <nic handler>")."""
    loops: dict[str, RoundTrip] = {}
    stats: dict[str, Any] = {}
    for nh in _nic_handlers(nic_handler, executor, out):
        print(f"verbs mode, NIC handler {nh}:", file=out)
        loops[f"{handler} verbs {nh}"], stats[nh] = _verbs_loop(
            executor, handler, count, out, nic_handler=nh, **kwargs
        )
    return loops, stats


def _verbs_loop(
    executor: str,
    handler: str,
    count: int,
    out: TextIO,
    size: int = 32,
    payloads: list[bytes] | None = None,
    expected: list[bytes] | None = None,
    distance: int = 3,
    nic_handler: str = "auto",
) -> tuple[RoundTrip, dict[str, Any]]:
    """The same loop in Verbs mode, one request at a time (a warm-up run first)."""
    from roce_transceiver.verbs_mode import VerbsLoopback

    with VerbsLoopback(handler, executor=executor, distance=distance, nic_handler=nic_handler) as v:
        print(f"verbs mode: {v.executor_reason}", file=out)
        v.roundtrip(min(count, 1000), size, payloads=payloads, expected=expected)
        rt = v.roundtrip(
            count, size, payloads=payloads, expected=expected, timeout=max(10.0, count * 1e-3)
        )
    stats = v.stats()
    if v.landed_ns.size:
        landed = Percentiles.from_samples(v.landed_ns.astype(np.float64), "ns").to("us")
        stats["landed_us"] = landed.as_dict()
        print(
            f"verbs mode: request landed (our ATOMIC ACK back at the peer) p50 {landed.p50:.2f} "
            f"us, p99 {landed.p99:.2f} us; the rest of each round trip is the reply's",
            file=out,
        )
    port = stats["port"]
    print(
        f"verbs mode: serve loop {stats['server']['state']}, {stats['server']['served']} "
        f"served; software ConnectX {port['wqes']} WQEs ({port['bf_wqes']} from the BlueFlame "
        f"window), {port['completions']} completions, {port['errors']} errors, "
        f"{port['retransmits']} retransmits; as responder {port['requests']} requests, "
        f"{port['atomics']} atomics, {port['naks_sent']} NAKs",
        file=out,
    )
    return rt, stats


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
    out: TextIO | None = None,
    mode: str = "ethernet",
    nic_handler: str = "all",
) -> dict[str, Any]:
    """Echo ping-pong (window 1) of ``count`` ``size``-byte messages, then the floors; with
    ``mode="verbs"`` the Verbs-mode loop too, on the same executor, for each ``nic_handler``.
    ``out``: where the report goes (None: the stdout of the time of the call)."""
    out = out or sys.stdout
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
    extra: dict[str, Any] = {"size": size, "count": count, "transport": transport, "mode": mode}
    extra.update(_express_use(t, out))
    loops = {"echo": rt}
    if mode == "verbs":
        verbs, extra["verbs"] = _verbs_loops(used, "echo", count, out, nic_handler, size=size)
        loops.update(verbs)
    floors = measure_floors(_floors_for(used, far_end), floor_iterations, size=size)
    return _report(loops, floors, used, far_end, extra, json_path, out)


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
    out: TextIO | None = None,
    mode: str = "ethernet",
    nic_handler: str = "all",
) -> dict[str, Any]:
    """The decoder loop at an offered ``rate`` (None: as fast as ``window`` allows);
    every correction is checked against the Python decoder."""
    out = out or sys.stdout
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
    extra: dict[str, Any] = {
        "distance": distance,
        "count": count,
        "rate": rate,
        "window": window,
        "mode": mode,
        **_express_use(t, out),
    }
    loops = {"qec": rt}
    if mode == "verbs":  # one syndrome at a time: Verbs mode's loop here is a ping-pong
        verbs, extra["verbs"] = _verbs_loops(
            used,
            "qec",
            count,
            out,
            nic_handler,
            payloads=requests,
            expected=expected,
            distance=distance,
        )
        loops.update(verbs)
    floors = measure_floors(_floors_for(used, far_end), floor_iterations, size=len(requests[0]))
    return _report(loops, floors, used, far_end, extra, json_path, out)


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
