"""``roce-transceiver bench share``: what sharing the GPU with the rest of a graph costs.

The cuda executor runs its persistent kernel in epochs (``cuda.epoch_us``; docs/gpu_sharing.md):
between two epochs nothing of ours runs, so a kernel load elsewhere in the process (a cupy
kernel or cuBLAS loaded at first use), which waits for the device to go idle, goes through.
For each epoch length, and for one launch for the whole run (``epoch_us`` 0), this measures
in one run:

- the echo loop's round trip with a CPU far end and with a GPU one (p50 / p99 / p99.9), next
  to the pinned and device-block ping-pong floors of the same run;
- ingest: the frames handler taking an HSB stream (1 MiB frames in 4 KiB UC WRITE Only
  packets) from an rx ring filled through inject() before start(), packets/s and Gb/s;
- a pending load: a kernel compiled and loaded at first use (cupy: NVRTC, then the module
  load) in another thread while the loop runs, and how long it waited; with one launch it
  waits for the loop to stop (reported as blocked at the bound, then released by stop(),
  which reaches the kernel through pinned memory);
- the relaunch gap, measured on the GPU between one epoch's end and the next one's start,
  then the epoch's warm-up (CRC tables and state into shared memory) and its first pass;
- and, as the load's floor, the same first-use load with nothing of ours running.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TextIO

from roce_transceiver.bench.floors import Percentiles, format_table, measure_floors
from roce_transceiver.bench.machine import machine_info
from roce_transceiver.transceiver import Transceiver

__all__ = ["EPOCHS_US", "KernelLoad", "load_fresh_kernel", "run"]

# (epoch_us, epochs in flight): one launch, then epochs of 1 and 10 ms, each relaunched after
# the last one ended and with the next one queued behind the running one.
EPOCHS_US = ((0, 1), (1000, 1), (1000, 2), (10000, 1), (10000, 2))
LOAD_BOUND_S = 3.0  # a load that has not finished by then counts as blocked


def load_fresh_kernel() -> float:
    """Compile, load and run a kernel no one in this process has used before (cupy: NVRTC
    and a module load, as a graph operator's first call does); its seconds. Needs cupy."""
    import cupy

    tag = time.perf_counter_ns()  # a new source each call: nothing cached in this process
    src = f'extern "C" __global__ void fresh_{tag}(int* x) {{ x[threadIdx.x] += {tag % 1000}; }}'
    began = time.perf_counter()
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        kernel = cupy.RawKernel(src, f"fresh_{tag}")
        x = cupy.zeros(32, dtype=cupy.int32)
        kernel((1,), (32,), (x,))
        stream.synchronize()
    return time.perf_counter() - began


@dataclass
class KernelLoad:
    """A load in another thread while the loop ran: done within the bound, or blocked."""

    done: bool
    waited_s: float  # until done, or the bound
    after_stop_s: float | None  # blocked ones: how long after stop() it finished


def _pending_load(t: Transceiver, bound_s: float) -> KernelLoad:
    """Time a first-use kernel load in another thread while ``t`` runs; stop ``t`` when the
    load is still waiting at the bound (the load then finishes: stop() needs no CUDA call)."""
    result: dict[str, float] = {}

    def work() -> None:
        result["s"] = load_fresh_kernel()
        result["at"] = time.perf_counter()

    worker = threading.Thread(target=work, daemon=True)
    began = time.perf_counter()
    worker.start()
    worker.join(bound_s)
    if not worker.is_alive():
        return KernelLoad(True, result["s"], None)
    stopped = time.perf_counter()
    t.stop()
    worker.join(bound_s)
    after = result["at"] - stopped if "at" in result else None
    return KernelLoad(False, stopped - began, after)


def _ingest(epoch_us: int, in_flight: int, frames: int, out: TextIO) -> dict[str, Any]:
    from roce_transceiver.peers.sensor import Sensor

    page = 1 << 20
    config = {
        "executor": "cuda",
        "handler": "frames",
        "qp": {"transport": "UC"},
        "frames": {"pages": frames, "page_bytes": page, "metadata": False},
        "queues": {"rx_depth": 4096, "slot_bytes": 4096 + 256, "completion_depth": 1024},
        "cuda": {"epoch_us": epoch_us, "epochs_in_flight": in_flight},
    }
    t = Transceiver(config)
    sensor = Sensor.for_config(t.config, payload=4096)
    packets = [p for s in sensor.frames(frames, page) for p in s.packets]
    if len(packets) > t.config["queues"]["rx_depth"]:
        raise ValueError(f"{len(packets)} packets do not fit the rx ring")
    for p in packets:
        if not t.inject(p):
            raise RuntimeError("the rx ring filled before start()")
    began = time.perf_counter()
    with t:
        got = 0
        deadline = began + 60.0
        while got < frames and time.perf_counter() < deadline:
            for f in t.frames(timeout=1.0):
                got += f.ok
                f.release()
        elapsed = time.perf_counter() - began
        stats = t.stats()
    rate = len(packets) / elapsed
    row = {
        "frames_ok": got,
        "frames": frames,
        "packets": len(packets),
        "seconds": elapsed,
        "packets_per_s": rate,
        "gbit_per_s": rate * 4096 * 8 / 1e9,
        "frames_dropped": stats["frames_dropped"],
    }
    print(
        f"  ingest {_name(epoch_us, in_flight)}: {got}/{frames} frames ok, {rate:,.0f} packets/s, "
        f"{row['gbit_per_s']:.3f} Gb/s",
        file=out,
    )
    return row


def _name(epoch_us: int, in_flight: int) -> str:
    if not epoch_us:
        return "one launch"
    return f"epoch_us {epoch_us}" + (f" x{in_flight} queued" if in_flight > 1 else "")


def _echo(epoch_us: int, in_flight: int, count: int, far_end: str) -> dict[str, Any]:
    """The echo loop's round trips; with the CPU far end, then a pending load too."""
    config = {
        "executor": "cuda",
        "far_end": far_end,
        "handler": "echo",
        "completions": False,
        "qp": {"transport": "UC"},
        "cuda": {"epoch_us": epoch_us, "epochs_in_flight": in_flight},
    }
    t = Transceiver(config)
    with t:
        t.roundtrip(count=1000)  # warm-up
        rt = t.roundtrip(count=count, timeout=max(10.0, count * 1e-4))
        load = _pending_load(t, LOAD_BOUND_S) if far_end == "cpu" else None
        epochs = t.epoch_stats()
    p = rt.percentiles("ns")
    return {
        "latency": p.as_dict() if p is not None else f"no replies ({rt.status})",
        "replies": rt.received,
        "sent": rt.sent,
        "wrong": rt.wrong,
        "load": asdict(load) if load else None,
        "epochs": epochs,
        "_percentiles": p,
    }


def run(
    epochs_us: Sequence[tuple[int, int]] = EPOCHS_US,
    count: int = 20_000,
    frames: int = 12,
    floor_iterations: int = 10_000,
    json_path: str | None = None,
    out: TextIO = sys.stdout,
) -> dict[str, Any]:
    """The table, one row per epoch length, with the floors of the same run; JSON too."""
    rows: dict[str, Percentiles | str] = {}
    results: dict[str, Any] = {}
    # The load's own cost, with nothing of ours running: its floor.
    load_fresh_kernel()  # cupy's context, memory pool and compiler set up once
    baseline = [load_fresh_kernel() for _ in range(3)]
    print(
        f"  a first-use kernel load with no loop running: {min(baseline) * 1e3:.1f} ms "
        f"(best of 3; {', '.join(f'{b * 1e3:.1f}' for b in baseline)} ms)",
        file=out,
    )
    for e, in_flight in epochs_us:
        name = f"echo {_name(e, in_flight)}"
        r = _echo(e, in_flight, count, "cpu")
        p = r.pop("_percentiles")
        rows[name] = p if p is not None else r["latency"]
        gpu = _echo(e, in_flight, count, "gpu")
        g = gpu.pop("_percentiles")
        rows[f"{name}, gpu far end"] = g if g is not None else gpu["latency"]
        r["gpu_far_end"] = gpu
        r["ingest"] = _ingest(e, in_flight, frames, out)
        r["epoch_us"], r["in_flight"] = e, in_flight
        results[_name(e, in_flight)] = r
        load = r["load"]
        waited = (
            f"done in {load['waited_s'] * 1e3:.1f} ms"
            if load["done"]
            else f"blocked > {load['waited_s']:.1f} s (finished {load['after_stop_s']} s after "
            "stop())"
        )
        ep = r["epochs"]
        gap = ep["gap_total_ns"] / max(1, ep["epochs"] - 1) / 1e3
        warm = ep["warmup_total_ns"] / max(1, ep["epochs"]) / 1e3
        first = ep["first_pass_total_ns"] / max(1, ep["epochs"]) / 1e3
        print(
            f"  {name}: {r['replies']}/{r['sent']} replies, {r['wrong']} wrong; pending kernel "
            f"load {waited}; {ep['epochs']} epochs, relaunch gap mean {gap:.1f} us, max "
            f"{ep['gap_max_ns'] / 1e3:.1f} us; warm-up (tables, state in) mean {warm:.1f} us, "
            f"max {ep['warmup_max_ns'] / 1e3:.1f} us; first pass mean {first:.1f} us, max "
            f"{ep['first_pass_max_ns'] / 1e3:.1f} us",
            file=out,
        )
    floors = measure_floors(["pinned_pingpong", "device_block_pingpong"], floor_iterations)
    print(format_table({**rows, **floors}, "us"), file=out)
    result = {
        "benchmark": "share",
        "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "count": count,
        "load_baseline_s": baseline,
        "epochs": results,
        "floors": {k: v.as_dict() if isinstance(v, Percentiles) else v for k, v in floors.items()},
        "machine": machine_info(),
    }
    if json_path:
        Path(json_path).write_text(json.dumps(result, indent=2) + "\n")
    return result
