"""The sensor stream across Holoscan's distributed runtime (apps/sensor_stream_distributed.py):
fragment ingest (transceiver, sensor) and fragment process (checker, statistic) over UCX.

Goal: frames cross the fragment boundary as tensors with their record, and arrive whole: the
checker on the far side holds each one to what the sensor sent (its bytes, and the CRC and
frame number the record carries). Oracles: the sensor's own records (they cross too) and the
summary each process writes for the fragments it ran. Run as Holoscan documents it: both
fragments in one process, and a driver + worker pair on localhost (loopback only).
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from app_helpers import ROOT

# Not finished (issue 19, item 3): run here, ingest's `sent` records (Python objects) crossing
# to `process` make Holoscan 4.6's UcxTransmitter log "Received null entity in transmitter
# 'sent'" and the process end in SIGSEGV (exit 139) before a frame is checked. Holoscan's own
# runtime does run here (a two-fragment tensor app passes, driver + worker on localhost).
pytestmark = pytest.mark.skip(
    reason="sensor_stream_distributed is unfinished: the sensor's records crossing UCX crash "
    "Holoscan 4.6 here (SIGSEGV after 'Received null entity in transmitter sent')"
)

APP = ROOT / "apps" / "sensor_stream_distributed.py"
NAME = "sensor_stream_distributed"
COUNT = 24
LIMIT_S = 180


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start(out: Path, *holoscan: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(APP), "--output-dir", str(out), "--count", str(COUNT), *holoscan],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def finish(proc: subprocess.Popen[str]) -> str:
    try:
        output, _ = proc.communicate(timeout=LIMIT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        output, _ = proc.communicate()
        pytest.fail(f"not done within {LIMIT_S} s:\n{output[-4000:]}", pytrace=False)
    assert proc.returncode == 0, output[-4000:]
    return output


def summary(out: Path, fragment: str) -> dict:
    return json.loads((out / f"{NAME}_{fragment}.json").read_text())


def assert_frames_whole(process: dict, ingest: dict) -> None:
    assert process["ok"] and ingest["ok"], (process["checks"], ingest["checks"])
    assert process["frames"] == process["sent"] == COUNT
    assert process["exact"] == COUNT and not process["bad"] and not process["gaps"]
    assert process["statistic_frames"] == COUNT
    assert ingest["counters"]["frames"] == COUNT


def test_both_fragments_in_one_process(tmp_path):
    finish(start(tmp_path))
    assert_frames_whole(summary(tmp_path, "process"), summary(tmp_path, "ingest"))


def test_driver_and_worker_on_localhost(tmp_path):
    """The driver runs ingest, a worker (another process) runs process: each writes only the
    summary of the fragment it ran."""
    driver_out, worker_out = tmp_path / "driver", tmp_path / "worker"
    driver_at = f"127.0.0.1:{free_port()}"
    driver = start(
        driver_out,
        "--driver",
        "--worker",
        "--fragments",
        "ingest",
        "--address",
        driver_at,
        "--worker-address",
        f"127.0.0.1:{free_port()}",
    )
    worker = start(
        worker_out,
        "--worker",
        "--fragments",
        "process",
        "--address",
        driver_at,
        "--worker-address",
        f"127.0.0.1:{free_port()}",
    )
    try:
        finish(worker)
    finally:
        finish(driver)
    assert not (driver_out / f"{NAME}_process.json").exists()
    assert not (worker_out / f"{NAME}_ingest.json").exists()
    assert_frames_whole(summary(worker_out, "process"), summary(driver_out, "ingest"))


def test_holoscan_options_are_told_from_the_apps():
    sys.path.insert(0, str(ROOT / "apps"))
    try:
        from sensor_stream_distributed import split_argv
    finally:
        sys.path.pop(0)
    ours, theirs = split_argv(
        ["--count", "5", "--driver", "--fragments", "ingest", "--address=h:1", "--set", "a=1"]
    )
    assert ours == ["--count", "5", "--set", "a=1"]
    assert theirs == ["--driver", "--fragments", "ingest", "--address=h:1"]
