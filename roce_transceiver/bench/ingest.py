"""``roce-transceiver bench ingest``: an HSB stream into the frames handler, at the rate the
engine takes it, next to a copy of the same bytes by the same GPU resources.

Like a ConnectX writing into GPU memory: on the cuda executor the rx ring is in device memory
(the loopback wire's GPU side), filled with the whole stream before the loop starts
(``Transceiver.preload``), so what is measured is the engine alone: decode, ICRC, PSN and
frame accounting, placement into the pages, the page CRC at each frame's end. Per payload
size (64 B, 1 KiB, 4 KiB) and with and without the metadata record: frames of 64 KiB in UC
RDMA WRITE Only packets. The rate is timed by the engine's own clock (%globaltimer on the
GPU): from the first frame's record to the last one's, over the packets in between. Every
frame is checked: whole, and its CRC-32 that of the bytes sent.

With several queues (``--queues``, queues.count) there is a stream a queue, each on its queue's
QP and pages, all preloaded, so the queues' engines (a block each: an SM each) take them at
once; the rate is every queue's packets over the span from the first record to the last.

The floors, in the same run: a device-to-device copy of the same payload bytes by the engine's
resources (one warp, the crew's warps, one whole SM of 1024 threads; a block of each per
queue), timed with CUDA events (cupy); and the plain per-packet pass of the row's own packets
by the same SMs (``_core.floor_plain_pass``: a block a queue of the crew's threads, a thread a
packet doing the header checks, the ICRC and the placement copy in one pass, the engine's own
``icrc_place``, with no batch, no commit and no ordering), in Gb/s of payload and in Mpps; it
must pass every packet, or the row fails. On the cpu executor, one thread's memcpy of the same
bytes (numpy).

Then the frame-end-to-host latency (frame_latency.py): frames one at a time on the loopback
wire, from the last packet's arrival to the record on the host, per ``cuda.epoch_us``, next to
the pinned ping-pong of the same run.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from roce_transceiver.bench import frame_latency
from roce_transceiver.bench.machine import machine_info
from roce_transceiver.config import load_config
from roce_transceiver.peers.link import Addresses
from roce_transceiver.peers.sensor import HSB_SOURCE_PORT, Sensor
from roce_transceiver.schema import with_overrides
from roce_transceiver.transceiver import Transceiver

__all__ = ["PAYLOADS", "run"]

PAYLOADS = (64, 1024, 4096)
FRAME_BYTES = 65536
RING = 16384  # packets preloaded per row (the rx ring's depth)
HEADERS = 78 + 4  # Ethernet, IPv4, UDP, BTH, RETH, ImmDt; ICRC
MAX_PAGES = 4096  # frames.pages at most, shared by the queues


def _slot_bytes(payload: int) -> int:
    need = payload + HEADERS + 16
    return max(256, -(-need // 64) * 64)


def _config(
    executor: str,
    payload: int,
    metadata: bool,
    frames: int,
    warps: int,
    queues: int = 1,
    frame_bytes: int = FRAME_BYTES,
    ring: int = RING,
) -> dict:
    """``frames`` pages a queue: each frame of a queue's stream has a page of its own."""
    config: dict[str, Any] = {
        "executor": executor,
        "far_end": "gpu" if executor == "cuda" else "cpu",
        "handler": "frames",
        "qp": {"transport": "UC"},
        "frames": {
            "pages": frames * queues,
            "page_bytes": frame_bytes + (128 if metadata else 0),
            "metadata": metadata,
        },
        "queues": {
            "count": queues,
            "rx_depth": ring,
            "slot_bytes": _slot_bytes(payload),
            "completion_depth": 4096,
        },
    }
    if executor == "cuda":
        config["cuda"] = {"warps": warps}
        # The stream step takes a packet a thread: a batch of the crew's threads.
        config["queues"]["batch"] = 32 * warps
    return config


