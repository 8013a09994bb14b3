"""The socket NIC's mmap receive path: packet mode through a TPACKET_V3 ring (docs/socket_nic.md).

Goal: with ``socket.rx_path`` the ring (``mmap``; ``auto`` for a one-way UC stream) receives
what recvmmsg received, counted the same way, and says so in ``nic_info()``:
- auto's rule: the ring for the frames and sink handlers on UC, recvmmsg where frames are
  answered (echo) or acknowledged (RC) and for udp mode; the ring's geometry is reported;
- a burst that fills many blocks arrives whole and in order, frames longer than TPACKET_V3's
  nominal frame size and the longest that fits a slot included, and one longer than a slot is
  ``nic_too_long``; the same on both paths (the capture is the oracle, byte for byte);
- a lone frame, in a block the kernel has only begun, is delivered by the block timeout;
- frames the ring has no room for are ``nic_kernel_drops``, exactly: with the NIC stopped
  (SIGSTOP) a flood overflows the ring, and once it has caught up every frame sent is in
  ``nic_rx_frames + nic_filtered + nic_rx_ring_full + nic_kernel_drops``;
- where the ring cannot be mapped (the address space capped with RLIMIT_AS), auto receives
  with recvmmsg and says why, and ``rx_path: mmap`` fails start() naming the failure;
- an 802.1Q-tagged frame reaches the engine untagged, as with recvmmsg;
- the echo loop works through the ring (tx from the ring's socket, our frames not seen again).

The peer sends from inside a network namespace joined by a veth pair (MTU 9000), from this
process (a socket opened in the namespace) or from ``_core.packet_blast`` run there. Needs
root and iproute2. Oracles: the frames the test built (``roce_transceiver.protocol``), the
kernel's count of frames it took from the sender, and the counters.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from child_helpers import accounted, ask, final_once_accounted
from conftest import skip_missing
from engine_helpers import wait_counters

from roce_transceiver import _core, netns
from roce_transceiver.config import ConfigError, load_config
from roce_transceiver.pcap import read_pcap
from roce_transceiver.protocol import build, parse
from roce_transceiver.socket_rx import rx_path as rx_path_rule
from roce_transceiver.transceiver import Transceiver, TransceiverError

OURS_IP, PEER_IP = "10.78.0.1", "10.78.0.2"
SLOT = 8192
WAIT_S = 30.0


@pytest.fixture
def jumbo_namespace() -> Iterator[netns.VethNamespace]:
    """A namespace and a veth pair with MTU 9000 (frames longer than a slot can be sent)."""
    reason = netns.why_not()
    if reason:
        skip_missing("netns", reason)
    with netns.veth_namespace(tag=f"rm{os.getpid() % 10000}", mtu=9000) as v:
        yield v


def packet_config(v: netns.VethNamespace, **extra: Any) -> dict[str, Any]:
    cfg: dict[str, Any] = {
        "executor": "cpu",
        "nic": "socket",
        "socket": {"mode": "packet", "interface": v.ours},
        "local": {"mac": "auto", "ip": OURS_IP},
        "peer": {"mac": v.mac("theirs"), "ip": PEER_IP},
        "qp": {"transport": "UC"},
        "handler": "sink",
        "queues": {"slot_bytes": SLOT, "rx_depth": 4096},
    }
    for key, value in extra.items():
        if isinstance(value, dict):
            cfg.setdefault(key, {}).update(value)
        else:
            cfg[key] = value
    return cfg


def send_only(v: netns.VethNamespace, qpn: int, psn: int, payload: bytes, **kw: Any) -> bytes:
    """A UC SEND Only from the peer to us."""
    return build(
        "UC_SEND_ONLY",
        payload,
        eth_src=v.mac("theirs"),
        eth_dst=v.mac("ours"),
        ip_src=PEER_IP,
        ip_dst=OURS_IP,
        psn=psn & 0xFFFFFF,
        dest_qp=qpn,
        **kw,
    )


def peer_socket(v: netns.VethNamespace) -> socket.socket:
    """An AF_PACKET socket on the peer's end, living in the namespace."""

    def make() -> socket.socket:
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))
        s.bind((v.theirs, 0))
        return s

    return netns.inside(v.namespace, make)


