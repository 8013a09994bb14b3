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
from typing import Any

import numpy as np
import pytest
from app_helpers import ROOT

pytest.importorskip("holoscan", reason="the distributed app needs Holoscan")

from roce_transceiver.operators.frame_ops import (
    SENT_RECORD,
    sent_frames,
    sent_tensors,
)
from roce_transceiver.peers.sensor import SentFrame

APP = ROOT / "apps" / "sensor_stream_distributed.py"
NAME = "sensor_stream_distributed"
COUNT = 24
LIMIT_S = 180


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start(out: Path, *options: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(APP), "--output-dir", str(out), "--count", str(COUNT), *options],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def finish(proc: subprocess.Popen[str], expect: int = 0) -> str:
    try:
        output, _ = proc.communicate(timeout=LIMIT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        output, _ = proc.communicate()
        pytest.fail(f"not done within {LIMIT_S} s:\n{output[-4000:]}", pytrace=False)
    assert proc.returncode == expect, output[-4000:]
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


def test_damage_crosses_with_the_sensors_record(tmp_path):
    """Faults on the wire: the sensor's record of each damaged frame (packets lost) crosses
    with it, so the far checker holds each frame to exactly the damage done, and without
    allow_loss the run fails naming one."""
    faults = ["--set", "peer.loss=0.02", "--set", "peer.corrupt=0.02", "--set", "peer.seed=7"]
    finish(start(tmp_path / "allowed", *faults, "--set", "frame_check.allow_loss=true"))
    process = summary(tmp_path / "allowed", "process")
    assert process["damaged_as_sent"] > 0, "the faults damaged no frame: the test proves nothing"
    assert process["exact"] + process["damaged_as_sent"] == process["frames"] == COUNT
    assert process["ok"] and not process["bad"], process["checks"]
    output = finish(start(tmp_path / "strict", *faults), expect=1)
    assert "packets lost (frame_check.allow_loss is off)" in output
    assert not summary(tmp_path / "strict", "process")["ok"]


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


def _sent(number: int, content: bytes, **faults: Any) -> SentFrame:
    return SentFrame(number, number % 16, content, [b"packet"], **faults)


def test_sensor_records_round_trip_as_tensors():
    sent = [
        _sent(3, bytes(range(256)) * 4),
        _sent(4, b"\x07" * 100, lost=2, corrupted=1, reordered=3, duplicated=4, end_lost=True),
    ]
    rows, content = sent_tensors(sent)
    assert rows.dtype == np.int64 and rows.shape == (2, len(SENT_RECORD))
    assert content.dtype == np.uint8 and content.flags.writeable
    back = sent_frames(rows, content, "unpack")
    assert [(b.frame_number, b.page, b.content, b.crc32) for b in back] == [
        (s.frame_number, s.page, s.content, s.crc32) for s in sent
    ]
    assert (back[1].lost, back[1].corrupted, back[1].reordered) == (2, 1, 3)
    assert (back[1].duplicated, back[1].end_lost, back[0].end_lost) == (4, True, False)
    assert back[0].packets == []  # what crossed is what a checker reads


def test_malformed_sensor_records_are_named():
    rows, content = sent_tensors([_sent(1, b"abcd")])
    with pytest.raises(ValueError, match=r"unpack: sent records of shape \(8,\)"):
        sent_frames(rows[0], content, "unpack")
    with pytest.raises(ValueError, match="unpack: sent records name 4 content bytes, 3 came"):
        sent_frames(rows, content[:3], "unpack")


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
