"""``roce-transceiver bench roundtrip`` and ``bench qec``: the echo and decoder
loops through the loopback NIC, next to the latency floors of the same run.

``mode="verbs"`` also runs the loop in Verbs mode (roce_transceiver.verbs_mode: the peer
WRITEs and FETCH_ADDs into our NIC, the software ConnectX, which places and acknowledges them;
the serve loop answers with put_signal through it) on the same executor, one request at a time,
a row for each doorbell mode asked for (``nic_handler``: one of doca.nic_handler's values, or
``all``: CPU proxy, GPU_SM_DB and BlueFlame side by side), next to the Ethernet mode's and the
same run's floor. Each row has its request's landing (``landed_us``: the peer sends, our NIC's
ATOMIC ACKNOWLEDGE is back) and, beside it, its doorbell's own floor, "put_signal <mode>
(mean)": on the cuda executor a kernel posts put_signals through GPUNetIO's device API for that
NIC handler, one at a time, each waited for by its CQ poll, in a Verbs loopback of its own with
no serve loop (the doorbell, the software ConnectX, the peer's ACK: no request, no handler).
That kernel times its whole run only, so the row is a mean (total / count), read against the
loop's p50 ("echo verbs <mode> p50 / put_signal <mode> mean"). The cpu executor has no such
kernel: the row gives the reason.

Round trips are timed by the far end (where a request starts and its reply
ends): the host clock for a CPU far end, %globaltimer for a GPU one. Each
figure is printed with the floor it should be read against and the ratio:

- cpu executor                -> cpu_thread_pingpong (two threads, shared memory)
- cuda executor, cpu far end  -> pinned_pingpong (host <-> persistent kernel)
- cuda executor, gpu far end  -> device_block_pingpong (block <-> block)
- any cuda run                -> launch_per_message (what a kernel per message costs)

``bench roundtrip --completions`` (``completions=True``) runs the echo loop three times in the
same run, as the roundtrip app runs it: without completion records (the bare loop), with them
(``queues.completion_batch`` records published together, the default), and with a fence for
each record (``completion_batch: 1``, the way before issue 16). Records are taken in chunks of
1000 round trips with the host draining the ring between them, as the app's peer steps do, and
every record is checked (one per message, in PSN order, its request the one sent, its reply
the echo); the ratio "echo completions p50 / echo p50" is the app's completion overhead
(target: at most 1.10).

``bench qec --rate R`` offers d=5 syndromes open loop at R messages/s over all queues
(``rate=None``, ``--rate max``: as fast as the window allows): syndrome i is due at i / R after
the start and its round trip is counted from its due time, so a loop that falls behind shows
its queue in the percentiles (no coordinated omission); a syndrome that goes out more than one
interval (``--late-us``) after its due time is counted late, one that cannot go out within
``--drop-us`` (default: never) is dropped, counted and never sent. The window (``--window``,
per queue) bounds what is in flight, and the rings are sized for it, so nothing overflows
unseen: a full rx ring is counted (``ring_full``) and the request waits. ``--queues N`` gives
the loop N queues (``queues.count``, steered by QP or UDP source port: ``--steer``) with a far
end each (a CPU thread, or a GPU block), every N-th syndrome of the schedule each. Every
correction is compared with the lookup-table decoder's (``wrong``), and the pool of syndromes is
checked against pymatching (minimum weight) where it is installed. Printed: the percentiles
next to the floors, the offered and the sustained rate, late, dropped, wrong, per queue; JSON
with all of it.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from roce_transceiver.bench.floors import Percentiles, format_table, measure_floors
from roce_transceiver.bench.machine import machine_info
from roce_transceiver.cuda_warps import cuda_warps
from roce_transceiver.stats import Mean
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
        "late": rt.late,
        "dropped": rt.dropped,
        "ring_full": rt.ring_full,
        "max_lag_us": rt.max_lag_ns / 1e3,
        "messages_per_s": rt.messages_per_s,
        "status": rt.status,
        "per_queue": list(rt.per_queue),
        **_far_end_own(rt),
    }


def _far_end_own(rt: RoundTrip) -> dict[str, float]:
    """The far end's own part, a request's and a reply's (us, its clock): building and
    publishing the request, inside the round trip, and checking the reply, after it. Empty for
    a loop whose far end does not time them (Verbs mode's requester)."""
    if not (rt.sent and rt.received and rt.send_ns):
        return {}
    return {
        "far_end_send_us": rt.send_ns / rt.sent / 1e3,
        "far_end_check_us": rt.check_ns / rt.received / 1e3,
    }


def _report(
    loops: dict[str, RoundTrip],
    floors: dict[str, Percentiles | str],
    executor: str,
    far_end: str,
    extra: dict[str, Any],
    json_path: str | None,
    out: TextIO,
    records_ok: bool = True,
    beside: dict[str, dict[str, Mean | str]] | None = None,
) -> dict[str, Any]:
    """The table (every loop, then the floors), ratios to the reference floor, JSON. The first
    loop is the benchmark's own; its figures are the top-level keys of the JSON. ``all_done``
    (the exit status): every loop complete and right, and ``records_ok``. ``beside``: a loop's
    own floors, by loop name (rows under it; a Mean is read against its p50: "<loop> p50 /
    <row without '(mean)'> mean")."""
    beside = beside or {}
    rows: dict[str, Percentiles | str] = {name: _loop_row(rt) for name, rt in loops.items()}
    table: dict[str, Percentiles | Mean | str] = {}
    for name, row in rows.items():
        table[name] = row
        table.update(beside.get(name, {}))
    print(format_table({**table, **floors}, "us"), file=out)
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
        for own, floor in beside.get(name, {}).items():
            if isinstance(floor, Mean):
                mean = own.removesuffix(" (mean)")
                ratios[f"{name} p50 / {mean} mean"] = row.to(floor.unit).p50 / floor.mean
    for k, v in ratios.items():
        print(f"  {k}: {v:.2f}", file=out)
    for name, rt in loops.items():
        offered = f", {rt.late} late, {rt.dropped} dropped" if rt.late or rt.dropped else ""
        print(
            f"  {name}: {rt.received}/{rt.sent} replies, {rt.wrong} wrong, {rt.bad_frames} bad "
            f"frames{offered}, {rt.messages_per_s:,.0f} msgs/s, status {rt.status}",
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
        "all_done": records_ok
        and all(rt.status == "done" and rt.wrong == 0 for rt in loops.values()),
        "machine": machine_info(),
    }
    for name, rt in loops.items():
        own_part = _far_end_own(rt)
        row = rows[name]
        if own_part and isinstance(row, Percentiles):
            send = own_part["far_end_send_us"]
            print(
                f"  {name}: the far end's own part: {send:.2f} us a request to build and "
                f"publish (of the p50 {row.to('us').p50:.2f} us; the rest is the loop's), "
                f"{own_part['far_end_check_us']:.2f} us a reply to check (after its round trip)",
                file=out,
            )
    for name, row in rows.items():
        if isinstance(row, Percentiles):
            p = row.to("us")
            own = "".join(
                f"; {floor.removesuffix(' (mean)')} floor {m.to('us').mean:.2f} us (mean of "
                f"{m.count})"
                for floor, m in beside.get(name, {}).items()
                if isinstance(m, Mean)
            )
            print(
                f"{name}: p50 {p.p50:.2f} us, p99 {p.p99:.2f} us over {p.count} round trips{own}",
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
) -> tuple[dict[str, RoundTrip], dict[str, Any], dict[str, dict[str, Mean | str]]]:
    """The loop in Verbs mode, a row per doorbell mode ("<handler> verbs <nic handler>"), each
    with its put_signal floor beside it ("put_signal <nic handler> (mean)")."""
    loops: dict[str, RoundTrip] = {}
    stats: dict[str, Any] = {}
    beside: dict[str, dict[str, Mean | str]] = {}
    for nh in _nic_handlers(nic_handler, executor, out):
        print(f"verbs mode, NIC handler {nh}:", file=out)
        name = f"{handler} verbs {nh}"
        loops[name], stats[nh] = _verbs_loop(
            executor, handler, count, out, nic_handler=nh, **kwargs
        )
        beside[name] = {f"put_signal {nh} (mean)": stats[nh].pop("put_signal_row")}
    return loops, stats, beside


#: put_signals of the doorbell's floor: a warm-up (the kernel's load, first faults), then at
#: most this many measured.
PUT_SIGNAL_WARMUP = 100
PUT_SIGNAL_COUNT = 2000


def _put_signal_floor(
    executor: str, nic_handler: str, count: int, size: int, out: TextIO
) -> tuple[Mean | str, dict[str, Any]]:
    """The doorbell's floor for ``nic_handler``: ``count`` put_signals of ``size`` bytes (the
    reply's, header included) from a device-API kernel, in a Verbs loopback of its own with
    no serve loop (the loop's peer keeps its signal counts); the mean, or why not."""
    from roce_transceiver.verbs_mode import PUT_SIGNALS_NEED_CUDA, VerbsLoopback, VerbsModeError

    what = {"count": count, "warmup": PUT_SIGNAL_WARMUP, "bytes": size}
    row: Mean | str
    if executor != "cuda":
        row = PUT_SIGNALS_NEED_CUDA
    else:
        try:
            with VerbsLoopback(executor="cuda", nic_handler=nic_handler, serve=False) as v:
                v.put_signals(PUT_SIGNAL_WARMUP, size)
                r = v.put_signals(count, size, timeout=max(10.0, count * 1e-3))
            what.update(r, port=v.stats()["port"])
            if r["timed_out"] or r["errors"] or r["completed"] != count:
                row = f"{r['completed']} of {count} put_signals completed, {r['errors']} errors" + (
                    ", timed out" if r["timed_out"] else ""
                )
            else:
                row = Mean(r["elapsed_ns"] / count, count, "ns")
        except VerbsModeError as e:
            row = str(e)
    if isinstance(row, Mean):
        print(
            f"verbs mode: put_signal floor {nic_handler}: {row.to('us').mean:.2f} us a "
            "put_signal (doorbell + software ConnectX + peer ACK, no handler; the mean of "
            f"{count}, timed in total)",
            file=out,
        )
    else:
        print(f"verbs mode: put_signal floor {nic_handler}: not measured: {row}", file=out)
    what["floor_us"] = row.to("us").mean if isinstance(row, Mean) else row
    return row, what


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
    custom: dict[str, str] | None = None,
) -> tuple[RoundTrip, dict[str, Any]]:
    """The same loop in Verbs mode, one request at a time (a warm-up run first), then its
    doorbell's floor (``put_signal_floor_us``, a mean or why not; ``put_signal_row`` the row).
    ``custom``: handler custom's section."""
    from roce_transceiver.verbs_mode import SLOT_HEADER_BYTES, VerbsLoopback

    with VerbsLoopback(
        handler, executor=executor, distance=distance, nic_handler=nic_handler, custom=custom
    ) as v:
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
    # After the loop's loopback has stopped: a kernel's load waits for a running kernel.
    reply = len(expected[0]) if expected else len(payloads[0]) if payloads else size
    row, stats["put_signal"] = _put_signal_floor(
        executor, nic_handler, min(count, PUT_SIGNAL_COUNT), SLOT_HEADER_BYTES + reply, out
    )
    stats["put_signal_floor_us"] = stats["put_signal"].pop("floor_us")
    stats["put_signal_row"] = row
    return rt, stats


