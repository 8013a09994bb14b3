"""ICRC and CRC-32 throughput of the host core, against libz's ``crc32``.

For each size, a batch of real RoCEv2 frames (alternating RC SEND_ONLY and UC RDMA_WRITE_ONLY
where the latter fits, IPv4, random payloads) is timed four ways:

- ``ours crc32``: the core's CRC-32 over each whole frame (``_core.bench_crc32_ours``);
- ``ours icrc``: decode, mask and the full ICRC of each frame (``_core.bench_icrc``);
- ``libz crc32``: ``crc32()`` of the libz Python's ``zlib`` uses, over the same bytes in the
  same C++ loop (``_core.bench_crc32_fn``); this is the baseline of every ratio;
- ``python zlib.crc32``: ``zlib.crc32(frame)`` per frame from Python, for context.

Throughput is frame bytes per second (GB = 1e9 bytes), the median of several trials. Frames
stay in cache: this measures the computation, not memory. A RoCEv2 frame over IPv4 without
VLAN is 2 bytes more than a multiple of 4 long, so a size is rounded down to the nearest such
length (64 -> 62); the table and the JSON show both.

``python -m roce_transceiver.bench.icrc [--sizes 64,1024,4096] [--seconds S] [--json FILE]``
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import json
import random
import statistics
import sys
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

from roce_transceiver import _core
from roce_transceiver.argtypes import real
from roce_transceiver.bench.machine import machine_info
from roce_transceiver.protocol import build, parse

__all__ = ["DEFAULT_SIZES", "main", "run"]

DEFAULT_SIZES: tuple[int, ...] = (64, 1024, 4096)
_TRIALS = 5
_CALIBRATE_S = 0.005  # time one calibration pass must reach before it is trusted
_BATCH_BYTES = 32 * 1024  # frames per size: about this many bytes, so the batch stays in L1/L2
_MIN_FRAMES = 8

# Frame bytes around the payload: Ethernet 14, IPv4 20, UDP 8, BTH 12, ICRC 4 (+ RETH 16).
_SEND_OVERHEAD = 58
_WRITE_OVERHEAD = 74


@dataclass(frozen=True)
class _Frames:
    size: int  # as asked
    frame_bytes: int  # each frame's length
    frames: tuple[bytes, ...]
    data: bytes  # the frames back to back
    offsets: list[int]
    lengths: list[int]

    @property
    def batch_bytes(self) -> int:
        return self.frame_bytes * len(self.frames)


def _make_frames(size: int) -> _Frames:
    if size < _SEND_OVERHEAD:
        raise ValueError(f"size {size}: the smallest RoCEv2 frame is {_SEND_OVERHEAD} bytes")
    frame_bytes = size - (size - _SEND_OVERHEAD) % 4
    count = max(_MIN_FRAMES, _BATCH_BYTES // frame_bytes)
    rng = random.Random(size)
    frames = []
    for i in range(count):
        if i % 2 and frame_bytes >= _WRITE_OVERHEAD:
            payload = rng.randbytes(frame_bytes - _WRITE_OVERHEAD)
            frame = build(
                "UC_RDMA_WRITE_ONLY",
                payload,
                dest_qp=0x11,
                psn=i,
                va=0x10000 + i * len(payload),
                rkey=0x1234,
            )
        else:
            payload = rng.randbytes(frame_bytes - _SEND_OVERHEAD)
            frame = build("RC_SEND_ONLY", payload, dest_qp=0x12, psn=i)
        if len(frame) != frame_bytes:
            raise AssertionError(f"built a {len(frame)}-byte frame, wanted {frame_bytes}")
        frames.append(frame)
    offsets = [i * frame_bytes for i in range(count)]
    return _Frames(
        size=size,
        frame_bytes=frame_bytes,
        frames=tuple(frames),
        data=b"".join(frames),
        offsets=offsets,
        lengths=[frame_bytes] * count,
    )


@dataclass(frozen=True)
class _Libz:
    lib: ctypes.CDLL  # held so the library stays loaded while its address is in use
    path: str
    version: str
    address: int


def _find_libz() -> _Libz | None:
    path = ctypes.util.find_library("z")
    if path is None:
        return None
    lib = ctypes.CDLL(path)
    lib.zlibVersion.restype = ctypes.c_char_p
    lib.crc32.restype = ctypes.c_ulong
    lib.crc32.argtypes = [ctypes.c_ulong, ctypes.c_char_p, ctypes.c_uint]
    probe = bytes(range(256)) * 3
    if lib.crc32(0, probe, len(probe)) != zlib.crc32(probe):
        raise RuntimeError(f"{path}: crc32() disagrees with zlib.crc32; not the zlib we expect")
    address = ctypes.cast(lib.crc32, ctypes.c_void_p).value
    if not address:
        raise RuntimeError(f"{path}: no address for crc32()")
    return _Libz(lib=lib, path=path, version=lib.zlibVersion().decode(), address=address)


def _check(batch: _Frames) -> None:
    """What is timed must be right: every frame's CRC and ICRC against independent oracles."""
    for i, frame in enumerate(batch.frames):
        if _core.crc32(frame) != zlib.crc32(frame):
            raise RuntimeError(f"size {batch.size}, frame {i}: _core.crc32 != zlib.crc32")
        if not parse(frame).icrc_ok:
            raise RuntimeError(f"size {batch.size}, frame {i}: ICRC does not verify")


