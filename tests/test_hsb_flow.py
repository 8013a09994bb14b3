"""The whole HSB flow: enumerate -> check -> configure -> stream -> stop -> un-configure, with
the software bridge (peers/bridge.py) and the transceiver (cpu executor, socket NIC).

Goal:
- ``listen --hsb`` on ``lo`` receives exactly the frames the bridge streamed (number, CRC-32),
  and leaves the bridge un-configured (VP_MASK clear, every vp register 0): after its frame
  count, after SIGTERM, and with ECB packets lost on the way.
- A bridge that refuses a register is an error naming the status, nothing streams and the
  bridge is left un-configured (also when the refusal comes after the registers were
  written); a bridge that stops answering mid-stream ends listen in bounded time, saying on
  stderr that it may still be streaming and what clears it; no announcement is a bounded,
  named error; replies cut short are an error saying so, not a traceback.
- A second host's listen refuses a sensor that streams to another, naming it; with
  ``--take-over`` it takes it, and the first listen notices (frames stopped, registers
  changed), says who has it, leaves it to them and exits 1; a clean-up whose request the
  bridge refuses for its sequence (another host spoke) sends it again with a fresh one.
- Two sensors of one bridge, one QP (and transceiver) each: each receives only its sensor's
  frames.
- Across a network namespace (root): the bridge inside (``peer bridge``, broadcast
  announcements), listen outside in packet mode; the packet size follows the veth's MTU.
The cuda executor is not run here (CI has no GPU); the control plane does not depend on it.
Oracles: the bridge's record of what it sent (CRC-32 per frame) and its registers.
"""

from __future__ import annotations

import json
import selectors
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from cli_helpers import CLI, started
from hsb_helpers import bridge_host_config
from net_helpers import run_cmd

from roce_transceiver.config import load_config
from roce_transceiver.hsb_control import Ecb
from roce_transceiver.hsb_stream import HsbError, HsbStream, check_streams
from roce_transceiver.peers.bridge import BridgeFaults, SoftwareBridge
from roce_transceiver.transceiver import Transceiver

BRIDGE_IP = "127.0.17.9"
HOSTS = ("127.0.17.1", "127.0.17.2")
VP_REGS = [0x1000 + 4 * i for i in range(12)]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind((HOSTS[0], 0))
        return int(s.getsockname()[1])


def host_config(b: SoftwareBridge, port: int, host: str = HOSTS[0], **more: object) -> dict:
    hsb: dict[str, object] = {
        "control_port": b.control_port,
        "enumeration_port": port,
        "enumeration_timeout_s": 5.0,
        "frame_bytes": 20000,
        "timeout_s": 0.1,
    }
    return bridge_host_config(host, BRIDGE_IP, **{**hsb, **more})


def announcing_bridge(
    port: int, faults: BridgeFaults, rate: int | None = 200, **more: Any
) -> SoftwareBridge:
    """A software bridge on lo announcing itself to ``port`` every 50 ms (``rate``: frames a
    second once programmed; None, the bridge's default; ``more``: SoftwareBridge's keys)."""
    kw: dict[str, Any] = {} if rate is None else {"rate": rate}
    kw |= more
    return SoftwareBridge(
        BRIDGE_IP,
        control_port=0,
        announce_to=(HOSTS[0], port),
        announce_interval=0.05,
        faults=faults,
        **kw,
    )


@pytest.fixture
def lo_bridge(request: pytest.FixtureRequest) -> Iterator[tuple[SoftwareBridge, int]]:
    faults = getattr(request, "param", None) or BridgeFaults()
    port = free_port()
    b = announcing_bridge(port, faults)
    with b:
        yield b, port
    assert not b.errors


def write(tmp_path: Path, cfg: dict) -> Path:
    path = tmp_path / "hsb.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def listen(path: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    cmd = [*CLI, "listen", "--config", str(path), "--json", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)


def unconfigured(b: SoftwareBridge, vp: int = 0) -> bool:
    base = b.vp_address(vp)
    return not b.streaming(vp) and all(b.register(base + 4 * i) == 0 for i in range(12))