def _express_use(t: Transceiver, out: TextIO) -> dict[str, Any]:
    """How many requests took the express path (after stop(): final counters)."""
    stats = t.stats()
    express, rx = stats["express"], stats["rx_packets"]
    on = t.config["express"]
    print(f"express path {'on' if on else 'off'}: {express} of {rx} packets took it", file=out)
    use: dict[str, Any] = {"express": on, "express_packets": express, "rx_packets": rx}
    e = t.epoch_stats()
    if e.get("batches"):  # a crew's batches (cuda.warps > 1, or the cpu thread's)
        batches, frames = e["batches"], e["batch_frames"]
        cycles = [c / batches for c in e.get("batch_cycles", (0, 0, 0, 0))]
        use["batches"] = {"batches": batches, "frames": frames, "cycles_per_batch": cycles}
        line = f"batches: {batches} took {frames} requests (mean {frames / batches:.1f})"
        if any(cycles):  # a GPU's clock (the cpu thread keeps none)
            line += (
                f"; SM cycles a batch: classify {cycles[0]:.0f}, commit {cycles[1]:.0f}, "
                f"execute {cycles[2]:.0f}, publish {cycles[3]:.0f}"
            )
        print(line, file=out)
    return use


#: Round trips per step of the completions loops, as the roundtrip app's peer takes them
#: (peer.chunk): the host drains the completion ring between steps.
COMPLETION_CHUNK = 1000