def _calibrate(timer: Callable[[int], float], trial_seconds: float) -> int:
    """Iterations that make one trial last about ``trial_seconds``."""
    iterations = 1
    elapsed = timer(iterations)
    while elapsed < _CALIBRATE_S:
        iterations *= 4 if elapsed < _CALIBRATE_S / 8 else 2
        elapsed = timer(iterations)
    return max(1, round(iterations * trial_seconds / elapsed))


def _measure(
    timers: dict[str, Callable[[int], float]], seconds: float
) -> dict[str, tuple[int, list[float]]]:
    """Per implementation: iterations per trial and the seconds of each trial.

    Trials take turns across implementations, so a burst of load from elsewhere on the machine
    lands on all of them rather than on one, and the ratios stay honest.
    """
    iterations = {impl: _calibrate(timer, seconds / _TRIALS) for impl, timer in timers.items()}
    trials: dict[str, list[float]] = {impl: [] for impl in timers}
    for _ in range(_TRIALS):
        for impl, timer in timers.items():
            trials[impl].append(timer(iterations[impl]))
    return {impl: (iterations[impl], trials[impl]) for impl in timers}


def _python_timer(frames: Sequence[bytes]) -> Callable[[int], float]:
    crc32 = zlib.crc32

    def timer(iterations: int) -> float:
        t0 = time.perf_counter()
        for _ in range(iterations):
            for frame in frames:
                crc32(frame)
        return time.perf_counter() - t0

    return timer


def _timers(batch: _Frames, libz: _Libz | None) -> dict[str, Callable[[int], float]]:
    data, offs, lens = batch.data, batch.offsets, batch.lengths
    timers: dict[str, Callable[[int], float]] = {
        "ours crc32": lambda n: _core.bench_crc32_ours(data, offs, lens, n),
        "ours icrc": lambda n: _core.bench_icrc(data, offs, lens, n),
    }
    if libz is not None:
        address = libz.address
        timers["libz crc32"] = lambda n: _core.bench_crc32_fn(address, data, offs, lens, n)
    timers["python zlib.crc32"] = _python_timer(batch.frames)
    return timers


def _machine(libz: _Libz | None) -> dict[str, Any]:
    return machine_info(
        crc32_impl=_core.crc32_impl(),
        zlib_version=zlib.ZLIB_RUNTIME_VERSION,
        libz_path=libz.path if libz else None,
        libz_version=libz.version if libz else None,
    )


def _print_table(rows: list[dict[str, Any]], out: TextIO) -> None:
    header = f"{'size':>6} {'frame B':>8} {'frames':>6}  {'impl':<18} {'GB/s':>8} {'x libz':>7}"
    print(header, file=out)
    for r in rows:
        ratio = f"{r['ratio_to_libz']:.2f}" if r["ratio_to_libz"] is not None else "-"
        print(
            f"{r['size']:>6} {r['frame_bytes']:>8} {r['frames']:>6}  {r['impl']:<18} "
            f"{r['gbps']:>8.2f} {ratio:>7}",
            file=out,
        )