def test_listen_hsb_receives_what_the_bridge_streamed_and_unconfigures_it(
    lo_bridge: tuple[SoftwareBridge, int], tmp_path: Path
) -> None:
    b, port = lo_bridge
    done = listen(write(tmp_path, host_config(b, port)), "--hsb", BRIDGE_IP, "--frames", "6")
    assert done.returncode == 0, done.stderr
    *frames, summary = [json.loads(x) for x in done.stdout.splitlines()]
    sent = {f.frame_number: f.crc32 for f in b.sent[0]}
    assert len(frames) >= 6 and all(f["ok"] and f["bytes"] == 20000 for f in frames)
    assert {f["frame_number"]: f["crc32"] for f in frames}.items() <= sent.items()
    assert summary["dropped"] == 0 and summary["hsb"]["unconfigured"]
    assert summary["hsb"]["qpn"] == 0x11 and summary["hsb"]["packet_bytes"] == 1920
    assert unconfigured(b) and b.refused[0] == []
    assert "hsb: 127.0.17.9 sensor 0 (data plane 0) streaming" in done.stderr


def test_listen_hsb_unconfigures_on_sigterm(
    lo_bridge: tuple[SoftwareBridge, int], tmp_path: Path
) -> None:
    b, port = lo_bridge
    path = write(tmp_path, host_config(b, port))
    with started([*CLI, "listen", "--config", str(path), "--hsb", BRIDGE_IP], "listening") as p:
        sel = selectors.DefaultSelector()
        sel.register(p.stdout, selectors.EVENT_READ)
        assert sel.select(timeout=30), "no frame within 30 s"
        assert p.stdout.readline().startswith("frame 0 page 0 20000 B")
        assert b.streaming(0)
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=30)
    assert p.returncode == 0, err
    assert "SIGTERM: stopping" in err and unconfigured(b)


@pytest.mark.parametrize(
    "lo_bridge", [BridgeFaults(drop_requests=0.2, drop_replies=0.2)], indirect=True
)
def test_listen_hsb_programs_the_bridge_through_lost_ecb_packets(
    lo_bridge: tuple[SoftwareBridge, int], tmp_path: Path
) -> None:
    b, port = lo_bridge
    cfg = host_config(b, port, retries=10)
    done = listen(write(tmp_path, cfg), "--hsb", BRIDGE_IP, "--frames", "3")
    assert done.returncode == 0, done.stderr
    assert unconfigured(b)
    # The seed lost requests on the way in and replies on the way out: both were ridden out.
    assert b.lost_requests > 0 and b.lost_replies > 0, (b.lost_requests, b.lost_replies)


@pytest.mark.parametrize(
    ("faults", "failed"),
    [
        # HOST_IP's write refused: the block write fails, nothing of it is written.
        (BridgeFaults(write_status={0x1000 + 0x28: 0x03}), "write block 0x2000304"),
        # The read-back refused (PACKET_SIZE): the data channel's registers were written.
        (BridgeFaults(read_status={0x02000300 + 0x04: 0x03}), "read block 0x2000304"),
    ],
    ids=["write", "after-write"],
)
def test_a_register_the_bridge_refuses_is_an_error_and_the_bridge_is_left_unconfigured(
    tmp_path: Path, faults: BridgeFaults, failed: str
) -> None:
    port = free_port()
    with announcing_bridge(port, faults, rate=None) as b:
        done = listen(write(tmp_path, host_config(b, port)), "--hsb", BRIDGE_IP, "--frames", "1")
        assert done.returncode == 2
        assert "0x03 INVALID_ADDR" in done.stderr and failed in done.stderr, done.stderr
        assert not b.streaming(0) and b.sent[0] == []
        assert unconfigured(b) and b.register(0x02000300 + 0x0C) == 0  # VP_MASK
        if "read" in failed:  # the registers had been written, and were cleared again
            assert any(
                r.command == 0x09 and r.address == 0x02000304 and r.status == 0 for r in b.requests
            )


