"""Sharing the GPU with the graph: other GPU work in the process while the loop runs.

Goal (issue 14): with the cuda executor's loop running, another thread of the same process
allocates, synchronizes a stream, and loads kernels at first use (a cupy reduction, a cupy
kernel compiled with NVRTC, cuBLAS under a first torch matmul): each completes within a stated
bound, the loop keeps answering (echo and frames) with nothing lost or wrong, and stop()
returns within its timeout, also while another thread is blocked in the driver.

Oracle: the work's own completion (a thread that finishes, with its result checked), the
far end's checks of every echo, the frames' bytes against what the sensor sent, and wall-clock
bounds on what must not hang. Each trial runs in a process of its own
(tests/gpu_share_trial.py): a hang costs the trial its timeout, not the session.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import skip_missing

TRIAL = Path(__file__).with_name("gpu_share_trial.py")
WORK_BOUND_S = 10.0  # a first-use load here takes well under a second; two epochs 20 ms
STOP_TIMEOUT_S = 5.0  # the trial's stop_timeout_s

pytestmark = pytest.mark.gpu


def trial(
    work: str,
    handler: str = "echo",
    bound: float = 10.0,
    epoch_us: int | None = None,
    in_flight: int | None = None,
    far_end: str = "cpu",
):
    """One trial; the epochs as configured by default unless given."""
    args = ["--handler", handler, "--bound", str(bound), "--far-end", far_end]
    args += [] if epoch_us is None else ["--epoch-us", str(epoch_us)]
    args += [] if in_flight is None else ["--in-flight", str(in_flight)]
    proc = subprocess.run(
        [sys.executable, str(TRIAL), work, *args],
        capture_output=True,
        text=True,
        timeout=bound * 3 + 60,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def needs(module: str) -> None:
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not installed here")


WORKS = [
    "cupy_empty_1gib",
    "stream_sync",
    "cupy_reduction_first_use",
    "cupy_new_kernel",
    "torch_preloaded_matmul",
    "torch_first_matmul",
]


@pytest.mark.parametrize("work", WORKS)
def test_gpu_work_in_another_thread_completes_while_the_echo_loop_answers(work: str) -> None:
    needs("torch" if work.startswith("torch") else "cupy")
    r = trial(work)
    assert r["done"], r
    assert r["work_s"] < WORK_BOUND_S, r
    assert r["sent"] > 0 and r["answered"] == r["sent"] and r["wrong"] == 0, r
    assert r["stop_error"] is None and r["stop_s"] < STOP_TIMEOUT_S, r
    assert r["epochs"] >= 1, r


@pytest.mark.parametrize("work", ["cupy_reduction_first_use", "cupy_new_kernel"])
def test_kernel_loads_go_through_while_frames_arrive(work: str) -> None:
    needs("cupy")
    r = trial(work, handler="frames")
    assert r["done"] and r["work_s"] < WORK_BOUND_S, r
    assert r["frames_sent"] > 0 and r["frames_ok"] == r["frames_sent"], r
    assert r["frames_dropped"] == 0 and r["ring_drops"] == 0, r
    assert r["stop_error"] is None and r["stop_s"] < STOP_TIMEOUT_S, r


def test_one_launch_blocks_a_kernel_load_and_stop_still_returns() -> None:
    """epoch_us 0 (one launch for the run): a first-use load waits for the device to go idle,
    which it does not while the loop runs. stop() reaches the kernel through pinned memory, not
    a CUDA call, so it returns in time, and the load then finishes."""
    needs("cupy")
    r = trial("cupy_new_kernel", epoch_us=0, bound=3.0)
    assert not r["done"], f"the load went through a single persistent launch: {r}"
    assert r["answered"] == r["sent"] > 0 and r["wrong"] == 0, r  # the loop answered all along
    assert r["stop_error"] is None and r["stop_s"] < STOP_TIMEOUT_S, r
    assert r["after_stop_s"] is not None and r["after_stop_s"] < WORK_BOUND_S, r


def test_epochs_relaunched_one_at_a_time_let_a_kernel_load_through_too() -> None:
    """cuda.epochs_in_flight 1 (each epoch launched once the last one ended), 1 ms epochs:
    the load goes through, the loop answers every echo, stop() returns in time."""
    needs("cupy")
    r = trial("cupy_new_kernel", epoch_us=1000, in_flight=1)
    assert r["done"] and r["work_s"] < WORK_BOUND_S, r
    assert r["answered"] == r["sent"] > 0 and r["wrong"] == 0, r
    assert r["stop_error"] is None and r["stop_s"] < STOP_TIMEOUT_S, r
    assert r["epochs"] >= 2, r
    assert r["answered"] == r["sent"] > 0 and r["wrong"] == 0, r
    assert r["stop_error"] is None and r["stop_s"] < STOP_TIMEOUT_S, r


def test_a_kernel_load_goes_through_the_gpu_far_ends_epochs() -> None:
    """The GPU far end runs in the engine's epochs too: one paced run of it lasts the whole
    trial (3 s), and a first-use kernel load finishes while it runs, every echo checked."""
    needs("cupy")
    r = trial("cupy_new_kernel", far_end="gpu")
    assert r["done"] and r["work_s"] < WORK_BOUND_S, r
    assert r["work_within_far_end"], f"the load waited for the far end's run to end: {r}"
    assert r["answered"] == r["sent"] > 0 and r["wrong"] == 0, r
    assert r["stop_error"] is None and r["stop_s"] < STOP_TIMEOUT_S, r


@pytest.mark.parametrize("in_flight", [1, 2])
def test_a_kernel_load_goes_through_the_verbs_serve_kernels_epochs(in_flight: int) -> None:
    """Verbs mode's serve kernel runs in epochs like the engine's: a first-use load goes
    through while it answers, every reply checked, and stop() returns in time."""
    needs("cupy")
    verbs_needs_gpunetio()
    r = trial("cupy_new_kernel", handler="verbs", epoch_us=1000, in_flight=in_flight)
    assert r["done"] and r["work_s"] < WORK_BOUND_S, r
    assert r["answered"] == r["sent"] > 0 and r["wrong"] == 0, r
    assert r["stop_error"] is None and r["stop_s"] < STOP_TIMEOUT_S, r
    assert r["epochs"] >= 2, r


def test_one_verbs_launch_blocks_a_kernel_load_and_stop_still_returns() -> None:
    """The control: the serve kernel in one launch (epoch_us 0) holds a first-use load until
    stop(), which reaches it through pinned memory and returns in time."""
    needs("cupy")
    verbs_needs_gpunetio()
    r = trial("cupy_new_kernel", handler="verbs", epoch_us=0, bound=3.0)
    assert not r["done"], f"the load went through a single persistent launch: {r}"
    assert r["answered"] == r["sent"] > 0 and r["wrong"] == 0, r
    assert r["stop_error"] is None and r["stop_s"] < STOP_TIMEOUT_S, r
    assert r["after_stop_s"] is not None and r["after_stop_s"] < WORK_BOUND_S, r
    assert r["epochs"] == 1, r


def verbs_needs_gpunetio() -> None:
    from roce_transceiver import _core

    info = _core.gpunetio_info()
    if not info["built"]:
        skip_missing("gpunetio", f"no GPUNetIO device API in this build: {info['source']}")