def blast(v: netns.VethNamespace, frames: list[bytes], repeat: int = 1) -> int:
    """Sends ``frames`` (``repeat`` times) from the namespace as fast as the kernel takes
    them; the number the kernel took."""
    sent = netns.inside(v.namespace, lambda: _core.packet_blast(v.theirs, frames, repeat, 64))
    return int(sent["frames"])


# -- which path, and what the ring is ------------------------------------------------


@pytest.mark.parametrize(
    ("mode", "handler", "transport", "asked", "takes"),
    [
        ("packet", "frames", "UC", "auto", "auto"),
        ("packet", "sink", "UC", "auto", "auto"),
        ("packet", "frames", "RC", "auto", "recvmmsg"),
        ("packet", "echo", "UC", "auto", "recvmmsg"),
        ("packet", "qec", "UC", "auto", "recvmmsg"),
        ("packet", "echo", "RC", "mmap", "mmap"),
        ("packet", "frames", "UC", "recvmmsg", "recvmmsg"),
        ("udp", "frames", "UC", "auto", "recvmmsg"),
    ],
)
def test_auto_rule_keeps_the_ring_for_streams_nothing_answers(
    mode: str, handler: str, transport: str, asked: str, takes: str
) -> None:
    """What the NIC is told (auto: the ring, falling back to recvmmsg), and the reason nic_info()
    reports; no root needed: the rule is the configuration's."""
    sock = {"mode": mode, "rx_path": asked} | ({"interface": "lo"} if mode == "packet" else {})
    cfg = load_config(
        {"nic": "socket", "socket": sock, "handler": handler, "qp": {"transport": transport}}
    )
    path, reason = rx_path_rule(cfg)
    assert path == takes, reason
    if asked != "auto":
        assert reason == f"socket.rx_path: {asked}"
    elif takes == "auto":
        assert reason == f"auto: a one-way stream (handler {handler}, UC): the ring"
    elif mode == "udp":
        assert reason == "udp mode receives with recvmmsg"
    else:
        assert reason.startswith("auto: ") and "up to 1 ms" in reason, reason


@pytest.mark.parametrize(
    ("handler", "transport", "rx_path", "expected"),
    [
        ("sink", "UC", "auto", "mmap"),
        ("frames", "UC", "auto", "mmap"),
        ("echo", "UC", "auto", "recvmmsg"),
        ("sink", "RC", "auto", "recvmmsg"),
        ("echo", "RC", "mmap", "mmap"),
        ("sink", "UC", "recvmmsg", "recvmmsg"),
    ],
)
def test_auto_takes_the_ring_for_one_way_uc_streams_and_says_which_path_is_in_use(
    jumbo_namespace: netns.VethNamespace, handler: str, transport: str, rx_path: str, expected: str
) -> None:
    v = jumbo_namespace
    cfg = packet_config(
        v, handler=handler, qp={"transport": transport}, socket={"rx_path": rx_path}
    )
    t = Transceiver(cfg)
    t.start()
    try:
        info = t.nic_info()
    finally:
        began = time.monotonic()
        t.stop()
        stopped_in = time.monotonic() - began
    assert info["rx_path"] == expected, info
    assert info["rx_fallback"] is None, info
    if rx_path == "auto":
        assert info["rx_path_reason"].startswith("auto: "), info
    else:
        assert info["rx_path_reason"] == f"socket.rx_path: {rx_path}", info
    if expected == "mmap":
        assert info["rx_ring_bytes"] == 64 << 20 and info["rx_ring_block_bytes"] == 256 << 10
        assert info["rx_ring_blocks"] * info["rx_ring_block_bytes"] == info["rx_ring_bytes"]
        assert info["rx_ring_block_timeout_ms"] == 1
    else:
        assert info["rx_ring_bytes"] == info["rx_ring_blocks"] == 0
    assert stopped_in < 1.0, f"stop() of an idle NIC took {stopped_in:.3f} s"