def test_a_bridge_that_stops_answering_mid_stream_ends_listen_in_bounded_time(
    tmp_path: Path,
) -> None:
    port = free_port()
    # Enough answers to configure and start (version, whom the sensor sends to, VP_MASK
    # read+write, the block write and read back, VP_MASK read+write): then silence, as a
    # bridge that hung or lost its link.
    faults = BridgeFaults(mute_after=8)
    with announcing_bridge(port, faults) as b:
        cfg = host_config(b, port, retries=2)
        start = time.monotonic()
        done = listen(write(tmp_path, cfg), "--hsb", BRIDGE_IP, "--frames", "3")
        took = time.monotonic() - start
        assert done.returncode == 1, done.stderr
        assert "could not un-configure sensor 0" in done.stderr
        assert "may still be streaming at 127.0.17.1" in done.stderr
        assert "hsb write --bridge 127.0.17.9 0x200030c 0" in done.stderr
        assert b.streaming(0)  # as a real bridge would: nothing told it to stop
        summary = json.loads(done.stdout.splitlines()[-1])
        assert summary["frames"] >= 3 and not summary["hsb"]["unconfigured"]
    assert took < 30


@pytest.mark.parametrize("cut", [6, 7])
def test_replies_cut_short_are_an_error_naming_the_length(tmp_path: Path, cut: int) -> None:
    port = free_port()
    with announcing_bridge(port, BridgeFaults(truncate=cut), rate=None) as b:
        done = listen(write(tmp_path, host_config(b, port)), "--hsb", BRIDGE_IP, "--frames", "1")
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and "struct.error" not in done.stderr
    assert f"ECB read 0x80 at {BRIDGE_IP}:{b.control_port}: the reply" in done.stderr
    assert f"has {cut} bytes, 14 needed" in done.stderr, done.stderr


def test_no_announcement_is_a_bounded_named_error(tmp_path: Path) -> None:
    b = SoftwareBridge(BRIDGE_IP, control_port=0)  # announces nothing
    with b:
        cfg = host_config(b, free_port(), enumeration_timeout_s=0.3)
        start = time.monotonic()
        done = listen(write(tmp_path, cfg), "--hsb", BRIDGE_IP, "--frames", "1")
    assert done.returncode == 2
    assert "no announcement from 127.0.17.9 within 0.3 s" in done.stderr
    assert time.monotonic() - start < 20
    # Without enumeration it is programmed at once, and streams.
    cfg["hsb"]["enumerate"] = False
    with SoftwareBridge(BRIDGE_IP, control_port=0, rate=200) as b2:
        cfg["hsb"]["control_port"] = b2.control_port
        done = listen(write(tmp_path, cfg), "--hsb", BRIDGE_IP, "--frames", "2")
        assert done.returncode == 0, done.stderr
        assert unconfigured(b2)


def test_an_older_bridge_names_the_page_in_8_bits_and_listen_reads_it_so(tmp_path: Path) -> None:
    # HSB IP 0x2602: the page is the immediate's low 8 bits (its frames set bits 11:8 too).
    # listen takes the bits from its announcement (hsb.page_bits: null); without one it reads
    # 12 and refuses to program it, naming the key.
    port = free_port()
    with announcing_bridge(port, BridgeFaults(), hsb_ip_version=0x2602) as b:
        cfg = host_config(b, port)
        done = listen(write(tmp_path, cfg), "--hsb", BRIDGE_IP, "--frames", "4")
        assert done.returncode == 0, done.stderr
        *frames, _ = [json.loads(x) for x in done.stdout.splitlines()]
        assert len(frames) >= 4 and all(f["ok"] and f["page_match"] for f in frames)
        cfg["hsb"]["enumerate"] = False
        done = listen(write(tmp_path, cfg), "--hsb", BRIDGE_IP, "--frames", "1")
        assert done.returncode == 2
        assert "HSB IP version 0x2602 names the page in the end-of-frame immediate's low 8" in (
            done.stderr
        )
        assert "set hsb.page_bits: 8" in done.stderr
        assert unconfigured(b)


def reset_states(summary: dict) -> list[str]:
    return [e["state"] for e in summary["hsb"]["session"]["events"]]


