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

The floor, in the same run: a device-to-device copy of the same payload bytes by the engine's
resources (one warp on one SM) and by one whole SM (1024 threads), timed with CUDA events
(cupy); on the cpu executor, one thread's memcpy of the same bytes (numpy).
"""

from __future__ import annotations

import json
import sys
import time
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from roce_transceiver.bench.machine import machine_info
from roce_transceiver.config import load_config
from roce_transceiver.peers.sensor import Sensor
from roce_transceiver.transceiver import Transceiver

__all__ = ["PAYLOADS", "run"]

PAYLOADS = (64, 1024, 4096)
FRAME_BYTES = 65536
RING = 16384  # packets preloaded per row (the rx ring's depth)
HEADERS = 78 + 4  # Ethernet, IPv4, UDP, BTH, RETH, ImmDt; ICRC


def _slot_bytes(payload: int) -> int:
    need = payload + HEADERS + 16
    return max(256, -(-need // 64) * 64)


def _config(executor: str, payload: int, metadata: bool, frames: int, warps: int) -> dict:
    config: dict[str, Any] = {
        "executor": executor,
        "far_end": "gpu" if executor == "cuda" else "cpu",
        "handler": "frames",
        "qp": {"transport": "UC"},
        "frames": {
            "pages": frames,
            "page_bytes": FRAME_BYTES + (128 if metadata else 0),
            "metadata": metadata,
        },
        "queues": {
            "rx_depth": RING,
            "slot_bytes": _slot_bytes(payload),
            "completion_depth": 4096,
        },
    }
    if executor == "cuda":
        config["cuda"] = {"warps": warps}
    return config


def _stream(payload: int, metadata: bool) -> tuple[int, list[Any], list[bytes]]:
    """Frames (as many as the ring holds) of one stream, and their packets."""
    per_frame = -(-FRAME_BYTES // payload) + (1 if metadata else 0)
    frames = RING // per_frame
    sensor = Sensor.for_config(
        load_config(_config("cpu", payload, metadata, frames, 1)), payload=payload
    )
    sent = list(sensor.frames(frames, FRAME_BYTES))
    return per_frame, sent, [p for s in sent for p in s.packets]


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
        *parts, team0 = epochs["classify_cycles"]
        out["classify_cycles_per_frame_one_warp"] = {
            p: c / max(1, team0)
            for p, c in zip(("stage", "decode", "icrc", "verdict"), parts, strict=True)
        }
    return out


def _row(
    executor: str,
    payload: int,
    metadata: bool,
    warps: int,
    stream: tuple[int, list[Any], list[bytes]],
    out: TextIO,
) -> dict[str, Any]:
    per_frame, sent, packets = stream
    frames = len(sent)
    t = Transceiver(_config(executor, payload, metadata, frames, warps))
    if t.preload(packets) != len(packets):
        raise RuntimeError(f"{len(packets)} packets do not fit the rx ring of {RING}")
    got = []
    with t:
        deadline = time.monotonic() + 120.0
        while len(got) < frames and time.monotonic() < deadline:
            for f in t.frames(timeout=1.0):
                got.append((f.frame_number, f.ok, f.crc32, f.bytes, f.done_ns))
                f.release()
        stats = t.stats()
    epochs = t.epoch_stats()
    whole = sum(
        1
        for (n, ok, crc, size, _), s in zip(got, sent, strict=False)
        if ok and n == s.frame_number and crc == zlib.crc32(s.content) and size == FRAME_BYTES
    )
    # The engine's clock, first record to last: the packets of every frame after the first.
    span_ns = got[-1][4] - got[0][4] if len(got) > 1 else 0
    timed = (len(got) - 1) * per_frame
    pps = timed / (span_ns * 1e-9) if span_ns > 0 else 0.0
    row = {
        "payload": payload,
        "metadata": metadata,
        "warps": warps if executor == "cuda" else 0,
        "frames": frames,
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
        f"  {executor}{who} payload {payload:>4} B metadata {'on ' if metadata else 'off'}: "
        f"{whole}/{frames} frames whole, {pps / 1e6:.3f} Mpps, {row['gbit_per_s']:.2f} Gb/s",
        file=out,
    )
    return row


def _copy_floor_gpu(total_bytes: int, warps: int) -> dict[str, float]:
    """Gb/s of a device-to-device copy of ``total_bytes`` by one warp, by ``warps`` warps (the
    crew's threads) and by one 1024-thread block, on one SM (cupy RawKernel, 16-byte loads and
    stores, CUDA events)."""
    import cupy

    src = cupy.arange(total_bytes // 16 * 4, dtype=cupy.uint32)
    dst = cupy.empty_like(src)
    kernel = cupy.RawKernel(
        r"""
        extern "C" __global__ void copy16(const uint4* s, uint4* d, unsigned long long n) {
          for (unsigned long long i = threadIdx.x; i < n; i += blockDim.x) d[i] = s[i];
        }""",
        "copy16",
    )
    out = {}
    for name, threads in (("one_warp", 32), ("crew", 32 * warps), ("one_sm", 1024)):
        kernel((1,), (threads,), (src, dst, cupy.uint64(src.size // 4)))  # warm
        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        start.record()
        kernel((1,), (threads,), (src, dst, cupy.uint64(src.size // 4)))
        end.record()
        end.synchronize()
        seconds = cupy.cuda.get_elapsed_time(start, end) * 1e-3
        out[f"copy_{name}_gbit_per_s"] = total_bytes * 8 / seconds / 1e9
    return out


def _copy_floor_cpu(total_bytes: int, warps: int) -> dict[str, float]:
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
) -> dict[str, Any]:
    """One row per payload size, metadata mode and crew (cuda), each with the copy floor of
    its bytes."""
    if executor == "auto":
        from roce_transceiver import _core

        executor = "cuda" if _core.cuda_runtime_info()["gpus"] else "cpu"
    crews = list(warps) if executor == "cuda" else [1]
    rows = []
    for payload in payloads:
        for metadata in (False, True):
            stream = _stream(payload, metadata)
            for w in crews:
                row = _row(executor, payload, metadata, w, stream, out)
                total = row["packets"] * payload
                row["floor"] = (_copy_floor_gpu if executor == "cuda" else _copy_floor_cpu)(
                    total, w
                )
                rows.append(row)
    print(
        f"{'payload':>8} {'metadata':>8} {'warps':>5} {'Mpps':>8} {'Gb/s':>8} {'whole':>10}  "
        "floor (Gb/s); crew cycles per frame: classify/commit/execute/publish",
        file=out,
    )
    for r in rows:
        floor = ", ".join(
            f"{k.removeprefix('copy_').removesuffix('_gbit_per_s')} {v:.1f}"
            for k, v in r["floor"].items()
        )
        prof = r["profile"]
        cycles = ""
        if "cycles_per_frame" in prof:
            one = prof["classify_cycles_per_frame_one_warp"].values()
            cycles = (
                " "
                + "/".join(f"{c:.0f}" for c in prof["cycles_per_frame"].values())
                + f" ({prof['frames_per_batch']:.1f} a batch; a warp's stage/decode/icrc/verdict "
                + "/".join(f"{c:.0f}" for c in one)
                + ")"
            )
        print(
            f"{r['payload']:>8} {('on' if r['metadata'] else 'off'):>8} {r['warps']:>5} "
            f"{r['packets_per_s'] / 1e6:>8.3f} {r['gbit_per_s']:>8.2f} "
            f"{r['frames_whole']:>4}/{r['frames']:<5}  {floor};{cycles}",
            file=out,
        )
    result = {
        "benchmark": "ingest",
        "executor": executor,
        "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "frame_bytes": FRAME_BYTES,
        "rows": rows,
        "machine": machine_info(),
    }
    if json_path:
        Path(json_path).write_text(json.dumps(result, indent=2) + "\n")
    return result