def test_udp_mode_receives_with_recvmmsg_and_refuses_mmap() -> None:
    cfg = {
        "executor": "cpu",
        "nic": "socket",
        "socket": {"mode": "udp"},
        "local": {"ip": "127.13.21.1"},
        "peer": {"ip": "127.13.21.2"},
        "qp": {"transport": "UC"},
        "handler": "sink",
    }
    with Transceiver(cfg) as t:
        info = t.nic_info()
    assert info["rx_path"] == "recvmmsg" and info["rx_path_reason"] == (
        "udp mode receives with recvmmsg"
    )
    cfg["socket"]["rx_path"] = "mmap"
    with pytest.raises(ConfigError) as e:
        Transceiver(cfg)
    assert e.value.key == "socket.rx_path" and "packet mode" in str(e.value)


# -- what arrives ----------------------------------------------------------------------


@pytest.mark.parametrize("rx_path", ["mmap", "recvmmsg"])
def test_a_burst_over_many_blocks_arrives_whole_and_in_order(
    jumbo_namespace: netns.VethNamespace, rx_path: str, tmp_path: Path
) -> None:
    v = jumbo_namespace
    capture = tmp_path / "burst.pcap"
    cfg = packet_config(v, socket={"rx_path": rx_path, "capture": str(capture), "batch": 64})
    n = 2000  # of 4 KiB: 8 MiB, some 33 blocks of the ring
    with Transceiver(cfg) as t:
        assert t.nic_info()["rx_path"] == rx_path
        qpn = t.config["qp"]["qpn"]
        frames = [send_only(v, qpn, i, bytes([i % 251]) * (4000 + i % 97)) for i in range(n)]
        # Frames are 2 mod 4 bytes long (Ethernet, then 4-byte words): the longest that fits
        # a slot, and the shortest that does not.
        empty = len(send_only(v, qpn, 0, b""))
        longest = send_only(v, qpn, n, bytes(SLOT - 2 - empty))
        too_long = send_only(v, qpn, n + 1, bytes(SLOT + 2 - empty))
        frames += [longest, too_long]
        assert (len(longest), len(too_long)) == (SLOT - 2, SLOT + 2)
        assert blast(v, frames) == n + 2
        stats = wait_counters(t, nic_rx_frames=n + 1, nic_too_long=1, rx_packets=n + 1)
    assert stats["nic_filtered"] == 1 and stats["nic_kernel_drops"] == 0, stats
    assert stats["nic_rx_ring_full"] == 0 and stats["psn_gaps"] == 0, stats
    records = [r.data for r in read_pcap(capture)]
    assert len(records) == n + 1
    assert records == frames[: n + 1], "the capture differs from what was sent"


def test_a_lone_frame_is_delivered_when_its_block_times_out(
    jumbo_namespace: netns.VethNamespace,
) -> None:
    """A frame in a block the kernel has begun is ours once the block is 1 ms old; a ring
    that waited for full blocks would never deliver these (each is alone in its block). 300
    of them take a block each: more than the ring has, so blocks must also come back."""
    v = jumbo_namespace
    s = peer_socket(v)
    delays = []
    with s, Transceiver(packet_config(v, socket={"rx_path": "mmap"})) as t:
        assert t.nic_info()["rx_ring_blocks"] == 256
        qpn = t.config["qp"]["qpn"]
        for i in range(300):
            s.send(send_only(v, qpn, i, b"lone-%d" % i))
            sent = time.monotonic()
            wait_counters(t, timeout=5.0, nic_rx_frames=i + 1, rx_packets=i + 1)
            delays.append(time.monotonic() - sent)
    assert t.stats()["nic_kernel_drops"] == 0
    # The block timeout is 1 ms; the bound leaves room for a loaded 2-core machine.
    assert statistics.median(delays) < 0.05, f"delivery delays (s): {sorted(delays)[-10:]}"