def _summary(rows: list[dict[str, Any]]) -> str:
    largest = max(r["frame_bytes"] for r in rows)
    at = {r["impl"]: r for r in rows if r["frame_bytes"] == largest}
    icrc = at["ours icrc"]
    line = (
        f"icrc: {largest}-byte frames, full ICRC {icrc['gbps']:.2f} GB/s, "
        f"raw CRC-32 {at['ours crc32']['gbps']:.2f} GB/s ({at['ours crc32']['impl_detail']})"
    )
    if "libz crc32" in at:
        line += (
            f"; libz crc32 {at['libz crc32']['gbps']:.2f} GB/s in the same loop: "
            f"ICRC {icrc['ratio_to_libz']:.1f}x libz"
        )
    return line


def run(
    sizes: Sequence[int] = DEFAULT_SIZES,
    seconds: float = 1.0,
    json_path: str | None = None,
    *,
    out: TextIO | None = None,
) -> dict[str, Any]:
    """Time every implementation at every frame size; print a table, maybe write JSON.

    ``seconds`` is the time spent on each (size, implementation) pair, split over five trials.
    Returns what the JSON holds: ``machine`` (CPU model, crc32_impl, zlib version...),
    ``results`` (one row per size and implementation) and ``summary`` (the last line printed).
    """
    if not sizes:
        raise ValueError("sizes is empty: give at least one frame size")
    if not seconds > 0:
        raise ValueError(f"seconds={seconds}: must be more than 0")
    stream = sys.stdout if out is None else out
    libz = _find_libz()
    machine = _machine(libz)
    print(
        f"# {machine['cpu_model']}; crc32_impl={machine['crc32_impl']}; "
        f"zlib {machine['zlib_version']} ({machine['libz_path'] or 'libz not found'})",
        file=stream,
    )
    rows: list[dict[str, Any]] = []
    for size in sizes:
        batch = _make_frames(size)
        _check(batch)
        measured: list[dict[str, Any]] = []
        for impl, (iterations, trials) in _measure(_timers(batch, libz), seconds).items():
            gbps = [batch.batch_bytes * iterations / t / 1e9 for t in trials]
            measured.append(
                {
                    "size": size,
                    "frame_bytes": batch.frame_bytes,
                    "frames": len(batch.frames),
                    "impl": impl,
                    "impl_detail": machine["crc32_impl"] if impl.startswith("ours") else impl,
                    "gbps": statistics.median(gbps),
                    "gbps_trials": gbps,
                    "iterations_per_trial": iterations,
                }
            )
        base = next((m["gbps"] for m in measured if m["impl"] == "libz crc32"), None)
        for m in measured:
            m["ratio_to_libz"] = m["gbps"] / base if base else None
        rows.extend(measured)
    _print_table(rows, stream)
    summary = _summary(rows)
    print(summary, file=stream)
    result = {
        "benchmark": "icrc",
        "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "seconds_per_measurement": seconds,
        "trials": _TRIALS,
        "machine": machine,
        "results": rows,
        "summary": summary,
    }
    if json_path is not None:
        with open(json_path, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=2)
            f.write("\n")
    return result


def _sizes(text: str) -> tuple[int, ...]:
    try:
        sizes = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: not a comma-separated list of sizes") from None
    if min(sizes) < _SEND_OVERHEAD:
        raise argparse.ArgumentTypeError(f"{text!r}: sizes start at {_SEND_OVERHEAD} bytes")
    return sizes


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m roce_transceiver.bench.icrc``; the CLI calls ``run`` directly."""
    p = argparse.ArgumentParser(
        prog="python -m roce_transceiver.bench.icrc",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--sizes", type=_sizes, default=DEFAULT_SIZES, metavar="N,N,...")
    p.add_argument(
        "--seconds",
        type=real(0, 3600, lo_open=True),
        default=1.0,
        help="per size and implementation",
    )
    p.add_argument("--json", metavar="FILE", help="also write the results as JSON to FILE")
    args = p.parse_args(argv)
    try:
        run(sizes=args.sizes, seconds=args.seconds, json_path=args.json)
    except ValueError as e:
        p.error(str(e))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