def _stream(
    payload: int,
    metadata: bool,
    queues: int = 1,
    frame_bytes: int = FRAME_BYTES,
    ring: int = RING,
) -> tuple[int, list[Any], list[bytes]]:
    """Frames (as many as a queue's ring holds) of a stream a queue, each sensor on its queue's
    QP and pages, and their packets, the streams' in turn as they would meet on one wire."""
    per_frame = -(-frame_bytes // payload) + (1 if metadata else 0)
    frames = min(ring // per_frame, MAX_PAGES // queues)  # a page a frame
    if frames < 1:
        raise ValueError(
            f"a frame of {frame_bytes} bytes is {per_frame} packets: more than the rx ring's "
            f"{ring} slots"
        )
    cfg = load_config(_config("cpu", payload, metadata, frames, 1, queues, frame_bytes, ring))
    streams = []
    for q in range(queues):
        base = Sensor.for_config(cfg, payload=payload)
        sensor = Sensor(
            dataclasses.replace(
                Addresses.mirror(cfg, own_port=HSB_SOURCE_PORT),
                their_qpn=cfg["qp"]["qpn"] + q,
                own_qpn=cfg["qp"]["peer_qpn"] + q,
            ),
            va=base.va + q * frames * base.page_bytes,
            rkey=base.rkey,
            page_bytes=base.page_bytes,
            pages=frames,
            payload=payload,
            metadata=metadata,
            first_psn=cfg["qp"]["rx_psn"],
        )
        streams.append(list(sensor.frames(frames, frame_bytes)))
    sent = [s for stream in streams for s in stream]
    packets = [
        p for n in range(frames) for stream in streams for p in stream[n].packets
    ]  # frame n of every stream, then frame n + 1
    return per_frame, sent, packets


def _profile(epochs: dict[str, Any]) -> dict[str, Any]:
    """A crew's SM cycles per frame taken in batches, by phase (batch.h)."""
    frames = epochs.get("batch_frames", 0)
    if not frames:
        return {}
    out: dict[str, Any] = {
        "batch_depth": epochs["batch_depth"],
        "batches": epochs["batches"],
        "frames_per_batch": frames / max(1, epochs["batches"]),
    }
    if any(epochs["batch_cycles"]):  # a GPU's clock (a CPU thread's crew has none)
        phases = ("classify", "commit", "execute", "publish")
        out["cycles_per_frame"] = {
            p: c / frames for p, c in zip(phases, epochs["batch_cycles"], strict=True)
        }
        # The stream step's classify, the crew's: poll, the headers, the pass over the bytes.
        *parts, counted = epochs["classify_cycles"]
        out["classify_cycles_per_frame"] = {
            p: c / max(1, counted) for p, c in zip(("poll", "header", "pass"), parts, strict=False)
        }
        # Inside the commit: runs taken at once, frame ends (with records), the responder's
        # decisions; the rest of it is the packets it walked one by one.
        out["commit_cycles_per_frame"] = {
            p: c / frames
            for p, c in zip(("runs", "ends", "responder"), epochs["commit_cycles"], strict=True)
        }
    return out


def _row(
    executor: str,
    payload: int,
    metadata: bool,
    warps: int,
    queues: int,
    stream: tuple[int, list[Any], list[bytes]],
    out: TextIO,
    frame_bytes: int = FRAME_BYTES,
    ring: int = RING,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """``extra``: dotted keys set on the configuration (bench graph's ``cuda.epoch_us``)."""
    per_frame, sent, packets = stream
    frames = len(sent) // queues  # a queue's
    config = _config(executor, payload, metadata, frames, warps, queues, frame_bytes, ring)
    t = Transceiver(with_overrides(config, extra or {}))
    if t.preload(packets) != len(packets):
        raise RuntimeError(f"{len(packets)} packets do not fit {queues} rx rings of {ring}")
    got: list[tuple[int, Any, int]] = []  # (queue, frame, done_ns)
    with t:
        deadline = time.monotonic() + 120.0
        while len(got) < len(sent) and time.monotonic() < deadline:
            for f in t.frames(timeout=1.0):
                got.append((f.queue, (f.frame_number, f.ok, f.crc32, f.bytes), f.done_ns))
                f.release()
        stats = t.stats()
    epochs = t.epoch_stats()
    whole = 0
    for q in range(queues):
        mine = [g for g in got if g[0] == q]
        expect = sent[q * frames : (q + 1) * frames]
        whole += sum(
            1
            for (_, (n, ok, crc, size), _), s in zip(mine, expect, strict=False)
            if ok and n == s.frame_number and crc == zlib.crc32(s.content) and size == frame_bytes
        )
    # The engines' clock (one for the GPU), first record to last: the packets of every frame
    # after the first.
    done = sorted(g[2] for g in got)
    span_ns = done[-1] - done[0] if len(done) > 1 else 0
    timed = (len(got) - 1) * per_frame
    pps = timed / (span_ns * 1e-9) if span_ns > 0 else 0.0
    row = {
        "payload": payload,
        "metadata": metadata,
        "warps": warps if executor == "cuda" else 0,
        "queues": queues,
        "sms": queues if executor == "cuda" else 0,
        "frames": len(sent),
        "packets": len(packets),
        "frames_whole": whole,
        "frames_dropped": stats["frames_dropped"],
        "packets_per_s": pps,
        "gbit_per_s": pps * payload * 8 / 1e9,
        "span_ns": span_ns,
        "profile": _profile(epochs),
    }
    who = f" warps {warps:>2}" if executor == "cuda" else ""
    print(
        f"  {executor}{who} queues {queues:>2} payload {payload:>4} B metadata "
        f"{'on ' if metadata else 'off'}: {whole}/{len(sent)} frames whole, "
        f"{pps / 1e6:.3f} Mpps, {row['gbit_per_s']:.2f} Gb/s",
        file=out,
    )
    return row


def _copy_floor_gpu(total_bytes: int, warps: int, blocks: int = 1) -> dict[str, float]:
    """Gb/s of a device-to-device copy of ``total_bytes`` by one warp, by ``warps`` warps (the
    crew's threads) and by one 1024-thread block, a block each on ``blocks`` SMs (cupy
    RawKernel, 16-byte loads and stores, CUDA events)."""
    import cupy

    src = cupy.arange(total_bytes // 16 * 4, dtype=cupy.uint32)
    dst = cupy.empty_like(src)
    kernel = cupy.RawKernel(
        r"""
        extern "C" __global__ void copy16(const uint4* s, uint4* d, unsigned long long n) {
          const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
          for (unsigned long long i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
            d[i] = s[i];
        }""",
        "copy16",
    )
    out = {}
    for name, threads in (("one_warp", 32), ("crew", 32 * warps), ("one_sm", 1024)):
        kernel((blocks,), (threads,), (src, dst, cupy.uint64(src.size // 4)))  # warm
        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        start.record()
        kernel((blocks,), (threads,), (src, dst, cupy.uint64(src.size // 4)))
        end.record()
        end.synchronize()
        seconds = cupy.cuda.get_elapsed_time(start, end) * 1e-3
        out[f"copy_{name}_gbit_per_s"] = total_bytes * 8 / seconds / 1e9
    return out


def _plain_pass_floor(
    packets: list[bytes], cfg: dict[str, Any], warps: int, queues: int
) -> dict[str, float]:
    """The plain per-packet pass of ``packets`` by a block of ``warps`` warps a queue, into the
    pages ``cfg`` (the row's loaded config) gives the queues' QPs. An honest floor does the
    real work: every packet must pass its checks and its ICRC."""
    from roce_transceiver import _core

    fr = cfg["frames"]
    r = _core.floor_plain_pass(
        packets,
        cfg["queues"]["slot_bytes"],
        blocks=queues,
        threads=32 * warps,
        qpn_first=cfg["qp"]["qpn"],
        qpn_count=queues,
        rkey=fr["rkey"],
        region_va=fr["va"],
        region_bytes=fr["pages"] * fr["page_bytes"],
    )
    if r["good"] != len(packets) or r["bad"]:
        raise RuntimeError(
            f"the plain-pass floor passed {r['good']} of {len(packets)} packets "
            f"({r['bad']} bad): it did not do the engine's work"
        )
    seconds = r["ns"] * 1e-9
    return {
        "plain_pass_gbit_per_s": r["bytes"] * 8 / seconds / 1e9,
        "plain_pass_mpps": len(packets) / seconds / 1e6,
    }


def _floor_text(floor: dict[str, float]) -> str:
    """``one_warp 12.3, ..., plain_pass 45.6 (11.10 Mpps)``: Gb/s, a floor's Mpps after it."""
    pieces = []
    for k, v in floor.items():
        if not k.endswith("_gbit_per_s"):
            continue
        name = k.removesuffix("_gbit_per_s")
        mpps = floor.get(f"{name}_mpps")
        pieces.append(
            f"{name.removeprefix('copy_')} {v:.1f}"
            + (f" ({mpps:.2f} Mpps)" if mpps is not None else "")
        )
    return ", ".join(pieces)


def _copy_floor_cpu(total_bytes: int, warps: int, blocks: int = 1) -> dict[str, float]:
    import numpy as np

    src = np.ones(total_bytes, dtype=np.uint8)
    dst = np.empty_like(src)
    np.copyto(dst, src)  # warm
    began = time.perf_counter()
    np.copyto(dst, src)
    seconds = time.perf_counter() - began
    return {"copy_one_thread_gbit_per_s": total_bytes * 8 / seconds / 1e9}


#: The crews the cuda executor's rows are run with (cuda.warps): one warp, then crews.
WARPS = (1, 4, 8, 16)


def run(
    executor: str = "auto",
    payloads: Sequence[int] = PAYLOADS,
    json_path: str | None = None,
    out: TextIO = sys.stdout,
    warps: Sequence[int] = WARPS,
    queues: Sequence[int] = (1,),
    latency_frames: int = 200,
) -> dict[str, Any]:
    """One row per payload size, metadata mode, queue count and crew (cuda), each with the
    copy floor of its bytes by the same resources (and, on the cuda executor, the plain
    per-packet pass of its packets); then, unless ``latency_frames`` is 0, the
    frame-end-to-host latency of that many frames (bench/frame_latency.py)."""
    if executor == "auto":
        from roce_transceiver import _core

        executor = "cuda" if _core.cuda_runtime_info()["gpus"] else "cpu"
    crews = list(warps) if executor == "cuda" else [1]
    rows = []
    for payload in payloads:
        for metadata in (False, True):
            for nq in queues:
                stream = _stream(payload, metadata, nq)
                for w in crews:
                    row = _row(executor, payload, metadata, w, nq, stream, out)
                    total = row["packets"] * payload
                    floor = _copy_floor_gpu if executor == "cuda" else _copy_floor_cpu
                    row["floor"] = floor(total, w, nq)
                    if executor == "cuda":
                        frames = row["frames"] // nq
                        cfg = load_config(_config(executor, payload, metadata, frames, w, nq))
                        row["floor"].update(_plain_pass_floor(stream[2], cfg, w, nq))
                    rows.append(row)
    print(
        f"{'payload':>8} {'metadata':>8} {'queues':>6} {'warps':>5} {'Mpps':>8} {'Gb/s':>8} "
        f"{'whole':>10}  "
        "floor (Gb/s); crew cycles per frame: classify/commit/execute/publish",
        file=out,
    )
    for r in rows:
        floor = _floor_text(r["floor"])
        prof = r["profile"]
        cycles = ""
        if "cycles_per_frame" in prof:
            pieces = prof["classify_cycles_per_frame"].values()
            cycles = (
                " "
                + "/".join(f"{c:.0f}" for c in prof["cycles_per_frame"].values())
                + f" ({prof['frames_per_batch']:.1f} a batch; classify's poll/header/pass "
                + "/".join(f"{c:.0f}" for c in pieces)
                + "; commit's runs/ends/responder "
                + "/".join(f"{c:.0f}" for c in prof["commit_cycles_per_frame"].values())
                + ")"
            )
        print(
            f"{r['payload']:>8} {('on' if r['metadata'] else 'off'):>8} {r['queues']:>6} "
            f"{r['warps']:>5} "
            f"{r['packets_per_s'] / 1e6:>8.3f} {r['gbit_per_s']:>8.2f} "
            f"{r['frames_whole']:>4}/{r['frames']:<5}  {floor};{cycles}",
            file=out,
        )
    latency = None
    if latency_frames:
        print("frame end to host (one frame at a time, 64 KiB in 4 KiB WRITEs):", file=out)
        latency = frame_latency.run(executor, latency_frames, out)
    result = {
        "benchmark": "ingest",
        "executor": executor,
        "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "frame_bytes": FRAME_BYTES,
        "rows": rows,
        "frame_to_host": latency,
        "machine": machine_info(),
    }
    if json_path:
        Path(json_path).write_text(json.dumps(result, indent=2) + "\n")
    return result