def test_a_vlan_tagged_frame_reaches_the_engine_untagged_on_both_paths(
    jumbo_namespace: netns.VethNamespace, tmp_path: Path
) -> None:
    v = jumbo_namespace
    s = peer_socket(v)
    with s:
        for rx_path in ("mmap", "recvmmsg"):
            capture = tmp_path / f"{rx_path}.pcap"
            cfg = packet_config(v, socket={"rx_path": rx_path, "capture": str(capture)})
            with Transceiver(cfg) as t:
                qpn = t.config["qp"]["qpn"]
                tagged = send_only(v, qpn, 0, b"tagged", vlan=5)
                s.send(tagged)
                wait_counters(t, nic_rx_frames=1, rx_packets=1, icrc_errors=0)
            (record,) = read_pcap(capture)
            assert parse(tagged).vlan == 5
            assert record.data == tagged[:12] + tagged[16:], rx_path  # the tag taken off
            assert parse(record.data).icrc_ok


def test_the_echo_loop_answers_through_the_ring(
    jumbo_namespace: netns.VethNamespace,
) -> None:
    """rx_path mmap with the echo handler: replies leave from the ring's socket, and our own
    frames are not taken in again (nic_filtered stays 0: nothing else is on the pair)."""
    v = jumbo_namespace
    s = peer_socket(v)
    s.settimeout(5.0)
    n = 20
    cfg = packet_config(v, handler="echo", socket={"rx_path": "mmap"})
    with s, Transceiver(cfg) as t:
        qpn, peer_qpn = t.config["qp"]["qpn"], t.config["qp"]["peer_qpn"]
        for i in range(n):
            payload = b"echo-%03d" % i
            s.send(send_only(v, qpn, i, payload))
            while True:  # the peer's own frame comes back to its socket first
                p = parse(s.recv(65536))
                if p.dest_qp == peer_qpn:
                    break
            assert (p.payload, p.psn, p.icrc_ok) == (payload, i, True)
        stats = wait_counters(t, nic_rx_frames=n, nic_tx_frames=n, replies=n)
    assert stats["nic_filtered"] == 0, stats


# -- drops, and a ring that cannot be had (in a child process) ---------------------------


def child(argv: list[str]) -> None:
    """A transceiver on interface argv[1] (sink handler, UC, socket.rx_path argv[2]); with
    argv[3] ``cap``, the address space is first capped so that the ring cannot be mapped.
    Prints its nic_info() (or the start() error) once up, then the counters (``stats``) or
    the final counters and ``rx_ring_freezes`` (``stop``) for each line on stdin."""
    interface, rx_path, cap = argv[1], argv[2], argv[3] == "cap"
    cfg = {
        "executor": "cpu",
        "nic": "socket",
        "socket": {"mode": "packet", "interface": interface, "rx_path": rx_path},
        "local": {"mac": "auto", "ip": OURS_IP},
        "peer": {"mac": "02:00:00:00:00:02", "ip": PEER_IP},
        "qp": {"transport": "UC"},
        "handler": "sink",
        "queues": {"rx_depth": 1024, "slot_bytes": 2048},
    }
    t = Transceiver(cfg)
    if cap:  # room for the threads' stacks and the recvmmsg buffers, not for 64 MiB of ring
        status = Path("/proc/self/status").read_text().splitlines()
        kib = next(int(line.split()[1]) for line in status if line.startswith("VmSize"))
        limit = (kib << 10) + (40 << 20)
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    try:
        t.start()
    except TransceiverError as e:
        print(json.dumps({"error": str(e)}), flush=True)
        t.stop()
        return
    print(json.dumps({"qpn": t.config["qp"]["qpn"], **t.nic_info()}), flush=True)
    for line in sys.stdin:
        if line.strip() == "stop":
            break
        print(json.dumps(t.stats()), flush=True)
    t.stop()
    print(json.dumps({**t.stats(), "rx_ring_freezes": t.nic_info()["rx_ring_freezes"]}), flush=True)