def test_a_bridge_reset_mid_stream_comes_back_and_its_frames_after_are_whole(
    tmp_path: Path,
) -> None:
    # The bridge restarts after 5 frames: silent for 0.3 s, its registers forgotten, then
    # announcing with its uptime from 0. listen's session finds the registers cleared (or no
    # answer), waits for the announcement, programs it again, and the frames go on.
    port = free_port()
    faults = BridgeFaults(reset_after_frames=5, reset_down_s=0.3)
    with announcing_bridge(port, faults, uptime=100.0) as b:  # a board that ran a while
        cfg = host_config(b, port, watchdog_s=0.2, reconnect_timeout_s=10.0)
        done = listen(write(tmp_path, cfg), "--hsb", BRIDGE_IP, "--frames", "15", "--seconds", "30")
        assert done.returncode == 0, done.stderr
        *frames, summary = [json.loads(x) for x in done.stdout.splitlines()]
        session = summary["hsb"]["session"]
        assert b.resets == 1 and session["reconnects"] == 1, session
        states = reset_states(summary)
        assert states[:1] == ["streaming"] and states[-1] == "stopped", states
        assert states[1:5] == ["lost", "re-enumerated", "re-programmed", "streaming"], states
        assert "waiting up to 10 s for it to come back" in done.stderr
        assert "streaming again (restarted: announced, uptime" in done.stderr
        missed = session["frames_missed"]
        assert len(missed) == 1 and missed[0] is not None and missed[0] >= 0, missed
        # Every frame whole, each the one the bridge sent (frame numbers restart at a reset).
        sent = {(f.resets, f.frame_number): f.crc32 for f in b.sent[0]}
        assert len(frames) >= 15 and all(f["ok"] for f in frames), frames
        numbers = [f["frame_number"] for f in frames]
        back = next(i for i in range(1, len(numbers)) if numbers[i] < numbers[i - 1])
        before, after = frames[:back], frames[back:]
        assert len(after) >= 5, numbers  # after the reset: frame numbers from 0 again
        assert all(sent[(0, f["frame_number"])] == f["crc32"] for f in before)
        assert all(sent[(1, f["frame_number"])] == f["crc32"] for f in after)
        assert summary["dropped"] == 0 and summary["hsb"]["unconfigured"]
        assert unconfigured(b)


def test_a_restart_whose_uptime_does_not_show_is_known_by_its_silence(tmp_path: Path) -> None:
    # HSB's emulator gives no uptime evidence (its field is little-endian): a bridge that went
    # silent and answers again with its registers clear has restarted all the same.
    port = free_port()
    faults = BridgeFaults(reset_after_frames=5, reset_down_s=1.0, reset_restarts_uptime=False)
    with announcing_bridge(port, faults, uptime=100.0) as b:
        cfg = host_config(b, port, watchdog_s=0.2, retries=1, reconnect_timeout_s=10.0)
        done = listen(write(tmp_path, cfg), "--hsb", BRIDGE_IP, "--frames", "12", "--seconds", "30")
        assert done.returncode == 0, done.stderr
        *frames, summary = [json.loads(x) for x in done.stdout.splitlines()]
        assert b.resets == 1 and summary["hsb"]["session"]["reconnects"] == 1
        assert "silent, then its registers clear: a restart" in done.stderr
        assert len(frames) >= 12 and all(f["ok"] for f in frames) and summary["dropped"] == 0


def test_a_bridge_reset_while_it_is_programmed_is_programmed_again(tmp_path: Path) -> None:
    # Reset after its 4th answer: in the middle of the first programming. The session waits
    # for it to restart and programs it again from the start.
    port = free_port()
    faults = BridgeFaults(reset_after_requests=4, reset_down_s=0.3)
    with announcing_bridge(port, faults, uptime=100.0) as b:
        cfg = host_config(b, port, retries=1, reconnect_timeout_s=10.0)
        done = listen(write(tmp_path, cfg), "--hsb", BRIDGE_IP, "--frames", "3", "--seconds", "30")
        assert done.returncode == 0, done.stderr
        *frames, summary = [json.loads(x) for x in done.stdout.splitlines()]
        assert b.resets == 1 and len(frames) >= 3 and all(f["ok"] for f in frames)
        events = summary["hsb"]["session"]["events"]
        assert events[0]["state"] == "lost" and "while programming" in events[0]["why"], events
        assert [e["state"] for e in events[1:4]] == ["re-enumerated", "re-programmed", "streaming"]
        assert unconfigured(b)


