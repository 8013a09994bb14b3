"""``roce-transceiver listen`` and ``roce-transceiver peer sensor``: frames over a real stack.

Goal: a sensor process sends HSB-style frames over UDP on ``lo`` to a ``listen`` process
(socket NIC, frames handler), which prints one JSON line per frame.
- Every frame arrives ok, with the CRC-32 the sensor computed over what it sent.
- With packets lost on purpose, exactly the frames the sensor damaged are reported not ok
  (and the exit status says so), and the rest still arrive whole: the receiver never stalls.
- Across a network namespace in packet mode (root): the sensor in the namespace, with and
  without loss, reordering, duplication and corrupt ICRCs: each frame's ``packets_lost`` is
  what the sensor dropped or corrupted, intact frames are byte-exact, the capture dissects
  in tshark.
- The sensor sends a file's bytes, and reports the SENDs the host sends back.

Oracles: the sensor's own per-frame report (CRC-32 of the content, packets it dropped).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from cli_helpers import CLI, started
from conftest import without
from net_helpers import bth_opcodes, run_cmd


def config(tmp_path: Path) -> Path:
    cfg = {
        "executor": "cpu",
        "nic": "socket",
        "socket": {"mode": "udp"},
        "local": {"ip": "127.0.0.1"},
        "peer": {"ip": "127.0.0.2"},
        "qp": {"transport": "UC"},
        "handler": "frames",
        "frames": {"pages": 4, "page_bytes": 65536, "metadata": True},
        "queues": {"rx_depth": 1024},
    }
    path = tmp_path / "sensor_stream.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def listen_and_send(
    path: Path, frames: int, sensor: list[str], *listen_args: str
) -> tuple[int, list[dict], dict, list[dict]]:
    """``listen`` (with ``listen_args``) for ``frames`` frames while ``sensor`` (a command)
    sends them: listen's exit status, its frame lines and summary, and the sensor's lines."""
    until = ["--frames", str(frames), "--seconds", "60", *listen_args]
    with started([*CLI, "listen", "--config", str(path), *until, "--json"], "listening") as listen:
        done = subprocess.run(sensor, capture_output=True, text=True, timeout=120, check=False)
        assert done.returncode == 0, done.stderr
        out, _ = listen.communicate(timeout=90)
    *lines, summary = [json.loads(line) for line in out.splitlines()]
    return listen.returncode, lines, summary, [json.loads(x) for x in done.stdout.splitlines()]


def run_pair(path: Path, frames: int, *sensor_args: str) -> tuple[int, list[dict], list[dict]]:
    args = ["--config", str(path), "--frames", str(frames), "--frame-bytes", "20000"]
    sensor = [*CLI, "peer", "sensor", *args, "--rate", "200", "--json", *sensor_args]
    status, lines, summary, sent = listen_and_send(path, frames, sensor)
    return status, [*lines, summary], sent


def test_listen_prints_every_frame_the_sensor_sent_ok(tmp_path: Path) -> None:
    status, lines, sent = run_pair(config(tmp_path), 12)
    *frames, summary = lines
    assert status == 0, summary
    assert [f["frame_number"] for f in frames] == [s["frame_number"] for s in sent]
    assert [f["crc32"] for f in frames] == [s["crc32"] for s in sent]
    assert all(f["ok"] and f["bytes"] == 20000 and f["packets_lost"] == 0 for f in frames)
    assert summary["frames"] == 12 and summary["bad"] == 0


def test_listen_slices_prints_a_frames_slices_before_it(tmp_path: Path) -> None:
    path = config(tmp_path)
    args = ["--config", str(path), "--frames", "6", "--frame-bytes", "20000"]
    sensor = [*CLI, "peer", "sensor", *args, "--rate", "200", "--json"]
    status, lines, summary, sent = listen_and_send(path, 6, sensor, "--slices", "4096")
    assert status == 0, summary
    frames = [x for x in lines if "slice" not in x]
    assert [f["frame_number"] for f in frames] == [s["frame_number"] for s in sent]
    shape = [(k * 4096, min(4096, 20000 - k * 4096)) for k in range(5)]
    for f in frames:  # its five slices, in order, all before it
        at = lines.index(f)
        slices = [x for x in lines if "slice" in x and x["frame_number"] == f["frame_number"]]
        assert all(lines.index(x) < at for x in slices)
        assert [(x["offset"], x["bytes"]) for x in slices] == shape
        assert [x["slice"] for x in slices] == list(range(5))
        assert all(x["whole"] and x["page"] == f["page"] for x in slices)
        assert [x["last"] for x in slices] == [False] * 4 + [True]
    assert len(lines) == 6 * 6
    assert summary["counters"]["frame_slices"] == 30
    assert "frame_slices_partial" not in summary["counters"]  # moved(): counters that moved


def test_frames_whose_end_was_lost_are_dropped_and_listen_says_so(tmp_path: Path) -> None:
    """Lost end-of-frame packets: each such frame is closed as incomplete by the next one's
    first packet (never merged into it), counted in ``dropped``, and listen exits 1."""
    path = config(tmp_path)
    sensor = [*CLI, "peer", "sensor", "--config", str(path), "--frames", "12"]
    sensor += ["--frame-bytes", "20000", "--rate", "200", "--end-loss", "0.3", "--json"]
    # Listen until its time is up: how many frames come whole is the sensor's draw.
    until = ["--frames", "1000", "--seconds", "6"]
    with started([*CLI, "listen", "--config", str(path), *until, "--json"], "listening") as listen:
        done = subprocess.run(sensor, capture_output=True, text=True, timeout=120, check=False)
        assert done.returncode == 0, done.stderr
        out, _ = listen.communicate(timeout=90)
    *frames, summary = [json.loads(line) for line in out.splitlines()]
    sent = [json.loads(x) for x in done.stdout.splitlines()]
    ended = [s["frame_number"] for s in sent if not s["end_lost"]]
    lost_ends = [s["frame_number"] for s in sent[:-1] if s["end_lost"]]  # the last stays open
    assert lost_ends, "the seed lost no end: pick a rate that does"
    assert [f["frame_number"] for f in frames] == ended
    assert all(f["ok"] and f["bytes"] == 20000 for f in frames)
    assert summary["dropped"] == len(lost_ends) == summary["counters"]["frames_incomplete"]
    assert listen.returncode == 1


@pytest.mark.parametrize("as_json", [True, False])
def test_a_record_crc_of_0_is_explained_once_with_the_key_that_takes_such_frames(
    tmp_path: Path, as_json: bool
) -> None:
    # HSB's emulator leaves the record's CRC 0: with frames.check_crc true (the default) every
    # frame is bad, and listen says why once, both CRCs in the record's convention (JAMCRC).
    path = config(tmp_path)
    sensor = [*CLI, "peer", "sensor", "--config", str(path), "--frames", "3"]
    sensor += ["--frame-bytes", "20000", "--rate", "200", "--record-crc", "zero", "--json"]
    until = ["--frames", "3", "--seconds", "60", *(["--json"] if as_json else [])]
    with started([*CLI, "listen", "--config", str(path), *until], "listening") as listen:
        done = subprocess.run(sensor, capture_output=True, text=True, timeout=120, check=False)
        assert done.returncode == 0, done.stderr
        out, err = listen.communicate(timeout=90)
    assert listen.returncode == 1
    sent = [json.loads(x) for x in done.stdout.splitlines()]
    ours = sent[0]["crc32"] ^ 0xFFFFFFFF
    why = [line for line in err.splitlines() if "frames.check_crc: false" in line]
    assert len(why) == 1, err
    assert "record's CRC is 00000000 (0: the sender does not compute it" in why[0], why
    assert f"the page's is {ours:08x} (both JAMCRC" in why[0], why
    lines = out.splitlines()[:-1]  # the summary last
    if as_json:
        frames = [json.loads(line) for line in lines]
        # metadata_crc32: the field's name before 2026-12-01, kept beside metadata_crc.
        assert all(f["metadata_crc"] == f["metadata_crc32"] == 0 for f in frames), frames
        assert not any(f["ok"] for f in frames)
    else:
        assert f"jamcrc {ours:08x} record 00000000" in lines[0] and lines[0].endswith("BAD")


def test_lost_packets_mark_exactly_the_damaged_frames(tmp_path: Path) -> None:
    status, lines, sent = run_pair(config(tmp_path), 12, "--loss", "0.05")
    *frames, summary = lines
    damaged = {s["frame_number"] for s in sent if s["lost"]}
    assert damaged, "the seed lost nothing: pick a rate that does"
    assert {f["frame_number"] for f in frames if not f["ok"]} == damaged
    assert all(f["crc32"] == s["crc32"] for f, s in zip(frames, sent, strict=True) if f["ok"])
    assert status == 1 and summary["bad"] == len(damaged)


@pytest.mark.parametrize(
    "faults",
    [[], ["--loss", "0.01", "--reorder", "0.02", "--duplicate", "0.02", "--corrupt", "0.01"]],
    ids=["clean", "faults"],
)
def test_sensor_in_a_namespace_frames_over_packet_mode(
    veth_namespace: tuple[str, str, str],
    tmp_path: Path,
    faults: list[str],
    request: pytest.FixtureRequest,
) -> None:
    ns, ours, theirs = veth_namespace
    peer_mac = run_cmd("ip", "netns", "exec", ns, "cat", f"/sys/class/net/{theirs}/address")
    cfg = yaml.safe_load(config(tmp_path).read_text())
    cfg["socket"] = {"mode": "packet", "interface": ours, "capture": str(tmp_path / "s.pcap")}
    cfg["local"] = {"mac": "auto", "ip": "10.78.0.1"}
    cfg["peer"] = {"mac": peer_mac.strip(), "ip": "10.78.0.2"}
    path = tmp_path / "packet.yaml"
    path.write_text(yaml.safe_dump(cfg))
    # The sensor reads the same file; its MAC for us must be concrete, not auto.
    sensor_cfg = {
        **cfg,
        "local": {
            **cfg["local"],
            "mac": Path(f"/sys/class/net/{ours}/address").read_text().strip(),
        },
    }
    sensor_path = tmp_path / "sensor.yaml"
    sensor_path.write_text(yaml.safe_dump(sensor_cfg))
    # Paced, as a camera is: a burst as fast as Python sends can outrun a loaded 2-core
    # machine's NIC thread (the kernel then drops, and the frames come out short).
    args = ["--config", str(sensor_path), "--interface", theirs, "--frames", "8", "--rate", "100"]
    sensor = ["ip", "netns", "exec", ns, *CLI, "peer", "sensor", *args, *faults, "--json"]
    status, frames, summary, sent = listen_and_send(path, 8, sensor)
    assert summary["frames"] == 8 and len(frames) == len(sent) == 8, summary
    # Each frame lost exactly what the sensor dropped or corrupted; reordered and repeated
    # packets cost nothing; an intact frame is byte-exact.
    assert [f["packets_lost"] for f in frames] == [s["lost"] for s in sent]
    assert [f["ok"] for f in frames] == [s["lost"] == 0 for s in sent]
    assert all(f["crc32"] == s["crc32"] for f, s in zip(frames, sent, strict=True) if f["ok"])
    assert status == (0 if all(s["lost"] == 0 for s in sent) else 1)
    if faults:
        assert any(s["lost"] for s in sent), "the seed damaged nothing: raise a rate"
    # The capture of the run dissects as RoCEv2 in tshark, where there is one.
    tshark = shutil.which("tshark")
    if tshark:
        opcodes = set(bth_opcodes(tshark, str(tmp_path / "s.pcap")))
        assert opcodes <= {"42", "43"} and "43" in opcodes  # UC WRITE Only, with Immediate
    else:
        without("tshark", "tshark not found: the capture was not dissected")


def test_sensor_takes_content_from_a_file_and_reports_the_sends_it_gets(tmp_path: Path) -> None:
    from roce_transceiver.transceiver import Transceiver

    path = config(tmp_path)
    content = tmp_path / "image.raw"
    content.write_bytes(bytes(range(256)) * 40)
    with Transceiver(str(path)) as t:
        args = ["--config", str(path), "--frames", "3", "--content", str(content)]
        sensor = subprocess.Popen(
            [*CLI, "peer", "sensor", *args, "--linger", "5", "--json"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            got = []
            while len(got) < 3:
                frames = t.frames(timeout=10.0)
                assert frames, "no frame from the sensor within 10 s"
                got += frames
            for f in got:
                assert f.ok and f.data.tobytes() == content.read_bytes()
                f.release()
            for i in range(3):  # the host talks back to the sensor, as HSB hosts do
                t.send(b"set exposure %d" % i)
            out, err = sensor.communicate(timeout=60)
        finally:
            if sensor.poll() is None:
                sensor.kill()
                sensor.communicate()
    assert sensor.returncode == 0, err
    report = json.loads(out.splitlines()[-1])
    assert report["sends_received"] == 3
    assert [bytes.fromhex(s["payload"]) for s in report["sends"]] == [
        b"set exposure %d" % i for i in range(3)
    ]
    assert all(s["icrc_ok"] for s in report["sends"])
