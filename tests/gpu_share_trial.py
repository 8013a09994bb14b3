"""One trial of tests/test_gpu_sharing.py, in a process of its own (a hang costs the trial,
not the test session): the cuda executor's loop runs, another thread does GPU work, and the
loop keeps answering meanwhile. Prints one JSON line:

    {"work": ..., "done": bool, "work_s": float, "answered": int, "sent": int, "wrong": int,
     "frames_ok": int, "frames_sent": int, "stop_s": float, "stop_error": str | null,
     "after_stop_s": float | null, "epochs": int}

python gpu_share_trial.py WORK [--handler echo|frames] [--epoch-us N] [--in-flight K]
    [--bound S]
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from collections.abc import Callable

import numpy as np

from roce_transceiver.bench.gpu_share import load_fresh_kernel
from roce_transceiver.peers.sensor import Sensor
from roce_transceiver.transceiver import Transceiver


def _cupy_empty() -> None:
    import cupy

    cupy.empty(1 << 30, dtype=cupy.uint8)


def _stream_sync() -> None:
    import cupy

    cupy.cuda.Stream(non_blocking=True).synchronize()


def _cupy_reduction() -> None:
    import cupy

    assert int(cupy.asarray(np.arange(1000, dtype=np.int64)).sum()) == 499500


def _torch_matmul() -> None:
    import torch

    a = torch.ones(256, 256, device="cuda")
    assert float((a @ a)[0, 0]) == 256.0
    torch.cuda.synchronize()


WORK: dict[str, Callable[[], object]] = {
    "cupy_empty_1gib": _cupy_empty,
    "stream_sync": _stream_sync,
    "cupy_reduction_first_use": _cupy_reduction,
    "cupy_new_kernel": load_fresh_kernel,
    "torch_first_matmul": _torch_matmul,
    "torch_preloaded_matmul": _torch_matmul,  # warmed up before the loop starts
}


def _config(handler: str, epoch_us: int | None, in_flight: int | None) -> dict:
    cuda = {"epoch_us": epoch_us, "epochs_in_flight": in_flight}
    config: dict = {
        "executor": "cuda",
        "handler": handler,
        "qp": {"transport": "UC"},
        "cuda": {k: v for k, v in cuda.items() if v is not None},  # else the defaults
        "stop_timeout_s": 5.0,
    }
    if handler == "frames":
        config["frames"] = {"pages": 8, "page_bytes": 65536, "metadata": True}
    else:
        config["completions"] = False
    return config


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("work", choices=sorted(WORK))
    ap.add_argument("--handler", choices=("echo", "frames"), default="echo")
    ap.add_argument("--epoch-us", type=int, help="cuda.epoch_us (default: the config's)")
    ap.add_argument("--in-flight", type=int, help="cuda.epochs_in_flight (default: the config's)")
    ap.add_argument("--bound", type=float, default=10.0, help="seconds the work may take")
    args = ap.parse_args()
    if args.work == "torch_preloaded_matmul":
        _torch_matmul()
    result: dict = {"work": args.work, "handler": args.handler, "epoch_us": args.epoch_us}
    t = Transceiver(_config(args.handler, args.epoch_us, args.in_flight))
    t.start()
    sensor = None
    if args.handler == "frames":
        sensor = Sensor.for_config(t.config)
    finished: dict[str, float] = {}

    def work() -> None:
        began = time.perf_counter()
        WORK[args.work]()
        finished["s"] = time.perf_counter() - began
        finished["at"] = time.perf_counter()

    worker = threading.Thread(target=work, daemon=True)
    answered = sent = wrong = frames_ok = frames_sent = 0
    deadline = time.perf_counter() + args.bound
    worker.start()
    # The loop keeps answering while the work runs (and a little longer: at least 20 rounds).
    rounds = 0
    while (worker.is_alive() or rounds < 20) and time.perf_counter() < deadline:
        rounds += 1
        if sensor is None:
            rt = t.roundtrip(count=200, timeout=5.0)
            answered, sent, wrong = answered + rt.received, sent + rt.sent, wrong + rt.wrong
        else:
            frame = sensor.frame(frames_sent, bytes((frames_sent + i) & 0xFF for i in range(8192)))
            for p in frame.packets:
                t.inject(p, wait=5.0)
            frames_sent += 1
            for f in t.frames(timeout=5.0):
                frames_ok += f.ok and f.data.tobytes() == frame.content
                f.release()
    result.update(done=not worker.is_alive(), work_s=finished.get("s"), rounds=rounds)
    stop_began = time.perf_counter()
    try:
        t.stop()
        result["stop_error"] = None
    except Exception as e:  # the trial reports it; the test decides
        result["stop_error"] = f"{type(e).__name__}: {e}"
    stopped = time.perf_counter()
    result["stop_s"] = stopped - stop_began
    worker.join(args.bound)
    result["after_stop_s"] = (
        finished["at"] - stopped if not result["done"] and "at" in finished else None
    )
    stats = t.stats()
    result.update(
        answered=answered,
        sent=sent,
        wrong=wrong,
        frames_ok=frames_ok,
        frames_sent=frames_sent,
        frames_dropped=stats["frames_dropped"],
        ring_drops=stats["ring_drops"],
        epochs=t.epoch_stats()["epochs"],
    )
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