def _join(parts: list[RoundTrip]) -> RoundTrip:
    """Consecutive runs of one loop as one: counts added, round trips in order."""
    status = next((r.status for r in parts if r.status != "done"), "done")
    return RoundTrip(
        status=status,
        sent=sum(r.sent for r in parts),
        received=sum(r.received for r in parts),
        wrong=sum(r.wrong for r in parts),
        bad_frames=sum(r.bad_frames for r in parts),
        ring_full=sum(r.ring_full for r in parts),
        elapsed_ns=sum(r.elapsed_ns for r in parts),
        rtt_ns=np.concatenate([r.rtt_ns for r in parts]),
        late=sum(r.late for r in parts),
        dropped=sum(r.dropped for r in parts),
        max_lag_ns=max(r.max_lag_ns for r in parts),
        slow_checks=sum(r.slow_checks for r in parts),
        send_ns=sum(r.send_ns for r in parts),
        check_ns=sum(r.check_ns for r in parts),
    )


def _check_records(records: list[Any], sent: list[int], payload: bytes, first_psn: int) -> str:
    """'' when the records are one per message in PSN order, each request the one sent (the
    far end's request number in bytes 0..3 of each run's echo, counted from 0 in each run)
    and each reply its echo; else the first thing wrong."""
    from roce_transceiver.protocol import psn_add

    if len(records) != sum(sent):
        return f"{len(records)} records for {sum(sent)} messages"
    k = 0
    for run, n in enumerate(sent):
        for i in range(n):
            c, psn = records[k], psn_add(first_psn, k)
            want = i.to_bytes(4, "little") + payload[4:] if len(payload) >= 4 else payload
            if c.psn != psn:
                return f"record {k} (run {run}): PSN {c.psn:#x}, expected {psn:#x}"
            if c.request != want or c.reply != want:
                return f"record {k} (run {run}, request {i}): not the request sent, or its echo"
            k += 1
    return ""