def listen_while(
    tmp_path: Path, event: Callable[[SoftwareBridge], None]
) -> tuple[SoftwareBridge, int, str, str]:
    """listen --hsb on a bridge that has run a while; ``event(bridge)`` once 5 frames were
    sent. The bridge, listen's exit status, stdout and stderr."""
    port = free_port()
    with announcing_bridge(port, BridgeFaults(), uptime=100.0) as b:
        cfg = host_config(b, port, watchdog_s=0.2, reconnect_timeout_s=10.0)
        cmd = [*CLI, "listen", "--config", str(write(tmp_path, cfg)), "--json", "--hsb"]
        with started([*cmd, BRIDGE_IP, "--seconds", "30"], "listening") as proc:
            deadline = time.monotonic() + 20
            while len(b.sent[0]) < 5 and time.monotonic() < deadline:
                time.sleep(0.01)  # a poll of the bridge's record, not a synchronisation
            event(b)
            out, err = proc.communicate(timeout=60)
    return b, proc.returncode, out, err


def test_a_bridge_that_comes_back_as_another_board_is_refused(tmp_path: Path) -> None:
    def restart_as_another(b: SoftwareBridge) -> None:
        b.mac = "02:48:53:42:00:77"  # another board at the same address...
        b.reset(0.3)  # ...after a restart

    b, status, out, err = listen_while(tmp_path, restart_as_another)
    assert status == 1, err
    assert "came back as another board: MAC 02:48:53:42:00:01 -> 02:48:53:42:00:77" in err
    summary = json.loads(out.splitlines()[-1])
    assert reset_states(summary)[-1] == "refused", summary["hsb"]["session"]
    assert not b.streaming(0)  # nothing programmed it again


def test_registers_cleared_without_a_restart_are_left_cleared(tmp_path: Path) -> None:
    # Another host clears the sensor (as hsb write does) while the bridge runs on: its
    # announced uptime goes on, so the session takes the clear as meant and ends, without
    # programming the sensor again.
    def clear(b: SoftwareBridge) -> None:
        with Ecb(BRIDGE_IP, b.control_port, timeout=0.5) as other:
            for address in reversed(VP_REGS):
                other.write(address, 0)

    b, status, out, err = listen_while(tmp_path, clear)
    assert status == 1, err
    assert "is back without a restart" in err and "left as it is (cleared on purpose)" in err
    summary = json.loads(out.splitlines()[-1])
    assert reset_states(summary)[-1] == "lost" and b.resets == 0
    assert not b.streaming(0) or b.register(VP_REGS[-1]) == 0  # not programmed again


def test_without_reconnect_a_reset_ends_listen(tmp_path: Path) -> None:
    port = free_port()
    faults = BridgeFaults(reset_after_frames=3, reset_down_s=0.3)
    with announcing_bridge(port, faults, uptime=100.0) as b:
        cfg = host_config(b, port, watchdog_s=0.2, reconnect=False)
        start = time.monotonic()
        done = listen(write(tmp_path, cfg), "--hsb", BRIDGE_IP, "--seconds", "30")
        assert time.monotonic() - start < 20
        assert done.returncode == 1, done.stderr
        assert "hsb.reconnect is false" in done.stderr
        summary = json.loads(done.stdout.splitlines()[-1])
        assert summary["frames"] >= 3 and reset_states(summary)[-1] == "lost"
        assert b.resets == 1 and not b.streaming(0)


