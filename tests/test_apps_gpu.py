"""The three apps with the cuda executor (the H200): the persistent kernel runs the loop, the
graph gets frames as device tensors (the statistic runs on the GPU), every check holds.

Oracles as in test_apps.py; here also: every frame reached the statistic as a device tensor.
"""

from __future__ import annotations

import pytest
from app_helpers import checks, run_app

pytestmark = pytest.mark.gpu


def test_roundtrip_latency_app_cuda(tmp_path):
    proc, summary = run_app("roundtrip_latency", tmp_path, "--count", "5000", "--executor", "cuda")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    print(proc.stdout)
    assert all(checks(summary).values()) and summary["floor"]["name"] == "pinned_pingpong"
    assert summary["rows"]["executor / nic"].startswith("cuda / loopback")


# Issue 26: with epoch_us 0 (one launch) the app never finished: its statistic loaded a cupy
# kernel at the first frame, and a module load waits for the device to go idle. Every epoch
# length delivers every frame now (the statistic's kernel is loaded when the graph is composed).
@pytest.mark.parametrize("epoch_us", [0, 1000, 10000])
def test_sensor_stream_app_cuda_frames_on_the_gpu(tmp_path, epoch_us):
    proc, summary = run_app(
        "sensor_stream",
        tmp_path,
        "--count",
        "200",
        "--executor",
        "cuda",
        "--set",
        f"transceiver.cuda.epoch_us={epoch_us}",
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    print(proc.stdout)
    assert all(checks(summary).values())
    assert "200 frames, 200 on the GPU" in summary["rows"]["statistic"]


@pytest.mark.parametrize("distance", [3, 5])
def test_qec_loop_app_cuda(tmp_path, distance):
    proc, summary = run_app(
        "qec_loop",
        tmp_path,
        "--count",
        "5000",
        "--executor",
        "cuda",
        "--set",
        f"transceiver.qec.distance={distance}",
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    print(proc.stdout)
    assert all(checks(summary).values())