def _drain(t: Transceiver, n: int, timeout: float = 10.0) -> list[Any]:
    """The host's turn, as the app's operator takes it between the peer's steps: the ``n``
    records the loop wrote, shown once it has gone idle (or what came within ``timeout``)."""
    records: list[Any] = []
    deadline = time.monotonic() + timeout
    while len(records) < n and time.monotonic() < deadline:
        records += t.receive(timeout=0.1, max_messages=1 << 20)
    return records


def _completions_loop(
    config: dict[str, Any], count: int, size: int, out: TextIO
) -> tuple[RoundTrip, dict[str, Any]]:
    """The echo ping-pong with completion records, in steps of COMPLETION_CHUNK round trips,
    the host draining (and checking) every record between steps."""
    from roce_transceiver.protocol import psn_add
    from roce_transceiver.transceiver import request_payloads

    payload = request_payloads(size, None, None)[0]
    warm = min(count, COMPLETION_CHUNK)
    with Transceiver(config) as t:
        t.roundtrip(count=warm, size=size)  # warm-up: caches, clocks, first faults
        _drain(t, warm)
        first_psn = psn_add(int(t.config["qp"]["rx_psn"]), warm)
        parts: list[RoundTrip] = []
        records: list[Any] = []
        while (left := count - sum(r.sent for r in parts)) > 0:
            n = min(left, COMPLETION_CHUNK)
            parts.append(t.roundtrip(count=n, size=size, timeout=max(10.0, n * 1e-4)))
            records += _drain(t, parts[-1].received)
            if parts[-1].status != "done":
                break
        stats = t.stats()
    rt = _join(parts)
    problem = _check_records(records, [r.sent for r in parts], payload, first_psn)
    checked = {
        "records": len(records),
        "completion_drops": stats["completion_drops"],
        "completion_batch": t.config["queues"]["completion_batch"],
        "records_ok": not problem and stats["completion_drops"] == 0,
        "problem": problem or None,
    }
    print(
        f"  completion_batch {checked['completion_batch']}: {len(records)} records, "
        f"{stats['completion_drops']} dropped, " + (problem or "each one the message sent"),
        file=out,
    )
    return rt, checked


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
    completions: bool = False,
    completion_batch: int | None = None,
    nic_handler: str = "all",
    custom: dict[str, str] | None = None,
    repeats: int = 3,
    warps: int = 0,
    reliable: bool = False,
) -> dict[str, Any]:
    """Echo ping-pong (window 1) of ``count`` ``size``-byte messages, then the floors; with
    ``reliable`` the echo over UC, RC and RC with qp.retransmit, ``repeats`` each (the
    requester's cost on the lossless path); with
    ``mode="verbs"`` the Verbs-mode loop too, on the same executor, for each ``nic_handler``;
    with ``completions`` the loop with completion records twice (batched:
    ``completion_batch``, None for the default; and a fence each) next to the bare one (module
    docstring); with ``custom`` (a custom section whose handler echoes) that handler's loop and
    the echo's, ``repeats`` each, alternating, compared by the fastest p50 of each."""
    out = out if out is not None else sys.stdout  # at call time: a test may have replaced it
    config: dict[str, Any] = {
        "executor": executor,
        "far_end": far_end,
        "handler": "echo",
        "completions": False,
        "express": express,
        "qp": {"transport": transport},
        "cuda": {"warps": warps},
    }
    with Transceiver(config) as t:
        print(t.executor_reason, file=out)
        t.roundtrip(count=min(count, 1000), size=size)  # warm-up: caches, clocks, first faults
        rt = t.roundtrip(count=count, size=size, timeout=max(10.0, count * 1e-4))
        used = t.executor
    extra: dict[str, Any] = {
        "size": size,
        "count": count,
        "transport": transport,
        "mode": mode,
        "warps": cuda_warps(t.config) if used == "cuda" else 0,
    }
    extra.update(_express_use(t, out))
    loops = {"echo": rt}
    if completions:
        checks: dict[str, Any] = {}
        batched: dict[str, Any] = {"completions": True, "executor": used}
        if completion_batch is not None:
            batched["queues"] = {"completion_batch": completion_batch}
        each = {"completions": True, "executor": used, "queues": {"completion_batch": 1}}
        for name, changes in (("echo completions", batched), ("echo completions each", each)):
            print(f"{name}:", file=out)
            loops[name], checks[name] = _completions_loop({**config, **changes}, count, size, out)
        extra["completions"] = {"loops": checks}
        bare, recorded = rt.percentiles("us"), loops["echo completions"].percentiles("us")
        if bare is not None and recorded is not None:
            extra["completions"]["p50_ratio"] = recorded.p50 / bare.p50
            print(
                f"  echo completions p50 / echo p50: {recorded.p50 / bare.p50:.2f} "
                "(target <= 1.10)",
                file=out,
            )
    if custom is not None:
        extra["custom"] = _custom_against_echo(
            {**config, "executor": used}, custom, repeats, rt, count, size, loops, out
        )
    if reliable:
        extra["reliable"] = _reliable_against_uc(
            {**config, "executor": used}, repeats, count, size, loops, out
        )
    beside: dict[str, dict[str, Mean | str]] = {}
    if mode == "verbs":
        verbs, extra["verbs"], beside = _verbs_loops(
            used, "echo", count, out, nic_handler, size=size
        )
        loops.update(verbs)
        if custom is not None:  # the user's echo in the serve loop too, beside the built-in one
            verbs, extra["verbs_custom"], custom_beside = _verbs_loops(
                used, "custom", count, out, nic_handler, size=size, custom=custom
            )
            loops.update(verbs)
            beside.update(custom_beside)
    floors = measure_floors(_floors_for(used, far_end), floor_iterations, size=size)
    # Complete and right includes every completion record.
    checks = extra.get("completions", {}).get("loops", {})
    records_ok = all(c["records_ok"] for c in checks.values())
    return _report(loops, floors, used, far_end, extra, json_path, out, records_ok, beside)