def test_two_sensors_stream_to_two_transceivers_one_qp_each(
    lo_bridge: tuple[SoftwareBridge, int],
) -> None:
    b, port = lo_bridge
    cfgs = [
        load_config(host_config(b, port, bridge=BRIDGE_IP)),
        load_config(
            {
                **host_config(b, port, HOSTS[1], sensor=1, bridge=BRIDGE_IP),
                "qp": {"transport": "UC", "qpn": 0x22},
                "frames": {"pages": 4, "page_bytes": 65536, "rkey": 0x5354524D},
            }
        ),
    ]
    got: list[dict[int, int]] = [{}, {}]
    with Transceiver(cfgs[0]) as t0, Transceiver(cfgs[1]) as t1:
        streams = [HsbStream(c) for c in cfgs]
        plans = [s.open() for s in streams]
        try:
            assert check_streams(plans) == []
            deadline = time.monotonic() + 30
            while min(len(g) for g in got) < 5 and time.monotonic() < deadline:
                for i, t in enumerate((t0, t1)):
                    for f in t.frames(timeout=0.02):
                        assert f.ok, f.as_dict()
                        got[i][f.frame_number] = f.crc32
                        f.release()
        finally:
            for s in streams:
                s.close()
    assert min(len(g) for g in got) >= 5, got
    # sensor 1 is vp 2 (two SIFs per sensor, hololink's default for an unknown board)
    for g, vp, qpn in ((got[0], 0, 0x11), (got[1], 2, 0x22)):
        sent = {f.frame_number: f.crc32 for f in b.sent[vp]}
        assert g.items() <= sent.items()
        assert {f.qpn for f in b.sent[vp]} == {qpn}
    assert unconfigured(b, 0) and unconfigured(b, 2)


def test_two_sensors_stream_into_two_queues_of_one_transceiver(
    lo_bridge: tuple[SoftwareBridge, int],
) -> None:
    """queues.count 2: one session programs sensors 0 and 1, each into its queue's QP and
    pages; every frame of each arrives on its queue, whole, as the bridge sent it."""
    b, port = lo_bridge
    cfg = host_config(b, port, bridge=BRIDGE_IP)
    cfg["queues"] = {**cfg.get("queues", {}), "count": 2}
    cfg["frames"] = {**cfg.get("frames", {}), "pages": 8}
    loaded = load_config(cfg)
    got: list[dict[int, int]] = [{}, {}]
    with Transceiver(loaded) as t, HsbStream(loaded) as stream:
        assert [p.qpn for p in stream.plans] == [0x11, 0x12]
        deadline = time.monotonic() + 30
        while min(len(g) for g in got) < 5 and time.monotonic() < deadline:
            for f in t.frames(timeout=0.02):
                assert f.ok, f.as_dict()
                assert 4 * f.queue <= f.page < 4 * f.queue + 4  # its queue's pages
                got[f.queue][f.frame_number] = f.crc32
                f.release()
    assert min(len(g) for g in got) >= 5, got
    for g, vp, qpn in ((got[0], 0, 0x11), (got[1], 2, 0x12)):
        sent = {f.frame_number: f.crc32 for f in b.sent[vp]}
        assert g.items() <= sent.items()
        assert {f.qpn for f in b.sent[vp]} == {qpn}
    assert unconfigured(b, 0) and unconfigured(b, 2)