def start_child(v: netns.VethNamespace, rx_path: str, cap: bool) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, __file__, v.ours, rx_path, "cap" if cap else "-"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def first_line(proc: subprocess.Popen) -> dict:
    line = proc.stdout.readline()
    assert line, proc.stderr.read()
    return json.loads(line)


def test_kernel_drops_are_counted_exactly_when_the_ring_overflows(
    jumbo_namespace: netns.VethNamespace,
) -> None:
    v = jumbo_namespace
    with start_child(v, "mmap", cap=False) as proc:
        try:
            info = first_line(proc)
            assert info["rx_path"] == "mmap", info
            # 1 KiB payloads take some 1.2 KiB of a block each: ~57 000 fill the 64 MiB ring.
            frames = [send_only(v, info["qpn"], i, bytes(1024)) for i in range(64)]
            os.kill(proc.pid, signal.SIGSTOP)
            _, status = os.waitpid(proc.pid, os.WUNTRACED)  # stopped: the NIC reads nothing
            assert os.WIFSTOPPED(status)
            try:
                sent = blast(v, frames, repeat=1250)  # 80 000 frames
            finally:
                os.kill(proc.pid, signal.SIGCONT)
            final = final_once_accounted(proc, sent, WAIT_S)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == 0, proc.stderr.read()
    assert final["nic_kernel_drops"] > 0, f"the flood of {sent} did not overflow: {final}"
    assert accounted(final) == sent, (
        f"sent {sent}: rx {final['nic_rx_frames']} + filtered {final['nic_filtered']} + "
        f"ring full {final['nic_rx_ring_full']} + kernel drops {final['nic_kernel_drops']} "
        f"= {accounted(final)}"
    )
    # The ring waits for the engine: nothing ours was dropped for a full rx ring.
    assert final["nic_rx_ring_full"] == 0 and final["nic_filtered"] == 0, final
    assert final["rx_ring_freezes"] >= 1, final  # the kernel found every block ours
    assert final["rx_packets"] == final["nic_rx_frames"]


@pytest.mark.parametrize("rx_path", ["auto", "mmap"])
def test_without_room_for_the_ring_auto_falls_back_to_recvmmsg_and_mmap_fails(
    jumbo_namespace: netns.VethNamespace, rx_path: str
) -> None:
    v = jumbo_namespace
    s = peer_socket(v)
    with s, start_child(v, rx_path, cap=True) as proc:
        try:
            info = first_line(proc)
            if rx_path == "mmap":
                assert "error" in info, info
                assert "socket.rx_path 'mmap'" in info["error"]
                assert "mmap of the 64 MiB ring" in info["error"]
                assert "Cannot allocate memory" in info["error"]
                return
            # The cap leaves room for the threads and buffers, not the ring: a start() that
            # failed for anything else is this test's to name, not a KeyError.
            assert "error" not in info, f"start() under the address-space cap: {info['error']}"
            assert info["rx_path"] == "recvmmsg", info
            assert info["rx_fallback"].startswith("mmap of the 64 MiB ring"), info
            assert "Cannot allocate memory" in info["rx_fallback"], info
            # And it receives.
            s.send(send_only(v, info["qpn"], 0, b"after the fallback"))
            deadline = time.monotonic() + WAIT_S
            stats = ask(proc, "stats")
            while stats["rx_packets"] < 1 and time.monotonic() < deadline:
                time.sleep(0.01)  # a poll interval
                stats = ask(proc, "stats")
            assert stats["nic_rx_frames"] == stats["rx_packets"] == 1, stats
            ask(proc, "stop")
            proc.wait(timeout=WAIT_S)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == 0, proc.stderr.read()


if __name__ == "__main__":
    child(sys.argv)