def _plain_loop(config: dict[str, Any], count: int, size: int) -> RoundTrip:
    with Transceiver(config) as t:
        t.roundtrip(count=min(count, 1000), size=size)  # warm-up, as the first loop's
        return t.roundtrip(count=count, size=size, timeout=max(10.0, count * 1e-4))


def _start_seconds(config: dict[str, Any]) -> dict[str, float]:
    """Seconds from Transceiver() to a running loop with the user's handler: with a handler
    cache of its own, empty (the handler is built), then again (from that cache)."""
    seconds = []
    previous = os.environ.get("XDG_CACHE_HOME")
    with tempfile.TemporaryDirectory(prefix="rt-bench-cache-") as cache:
        os.environ["XDG_CACHE_HOME"] = cache  # custom_handler.cache_dir() reads it at each build
        try:
            for _ in range(2):
                started = time.perf_counter()
                with Transceiver(config):
                    seconds.append(time.perf_counter() - started)
        finally:
            if previous is None:
                del os.environ["XDG_CACHE_HOME"]
            else:
                os.environ["XDG_CACHE_HOME"] = previous
    return {"cold_start_s": seconds[0], "cached_start_s": seconds[1]}


def _custom_against_echo(
    config: dict[str, Any],
    custom: dict[str, str],
    repeats: int,
    first_echo: RoundTrip,
    count: int,
    size: int,
    loops: dict[str, RoundTrip],
    out: TextIO,
) -> dict[str, Any]:
    """A user handler's echo against the built-in one: ``repeats`` loops of each, a fresh
    transceiver each, alternating (a loop's latency differs from one start to the next more
    than between the handlers); ``loops`` gets the fastest of each, "echo" and "custom"."""
    custom_config = {**config, "handler": "custom", "custom": custom}
    starts = _start_seconds(custom_config)
    print(
        f"custom handler start: {starts['cold_start_s']:.3f} s with a new handler (built: on "
        f"the cuda executor compiled and linked into the engine's kernels), "
        f"{starts['cached_start_s']:.3f} s from the cache (target <= 3 s cold)",
        file=out,
    )
    echoes, customs = [first_echo], []
    for i in range(repeats):
        customs.append(_plain_loop(custom_config, count, size))
        if i + 1 < repeats:
            echoes.append(_plain_loop(config, count, size))

    def p50(rt: RoundTrip) -> float:
        p = rt.percentiles("us")
        return p.p50 if p is not None else float("inf")

    loops["echo"] = min(echoes, key=p50)
    loops["custom"] = min(customs, key=p50)
    ratio = p50(loops["custom"]) / p50(loops["echo"])
    print(
        f"custom handler {custom['source']} ({custom['entry']}): p50 "
        + ", ".join(f"{p50(r):.2f}" for r in customs)
        + " us; built-in echo "
        + ", ".join(f"{p50(r):.2f}" for r in echoes)
        + f" us; fastest custom / fastest echo: {ratio:.3f} (target <= 1.05)",
        file=out,
    )
    return {
        "source": custom["source"],
        "entry": custom["entry"],
        **starts,
        "cold_start_target_s": 3.0,
        "repeats": repeats,
        "custom_p50_us": [p50(r) for r in customs],
        "echo_p50_us": [p50(r) for r in echoes],
        "p50_ratio": ratio,
        "target": 1.05,
    }


