"""The Holoscan apps end to end on the CPU, as a user runs them.

Goal: each app runs its graph to the end and its checks are real: the round trips are all
answered and echoed, every sensor frame is byte-exact (or damaged exactly as the sensor damaged
it), every QEC correction is the table's and no heavier than pymatching's, every majority vote
of the user's handler (custom_handler, from its YAML) the Python majority's. Oracles: the
peers' own records (what was sent), the Python decoders and majority vote, the files the apps
write (PNG decoded by Pillow, histogram counts summed, the floor in the histogram's JSON).
Negative cases: faults without ``allow_loss`` fail the run (exit 1), bad configuration is exit 2
with the key and line.
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from app_helpers import checks, run_app
from conftest import skip_missing

SCHEDULERS = ("greedy", "multi_thread", "event_based")


@pytest.mark.parametrize("scheduler", SCHEDULERS)
def test_roundtrip_latency_app(tmp_path, scheduler):
    proc, summary = run_app(
        "roundtrip_latency",
        tmp_path,
        "--count",
        "600",
        "--executor",
        "cpu",
        "--scheduler",
        scheduler,
        "--set",
        "latency.floor_iterations=1000",
        "--set",
        "peer.chunk=200",
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert all(checks(summary).values()), summary["checks"]
    assert summary["rows"]["scheduler"] == scheduler
    assert "[info]" not in proc.stderr  # Holoscan's own chatter is off unless asked for
    for head in ("round trip (us)", "msgs/s", "p50 / floor p50"):
        assert head in proc.stdout
    lat = summary["latency_us"]
    assert lat["count"] == 600 and 0 < lat["min"] <= lat["p50"] <= lat["p99"] <= lat["max"]
    assert summary["floor"]["name"] == "cpu_thread_pingpong"
    hist = json.loads((tmp_path / "roundtrip_latency.json").read_text())
    assert sum(hist["counts"]) == 600 and len(hist["edges"]) == len(hist["counts"]) + 1
    assert hist["floor"]["name"] == "cpu_thread_pingpong"  # the floor of the same run, drawn
    assert hist["floor"]["p50"] == pytest.approx(summary["floor"]["p50"])
    from PIL import Image

    from roce_transceiver.plots import LATENCY_SIZE

    with Image.open(tmp_path / "roundtrip_latency.png") as png:
        assert png.format == "PNG" and png.size == LATENCY_SIZE


@pytest.mark.parametrize("scheduler", SCHEDULERS)
def test_sensor_stream_app_frames_byte_exact(tmp_path, scheduler):
    # Paced, with pages to spare: under the threaded schedulers the sensor does not wait for
    # the graph (as a camera does not), and a graph slower than the sensor drops frames
    # (test_operators.py counts those); here every frame must come through.
    proc, summary = run_app(
        "sensor_stream",
        tmp_path,
        "--count",
        "60",
        "--executor",
        "cpu",
        "--scheduler",
        scheduler,
        "--set",
        "peer.rate=200",
        "--set",
        "transceiver.frames.pages=64",
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert all(checks(summary).values()), summary["checks"]
    assert summary["frames"] == 60 and summary["exact"] == 60
    assert summary["counters"]["frames"] == 60 and summary["counters"]["frames_dropped"] == 0


def test_sensor_stream_app_faults_are_the_sensors(tmp_path):
    faults = ["--set", "peer.loss=0.02", "--set", "peer.corrupt=0.02", "--set", "peer.seed=7"]
    proc, summary = run_app(
        "sensor_stream",
        tmp_path,
        "--count",
        "40",
        "--executor",
        "cpu",
        *faults,
        "--set",
        "frame_check.allow_loss=true",
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert summary["damaged_as_sent"] > 0, "the faults damaged no frame: the test proves nothing"
    assert summary["exact"] + summary["damaged_as_sent"] == 40
    # The same faults without allow_loss: the run fails, naming a damaged frame.
    proc, summary = run_app(
        "sensor_stream", tmp_path, "--count", "40", "--executor", "cpu", *faults
    )
    assert proc.returncode == 1
    assert not checks(summary)["frames verified"]
    assert "packets lost (frame_check.allow_loss is off)" in proc.stdout


@pytest.mark.parametrize("distance", [3, 5])
def test_qec_loop_app_corrections_right(tmp_path, distance):
    proc, summary = run_app(
        "qec_loop",
        tmp_path,
        "--count",
        "1500",
        "--executor",
        "cpu",
        "--set",
        f"transceiver.qec.distance={distance}",
        "--set",
        "latency.floor=false",
        "--set",
        "qec_check.sample=500",
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    c = checks(summary)
    assert c["corrections"] and c["vs pymatching"] and c["answers"]
    assert "1500 records: 0 not the table's" in proc.stdout
    assert "500 decoded by both: 0 heavier" in proc.stdout
    # At p = 0.03 some corrections fail logically, for the table and for matching alike.
    assert summary["logical_failures"] > 0 and summary["logical_failures_pymatching"] > 0


def test_qpu_peer_over_udp(tmp_path):
    from app_helpers import ROOT

    proc, summary = run_app(
        "roundtrip_latency",
        tmp_path,
        "--config",
        str(ROOT / "configs" / "roundtrip_udp.yaml"),
        "--count",
        "200",
        "--executor",
        "cpu",
        "--set",
        "latency.floor=false",
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert summary["counters"]["rx_packets"] == 200
    assert summary["rows"]["executor / nic"] == "cpu / socket (udp)"


@pytest.mark.netns
@pytest.mark.parametrize(
    "faults",
    [
        [],
        [
            "--set",
            "peer.loss=0.02",
            "--set",
            "peer.corrupt=0.01",
            "--set",
            "peer.reorder=0.02",
            "--set",
            "frame_check.allow_loss=true",
        ],
    ],
    ids=["clean", "faults"],
)
def test_sensor_stream_app_across_a_namespace(tmp_path, faults):
    from roce_transceiver.netns import why_not

    if why_not():
        skip_missing("netns", why_not())
    proc, summary = run_app(
        "sensor_stream",
        tmp_path,
        "--count",
        "40",
        "--executor",
        "cpu",
        "--set",
        "peer.link=namespace",
        "--set",
        "peer.rate=200",
        *faults,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert summary["rows"]["executor / nic"] == "cpu / socket (namespace)"
    assert summary["exact"] + summary["damaged_as_sent"] == 40
    assert (summary["damaged_as_sent"] > 0) == bool(faults)


@pytest.mark.netns
def test_qpu_peer_across_a_namespace(tmp_path):
    from roce_transceiver.netns import why_not

    if why_not():
        skip_missing("netns", why_not())
    proc, summary = run_app(
        "qec_loop",
        tmp_path,
        "--count",
        "200",
        "--executor",
        "cpu",
        "--set",
        "peer.link=namespace",
        "--set",
        "latency.floor=false",
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert all(checks(summary).values())
    assert summary["counters"]["rx_packets"] == 200


def test_custom_handler_app_from_its_yaml(tmp_path):
    """``roce-transceiver run configs/custom_handler.yaml`` from another folder: the handler's
    source is found from the file's folder, compiled, and every reply is the majority's."""
    from app_helpers import ROOT
    from cli_helpers import CLI

    proc = subprocess.run(
        [
            *CLI,
            "run",
            str(ROOT / "configs" / "custom_handler.yaml"),
            "--count",
            "400",
            "--output-dir",
            str(tmp_path),
            "--set",
            "latency.floor=false",
            "--set",
            "peer.error_rate=0.2",
        ],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=tmp_path,
        env={**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")},
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = json.loads((tmp_path / "custom_handler_summary.json").read_text())
    assert all(checks(summary).values()), summary["checks"]
    assert "400 records: 0 not the majority's, 0 without a reply" in proc.stdout
    assert "400/400 answered, 0 lost, 0 wrong" in proc.stdout
    assert summary["latency_us"]["count"] == 400 and summary["distance"] == 5
    assert summary["counters"]["handler_errors"] == 0
    # At 20 % flips some readings have 3 of 5 copies wrong: corrected, to the wrong bit.
    assert summary["logical_failures"] > 0
    source = summary["config"]["transceiver"]["custom"]["source"]
    assert source == str(ROOT / "examples" / "handlers" / "majority_vote.cu")
    assert list((tmp_path / "cache").rglob("*.so")), "the handler was not compiled for this run"


def test_custom_handler_app_missing_source_is_one_line_naming_file_and_key(tmp_path):
    from cli_helpers import CLI

    path = tmp_path / "mine.yaml"
    path.write_text(
        "app:\n  name: custom_handler\n  count: 10\ntransceiver:\n  handler: custom\n"
        "  custom:\n    source: decoder.cu\n"
    )
    proc = subprocess.run(
        [*CLI, "run", str(path), "--output-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = [line for line in proc.stderr.splitlines() if "error" in line]
    assert lines == [
        f"custom_handler: error: {path}:7: transceiver.custom.source: 'decoder.cu': no such "
        f"file ({tmp_path / 'decoder.cu'}: a relative path is read from the folder of the YAML "
        "file that gives it)"
    ], proc.stderr
    assert not (tmp_path / "custom_handler_summary.json").exists()


def test_custom_handler_app_refuses_a_distance_the_handler_does_not_take(tmp_path):
    from app_helpers import ROOT

    proc, summary = run_app(
        "custom_handler",
        tmp_path,
        "--config",
        str(ROOT / "configs" / "custom_handler.yaml"),
        "--set",
        "transceiver.custom.params={distance: 4}",
    )
    assert proc.returncode == 2 and summary is None, proc.stdout + proc.stderr
    assert "transceiver.custom.params: the majority vote's distance is 4" in proc.stderr


def test_custom_handler_app_qpu_peer_over_udp(tmp_path, monkeypatch):
    from app_helpers import ROOT

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # the user's cache untouched

    udp = {
        "transceiver.nic": "socket",
        "transceiver.socket.mode": "udp",
        "transceiver.local.ip": "127.0.0.1",
        "transceiver.peer.ip": "127.0.0.2",
        "peer.link": "udp",
        "latency.floor": "false",
    }
    proc, summary = run_app(
        "custom_handler",
        tmp_path,
        "--config",
        str(ROOT / "configs" / "custom_handler.yaml"),
        "--count",
        "150",
        *(arg for key, value in udp.items() for arg in ("--set", f"{key}={value}")),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert all(checks(summary).values()), summary["checks"]
    assert summary["rows"]["executor / nic"] == "cpu / socket (udp)"
    assert summary["counters"]["rx_packets"] == 150


# Every file a run writes is checked before the run (exit 2, one line naming key and path);
# a write that fails after it (a disk that fills up) costs that file, never the summary table.
def unwritable_cases(tmp_path):
    (tmp_path / "a-file").write_text("not a folder\n")
    return {
        "device": (
            ["--set", "latency.png=/dev/full"],
            "latency.png: /dev/full: a character device, not a regular file; null: none written",
        ),
        "proc": (
            ["--output-dir", "/proc"],
            "app.output_dir: /proc/roundtrip_latency_summary.json: cannot be created: ",
        ),
        "directory": (
            ["--set", f"latency.json={tmp_path}"],
            f"latency.json: {tmp_path}: a directory, not a file",
        ),
        "no-folder": (
            ["--set", "latency.png=nowhere/x.png"],
            f"latency.png: {tmp_path / 'out' / 'nowhere' / 'x.png'}: no folder "
            f"{tmp_path / 'out' / 'nowhere'}",
        ),
        "output-dir-a-file": (
            ["--output-dir", str(tmp_path / "a-file")],
            f"app.output_dir: {tmp_path / 'a-file'}: not a folder",
        ),
    }


@pytest.mark.parametrize("case", ["device", "proc", "directory", "no-folder", "output-dir-a-file"])
def test_an_output_that_cannot_be_written_is_exit_2_before_the_run(tmp_path, case):
    args, says = unwritable_cases(tmp_path)[case]
    out = tmp_path / "out"
    proc, summary = run_app(
        "roundtrip_latency", out, "--count", "50", "--set", "latency.floor=false", *args
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    errors = [line for line in proc.stderr.splitlines() if "error" in line.lower()]
    assert len(errors) == 1 and errors[0].startswith(f"roundtrip_latency: error: {says}"), errors
    assert proc.stdout == ""  # no run: no table
    assert "Traceback" not in proc.stderr and summary is None


def test_writes_that_fail_after_the_run_keep_the_summary_table(tmp_path):
    """Files stop at 3 KiB (RLIMIT_FSIZE: EFBIG, as a full disk's ENOSPC): room for the
    configuration the app hands Holoscan (about 2.2 KiB), none for the PNG, the histogram JSON
    (4.8 KiB) or the summary JSON (5 KiB), which all fail after the up-front check passed."""
    import resource
    import sys

    from app_helpers import ROOT

    def small_files() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (3072, 3072))

    app = [sys.executable, str(ROOT / "apps" / "roundtrip_latency.py")]
    proc = subprocess.run(
        [*app, "--output-dir", str(tmp_path), "--count", "200", "--set", "latency.floor=false"],
        capture_output=True,
        text=True,
        timeout=180,
        preexec_fn=small_files,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    table = proc.stdout.splitlines()
    assert table[0] == "roundtrip latency (echo)", proc.stdout + proc.stderr
    answers = [" ".join(row.split()) for row in table if row.startswith("answers")]
    assert answers == ["answers ok 200/200 answered, 0 lost, 0 wrong"], proc.stdout
    failed = [row for row in table if row.startswith("histogram files")]
    assert len(failed) == 1 and failed[0].split()[2] == "FAIL", proc.stdout
    for key in ("png", "json"):
        path = tmp_path / f"roundtrip_latency.{key}"
        assert f"latency.{key} {path}: not written: File too large" in failed[0]
    summary = tmp_path / "roundtrip_latency_summary.json"
    errors = [line for line in proc.stderr.splitlines() if line.startswith("roundtrip_latency:")]
    assert errors == [
        f"roundtrip_latency: error: summary not written: {summary}: File too large"
    ], proc.stderr
    assert "Traceback" not in proc.stderr and "Exception occurred" not in proc.stderr