def wait_for(what: str, ok: Any, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not ok():
        assert time.monotonic() < deadline, f"{what}: not within {timeout} s"
        time.sleep(0.02)  # a poll of another process's output, bounded by the deadline


def test_a_second_host_is_refused_a_streaming_sensor_and_takes_it_over_with_take_over(
    tmp_path: Path,
) -> None:
    """Host 1's listen streams sensor 0; host 2's listen is refused, naming host 1, and
    nothing of host 1's changes; with --take-over host 2 gets the stream, and host 1's listen
    notices within its watchdog, says who has the sensor, leaves it (host 2 clears it at its
    own end) and exits 1."""
    port = free_port()
    # 10 frames/s: two listens printing every frame keep up on a loaded 2-core machine (a
    # listen stalled for 4 frames' time drops one), and the first still has a frame every
    # tenth of its watchdog's second.
    with announcing_bridge(port, BridgeFaults(), rate=10) as b:
        took, err1, out1 = take_over_between_two_listens(b, port, tmp_path)
    assert not b.errors
    assert took.returncode == 0, took.stderr + took.stdout.splitlines()[-1]
    *frames2, summary2 = [json.loads(x) for x in took.stdout.splitlines()]
    assert frames2 and all(f["ok"] for f in frames2)
    assert [h["ip"] for h in summary2["hsb"]["taken_from"]] == ["127.0.17.1"]
    assert summary2["hsb"]["unconfigured"] and summary2["hsb"]["lost"] == []
    summary1 = json.loads(out1.read_text().splitlines()[-1])
    assert summary1["frames"] > 0 and not summary1["hsb"]["unconfigured"]
    (lost,) = summary1["hsb"]["lost"]
    assert "sensor 0 was taken over: its registers now send to 127.0.17.2" in lost
    assert "was taken over: its registers now send to 127.0.17.2" in err1
    assert "may still be streaming" not in err1 and "could not" not in err1
    assert unconfigured(b)


def take_over_between_two_listens(
    b: SoftwareBridge, port: int, tmp_path: Path
) -> tuple[subprocess.CompletedProcess, str, Path]:
    """Host 2's listen with --take-over (after one without, refused) while host 1's
    streams; host 1's listen must then end by itself, exit 1. Host 2's run, host 1's stderr
    and its stdout file."""
    first = tmp_path / "first"
    first.mkdir()
    out1 = tmp_path / "first.jsonl"
    cmd = [*CLI, "listen", "--config", str(write(first, host_config(b, port))), "--json"]
    cmd += ["--hsb", BRIDGE_IP, "--seconds", "40"]
    with out1.open("w") as sink:
        p1 = subprocess.Popen(cmd, stdout=sink, stderr=subprocess.PIPE, text=True)
    try:
        wait_for("host 1's first frame", lambda: '"frame_number"' in out1.read_text())
        host_ip = 0x1000 + 0x28
        assert b.streaming(0) and b.register(host_ip) == 0x7F001101  # 127.0.17.1
        second = write(tmp_path, host_config(b, port, HOSTS[1]))
        refused = listen(second, "--hsb", BRIDGE_IP, "--frames", "1")
        assert refused.returncode == 2, refused.stderr
        assert "sensor 0 is another host's: its registers send to 127.0.17.1" in refused.stderr
        assert "--take-over" in refused.stderr
        assert b.streaming(0) and b.register(host_ip) == 0x7F001101 and p1.poll() is None
        took = listen(second, "--hsb", BRIDGE_IP, "--take-over", "--seconds", "3")
        _, err1 = p1.communicate(timeout=30)
    finally:
        if p1.poll() is None:
            p1.kill()
            p1.communicate()
    assert p1.returncode == 1, err1
    return took, err1, out1


def test_take_over_without_a_bridge_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from cli_helpers import run_cli

    path = write(tmp_path, bridge_host_config(HOSTS[0], BRIDGE_IP))
    status, _, err = run_cli(capsys, "listen", "--config", str(path), "--take-over")
    assert status == 2 and "--take-over takes a sensor over for --hsb: give --hsb IP" in err


def test_a_clean_up_refused_for_its_sequence_is_sent_again_with_a_fresh_one(
    lo_bridge: tuple[SoftwareBridge, int],
) -> None:
    """Another host speaks to the bridge (another sensor's, say): the bridge latches its
    sequence, this session's next checked request is refused (SEQUENCE_CHECK_FAIL); the
    clean-up sends it again, unchecked with a fresh sequence, and un-configures the sensor
    without an error."""
    b, port = lo_bridge
    cfg = load_config(host_config(b, port, bridge=BRIDGE_IP, enumerate=False))
    stream = HsbStream(cfg)
    stream.open()
    assert b.streaming(0)
    with Ecb(BRIDGE_IP, b.control_port, timeout=0.1, first_sequence=0x7000) as other:
        other.read(0x80)  # latches 0x7000 at the bridge
    stream.close()  # no HsbError: re-latched, then un-configured
    assert unconfigured(b)
    statuses = [r.status for r in b.requests]
    assert statuses.count(0x0B) == 1 and statuses[-1] == 0
    assert stream.lost == []


def test_a_sensor_taken_over_is_left_to_its_new_host(
    lo_bridge: tuple[SoftwareBridge, int],
) -> None:
    """In one process: session 1 has sensor 0; session 2 (another host) is refused before
    it writes anything, then takes it with hsb.take_over; session 1's look at its registers
    names session 2's host, and its stop and close leave session 2's registers as they are."""
    b, port = lo_bridge
    one = HsbStream(load_config(host_config(b, port, bridge=BRIDGE_IP, enumerate=False)))
    cfg2 = host_config(b, port, HOSTS[1], bridge=BRIDGE_IP, enumerate=False)
    one.open()
    try:
        writes = sum(r.command in (0x04, 0x09) for r in b.requests)
        with pytest.raises(
            HsbError, match=r"sensor 0 is another host.s: its registers send to 127\.0\.17\.1 "
        ):
            HsbStream(load_config(cfg2)).open()
        assert sum(r.command in (0x04, 0x09) for r in b.requests) == writes  # nothing written
        assert [state for _, state, _ in one.states()] == ["ours"]
        two = HsbStream(load_config({**cfg2, "hsb": {**cfg2["hsb"], "take_over": True}}))
        two.open()
        assert [h.ip for h in two.taken_from] == ["127.0.17.1"]
        ((_, state, holder),) = one.states()
        assert (state, holder.ip, holder.qpn) == ("taken", "127.0.17.2", 0x11)
        one.stop()
        one.close()
        assert b.streaming(0) and b.register(0x1000 + 0x28) == 0x7F001102  # still host 2's
        (lost,) = one.lost
        assert "taken over: its registers now send to 127.0.17.2" in lost and "QP 0x11" in lost
        two.close()
    finally:
        one.close()
    assert unconfigured(b) and two.lost == []


@pytest.mark.netns
def test_bridge_in_a_namespace_streams_to_listen_in_packet_mode(
    veth_namespace: tuple[str, str, str], tmp_path: Path
) -> None:
    ns, ours, theirs = veth_namespace
    run_cmd("ip", "addr", "add", "10.79.0.1/24", "dev", ours)
    run_cmd("ip", "netns", "exec", ns, "ip", "addr", "add", "10.79.0.2/24", "dev", theirs)
    mac = run_cmd("ip", "netns", "exec", ns, "cat", f"/sys/class/net/{theirs}/address").strip()
    cfg = {
        "executor": "cpu",
        "nic": "socket",
        "socket": {"mode": "packet", "interface": ours},
        "local": {"mac": "auto", "ip": "10.79.0.1"},
        "peer": {"mac": "auto", "ip": "10.79.0.2"},  # --hsb takes the announced MAC
        "qp": {"transport": "UC"},
        "handler": "frames",
        "frames": {"pages": 4, "page_bytes": 65536},
        "queues": {"rx_depth": 1024},
        "hsb": {"frame_bytes": 30000, "timeout_s": 0.2},
    }
    path = write(tmp_path, cfg)
    bridge = [*CLI, "peer", "bridge", "--ip", "10.79.0.2", "--mac", mac, "--rate", "100"]
    bridge += ["--announce", "10.79.0.255", "--announce-interval", "0.2", "--json"]
    with started(["ip", "netns", "exec", ns, *bridge], "running") as br:
        done = listen(path, "--hsb", "10.79.0.2", "--frames", "8")
        br.send_signal(signal.SIGTERM)
        out, _ = br.communicate(timeout=30)
    assert done.returncode == 0, done.stderr
    *frames, summary = [json.loads(x) for x in done.stdout.splitlines()]
    *streamed, bridge_summary = [json.loads(x) for x in out.splitlines()]
    sent = {s["frame_number"]: s["crc32"] for s in streamed if s["sensor"] == 0}
    assert len(frames) >= 8 and all(f["ok"] and f["bytes"] == 30000 for f in frames)
    assert {f["frame_number"]: f["crc32"] for f in frames}.items() <= sent.items()
    assert summary["hsb"]["packet_bytes"] == 1408  # veth MTU 1500: 1500 - 64, in 128s
    assert summary["hsb"]["host_mac"] == Path(f"/sys/class/net/{ours}/address").read_text().strip()
    assert bridge_summary["streaming_at_exit"] == [] and bridge_summary["errors"] == []