#: The reliable-replies comparison's loops, by row name: the transport, and qp.retransmit.
RELIABLE_LOOPS = {
    "echo UC": ("UC", False),
    "echo RC": ("RC", False),
    "echo RC retransmit": ("RC", True),
}


def _reliable_against_uc(
    config: dict[str, Any],
    repeats: int,
    count: int,
    size: int,
    loops: dict[str, RoundTrip],
    out: TextIO,
) -> dict[str, Any]:
    """The lossless path's cost of the RC requester (qp.retransmit; the far end ACKs every
    reply, the engine keeps each until then): the echo over UC, over RC (ACK requests
    answered, replies sent once) and over RC with retransmit, ``repeats`` loops of each, a
    fresh transceiver each, in turn; ``loops`` gets the fastest p50 of each."""
    runs: dict[str, list[RoundTrip]] = {name: [] for name in RELIABLE_LOOPS}
    resent = 0
    for _ in range(repeats):
        for name, (transport, retransmit) in RELIABLE_LOOPS.items():
            # A timer far past a round trip: a far end descheduled for a while on a busy
            # host would otherwise cost resends the lossless path does not have.
            qp = {"transport": transport, "retransmit": retransmit, "ack_timeout_us": 100_000}
            with Transceiver({**config, "qp": qp}) as t:
                t.roundtrip(count=min(count, 1000), size=size)  # warm-up
                runs[name].append(
                    t.roundtrip(count=count, size=size, timeout=max(10.0, count * 1e-4))
                )
                stats = t.stats()
            if retransmit:  # a lossless loop sends nothing twice, and every reply is acked
                resent += stats["rc_retransmits"] + stats["rc_timeouts"] + stats["rc_errors"]

    def p50(rt: RoundTrip) -> float:
        p = rt.percentiles("us")
        return p.p50 if p is not None else float("inf")

    fastest = {name: min(rs, key=p50) for name, rs in runs.items()}
    loops.update(fastest)
    uc, rc, reliable = (p50(fastest[n]) for n in RELIABLE_LOOPS)
    print(
        f"reliable replies: echo p50 UC {uc:.2f} / RC {rc:.2f} / RC retransmit {reliable:.2f} us "
        f"(fastest of {repeats}); RC retransmit / UC {reliable / uc:.3f}, / RC "
        f"{reliable / rc:.3f}; resends, timeouts and errors in the lossless loops: {resent}",
        file=out,
    )
    return {
        "repeats": repeats,
        "p50_us": {name: [p50(r) for r in rs] for name, rs in runs.items()},
        "retransmit_over_uc": reliable / uc,
        "retransmit_over_rc": reliable / rc,
        "lossless_resends": resent,
    }


