"""One trial of tests/test_gpu_sharing.py, in a process of its own (a hang costs the trial,
not the test session): the cuda executor's loop runs, another thread does GPU work, and the
loop keeps answering meanwhile. Prints one JSON line:

    {"work": ..., "done": bool, "work_s": float, "answered": int, "sent": int, "wrong": int,
     "frames_ok": int, "frames_sent": int, "stop_s": float, "stop_error": str | null,
     "after_stop_s": float | null, "epochs": int}

python gpu_share_trial.py WORK [--handler echo|frames|verbs] [--far-end cpu|gpu]
    [--epoch-us N] [--in-flight K] [--bound S]

``--handler verbs``: Verbs mode's serve kernel is the loop (echo, roce_transceiver.verbs_mode),
in the same epochs. ``--far-end gpu``: the echo loop's far end is a kernel too, and one run of it
lasts the whole trial (``far_end_s``), so that the work has to get through its epochs.
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


def _config(handler: str, epoch_us: int | None, in_flight: int | None, far_end: str) -> dict:
    cuda = {"epoch_us": epoch_us, "epochs_in_flight": in_flight}
    config: dict = {
        "executor": "cuda",
        "handler": handler,
        "far_end": far_end,
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
    ap.add_argument("--handler", choices=("echo", "frames", "verbs"), default="echo")
    ap.add_argument("--far-end", choices=("cpu", "gpu"), default="cpu")
    ap.add_argument("--epoch-us", type=int, help="cuda.epoch_us (default: the config's)")
    ap.add_argument("--in-flight", type=int, help="cuda.epochs_in_flight (default: the config's)")
    ap.add_argument("--bound", type=float, default=10.0, help="seconds the work may take")
    args = ap.parse_args()
    if args.work == "torch_preloaded_matmul":
        _torch_matmul()
    result: dict = {"work": args.work, "handler": args.handler, "epoch_us": args.epoch_us}
    finished: dict[str, float] = {}

    def work() -> None:
        began = time.perf_counter()
        WORK[args.work]()
        finished["s"] = time.perf_counter() - began
        finished["at"] = time.perf_counter()

    worker = threading.Thread(target=work, daemon=True)
    if args.handler == "verbs":
        result.update(_verbs_trial(args, worker, finished))
    else:
        result.update(_engine_trial(args, worker, finished))
    print(json.dumps(result), flush=True)
    return 0


def _stop(
    stop: Callable[[], object],
    worker: threading.Thread,
    bound: float,
    done: bool,
    finished: dict[str, float],
) -> dict:
    """stop() timed, then how long the work took to finish after it (when it had not)."""
    out: dict = {}
    began = time.perf_counter()
    try:
        stop()
        out["stop_error"] = None
    except Exception as e:  # the trial reports it; the test decides
        out["stop_error"] = f"{type(e).__name__}: {e}"
    stopped = time.perf_counter()
    out["stop_s"] = stopped - began
    worker.join(bound)
    out["after_stop_s"] = finished["at"] - stopped if not done and "at" in finished else None
    return out


def _engine_trial(
    args: argparse.Namespace, worker: threading.Thread, finished: dict[str, float]
) -> dict:
    t = Transceiver(_config(args.handler, args.epoch_us, args.in_flight, args.far_end))
    t.start()
    sensor = None
    if args.handler == "frames":
        sensor = Sensor.for_config(t.config)
    answered = sent = wrong = frames_ok = frames_sent = 0
    deadline = time.perf_counter() + args.bound
    worker.start()
    out: dict = {}
    if args.far_end == "gpu":
        # One far-end run for the whole trial, paced: the work must get through its epochs.
        run_s = min(args.bound, 3.0)
        began = time.perf_counter()
        rt = t.roundtrip(count=int(run_s * 1e5), rate=1e5, timeout=run_s + 10.0)
        out["far_end_s"] = time.perf_counter() - began
        out["work_within_far_end"] = "at" in finished and finished["at"] < began + out["far_end_s"]
        answered, sent, wrong = rt.received, rt.sent, rt.wrong
        rounds = 1
    else:
        # The loop keeps answering while the work runs (and a little longer: at least 20 rounds).
        rounds = 0
        while (worker.is_alive() or rounds < 20) and time.perf_counter() < deadline:
            rounds += 1
            if sensor is None:
                rt = t.roundtrip(count=200, timeout=5.0)
                answered, sent, wrong = answered + rt.received, sent + rt.sent, wrong + rt.wrong
            else:
                frame = sensor.frame(
                    frames_sent, bytes((frames_sent + i) & 0xFF for i in range(8192))
                )
                for p in frame.packets:
                    t.inject(p, wait=5.0)
                frames_sent += 1
                for f in t.frames(timeout=5.0):
                    frames_ok += f.ok and f.data.tobytes() == frame.content
                    f.release()
    done = not worker.is_alive()
    out.update(done=done, work_s=finished.get("s"), rounds=rounds)
    out.update(_stop(t.stop, worker, args.bound, done, finished))
    stats = t.stats()
    out.update(
        answered=answered,
        sent=sent,
        wrong=wrong,
        frames_ok=frames_ok,
        frames_sent=frames_sent,
        frames_dropped=stats["frames_dropped"],
        ring_drops=stats["ring_drops"],
        epochs=t.epoch_stats()["epochs"],
    )
    return out


def _verbs_trial(
    args: argparse.Namespace, worker: threading.Thread, finished: dict[str, float]
) -> dict:
    from roce_transceiver.verbs_mode import VerbsLoopback

    cuda = {"epoch_us": args.epoch_us, "epochs_in_flight": args.in_flight}
    v = VerbsLoopback(
        "echo", executor="cuda", cuda={k: x for k, x in cuda.items() if x is not None}
    )
    v.start()
    answered = sent = wrong = rounds = 0
    deadline = time.perf_counter() + args.bound
    worker.start()
    while (worker.is_alive() or rounds < 20) and time.perf_counter() < deadline:
        rounds += 1
        rt = v.roundtrip(200, 32, timeout=5.0)
        answered, sent, wrong = answered + rt.received, sent + rt.sent, wrong + rt.wrong
    done = not worker.is_alive()
    out: dict = {"done": done, "work_s": finished.get("s"), "rounds": rounds}
    epochs = v.stats()["server"]["epochs"]
    out.update(_stop(v.stop, worker, args.bound, done, finished))
    out.update(answered=answered, sent=sent, wrong=wrong, epochs=epochs)
    return out


if __name__ == "__main__":
    raise SystemExit(main())