#: The rings a queue gets for a window: rx slots for every request in flight twice over,
#: tx slots for a reply and an RC ACK of each (at least the defaults, at most the schema's).
def _ring_depths(window: int) -> dict[str, int]:
    def pow2(n: int) -> int:
        return 1 << max(8, (n - 1).bit_length())

    return {"rx_depth": pow2(2 * window), "tx_depth": pow2(4 * window)}


#: The largest window the rings can be sized for (queues.rx_depth / tx_depth: 65536 at most).
MAX_WINDOW = 65536 // 4


def _pymatching_check(distance: int, requests: list[bytes], expected: list[bytes]) -> str:
    """Whether the pool's lookup-table corrections are minimum weight by pymatching."""
    from roce_transceiver.qec import RotatedSurfaceCode, pymatching_replies, unpack_correction

    try:
        reference = pymatching_replies(RotatedSurfaceCode(distance), requests)
    except ValueError as e:  # pymatching is not installed
        return f"not checked ({e})"

    def weight(reply: bytes) -> int:
        x, z = unpack_correction(reply)
        return int(x.sum()) + int(z.sum())

    heavier = sum(weight(e) != weight(r) for e, r in zip(expected, reference, strict=True))
    n = len(requests)
    return f"{n - heavier}/{n} of the pool minimum weight by pymatching"


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
    queues: int = 1,
    steer: str = "qp",
    late_us: float | None = None,
    drop_us: float | None = None,
    nic_handler: str = "all",
    warps: int = 0,
) -> dict[str, Any]:
    """The decoder loop at an offered ``rate`` over ``queues`` queues (None: as fast as
    ``window`` allows, per queue); every correction is checked against the Python decoder's
    table (module docstring). With ``mode="verbs"``, the Verbs-mode loop for each
    ``nic_handler`` too."""
    from roce_transceiver.qec import random_syndromes

    out = out if out is not None else sys.stdout  # at call time: a test may have replaced it

    if not 1 <= window <= MAX_WINDOW:
        raise ValueError(f"window={window}: must be 1 to {MAX_WINDOW} (the rings' depth)")
    requests, expected = random_syndromes(distance, 1024, seed=seed)
    config = {
        "executor": executor,
        "far_end": far_end,
        "handler": "qec",
        "qec": {"distance": distance},
        "completions": False,
        "express": express,
        "qp": {"transport": transport},
        "queues": {"count": queues, "steer": steer, **_ring_depths(window)},
        "cuda": {"warps": warps},
    }
    pool = _pymatching_check(distance, requests, expected)
    with Transceiver(config) as t:
        print(t.executor_reason, file=out)
        warm = min(count, 2000 * queues)
        t.roundtrip(count=warm, payloads=requests, expected=expected, window=window, queues=queues)
        rt = t.roundtrip(
            count=count,
            payloads=requests,
            expected=expected,
            window=window,
            rate=rate,
            timeout=max(10.0, count * 1e-4, 2 * count / rate if rate else 0.0),
            queues=queues,
            late_after=None if late_us is None else late_us * 1e-6,
            drop_after=None if drop_us is None else drop_us * 1e-6,
        )
        used = t.executor
    extra: dict[str, Any] = {
        "distance": distance,
        "count": count,
        "rate": rate,
        "rate_offered": rate if rate else "max",
        "rate_sustained": rt.messages_per_s,
        "window": window,
        "queues": queues,
        "steer": steer,
        "warps": cuda_warps(t.config) if used == "cuda" else 0,
        "late_us": late_us if late_us is not None else (1e6 / rate if rate else None),
        "drop_us": drop_us,
        "pool": pool,
        "mode": mode,
        **_express_use(t, out),
    }
    offered = f"{rate:,.0f} msgs/s offered" if rate else "offered flat out"
    print(
        f"qec d={distance}, {queues} queue{'s' if queues > 1 else ''} ({steer}), window "
        f"{window}, warps {extra['warps']}: {offered}, {rt.messages_per_s:,.0f} msgs/s "
        f"sustained; {rt.late} late "
        f"(max lag {rt.max_lag_ns / 1e3:.2f} us), {rt.dropped} dropped, {rt.wrong} wrong, "
        f"{rt.ring_full} ring full; {pool}",
        file=out,
    )
    for q, r in enumerate(rt.per_queue):
        print(
            f"  queue {q}: {r['received']}/{r['sent']} replies, {r['wrong']} wrong, "
            f"{r['late']} late, {r['dropped']} dropped, status {r['status']}",
            file=out,
        )
    loops = {"qec": rt}
    beside: dict[str, dict[str, Mean | str]] = {}
    if mode == "verbs":  # one syndrome at a time: Verbs mode's loop here is a ping-pong
        verbs, extra["verbs"], beside = _verbs_loops(
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
    return _report(loops, floors, used, far_end, extra, json_path, out, beside=beside)


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
