"""The socket NIC: the engine talking to peers through Linux (rt/host/socket_nic.h).

Goal: with ``nic: socket`` real packets reach the engine and its replies reach the peer.
- udp mode (no root): a peer socket on 127.0.0.2:4791 sends SEND Onlys to the transceiver on
  127.0.0.1:4791; every echo comes back with an ICRC that verifies over the headers the wire
  had (IP ID 0, DF: what the NIC promises in docs/socket_nic.md); traffic that is not ours
  (another QP, a datagram that is not RoCE) is counted ``nic_filtered`` and never reaches the
  engine; a corrupt ICRC reaches the engine and is counted there.
- packet mode across a network namespace (root): the peer runs in another process inside a
  namespace, joined to the transceiver by a veth pair the fixture creates and removes; it
  sends whole Ethernet frames with AF_PACKET and checks the replies byte for byte.
- capture: the pcap holds every frame in and out, and each one parses with a good ICRC.
- errors name the problem: a missing interface, inject() on a socket NIC, bad configs.

Oracles: ``roce_transceiver.protocol`` (build/parse, checked against scapy and tshark in the
protocol tests) on the peer's side; counters on the engine's.
"""

from __future__ import annotations

import json
import os
import socket
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import skip_missing
from engine_helpers import EXECUTORS, wait_counters
from net_helpers import run_cmd

from roce_transceiver.config import ConfigError
from roce_transceiver.pcap import read_pcap
from roce_transceiver.protocol import build, parse
from roce_transceiver.transceiver import Transceiver, TransceiverError

LOCAL_IP, PEER_IP = "127.0.0.1", "127.0.0.2"
# Linux's values; Python's socket module names them only on some builds.
IP_MTU_DISCOVER = getattr(socket, "IP_MTU_DISCOVER", 10)
IP_PMTUDISC_DO = getattr(socket, "IP_PMTUDISC_DO", 2)
TIMEOUT_S = 5.0


def udp_config(executor: str, **extra: object) -> dict:
    cfg: dict = {
        "executor": executor,
        "nic": "socket",
        "socket": {"mode": "udp"},
        "local": {"ip": LOCAL_IP},
        "peer": {"ip": PEER_IP},
        "qp": {"transport": "UC"},
    }
    cfg.update(extra)
    return cfg


def wire_frame(datagram: bytes, src: tuple[str, int], dst: str) -> bytes:
    """The Ethernet frame a UDP datagram was on the wire: the headers rebuilt as the
    socket NIC sends them (IPv4, ID 0, DF), so its ICRC can be checked."""
    head = bytearray(build("UC_SEND_ONLY", b"", ip_src=src[0], ip_dst=dst, udp_sport=src[1])[:42])
    struct.pack_into(">H", head, 16, 20 + 8 + len(datagram))  # IPv4 total length
    struct.pack_into(">H", head, 38, 8 + len(datagram))  # UDP length
    return bytes(head) + datagram


@pytest.fixture
def peer_socket() -> Iterator[socket.socket]:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.setsockopt(socket.IPPROTO_IP, IP_MTU_DISCOVER, IP_PMTUDISC_DO)  # DF: IP ID 0
    s.bind((PEER_IP, 4791))
    s.settimeout(TIMEOUT_S)
    yield s
    s.close()


def send_only(t: Transceiver, payload: bytes, psn: int, **fields: object) -> bytes:
    """A SEND Only from the peer as a datagram (BTH to ICRC)."""
    fields.setdefault("dest_qp", t.config["qp"]["qpn"])
    frame = build(
        "UC_SEND_ONLY", payload, ip_src=PEER_IP, ip_dst=LOCAL_IP, udp_sport=4791, psn=psn, **fields
    )
    return frame[42:]


@pytest.mark.parametrize("executor", EXECUTORS)
def test_udp_mode_echoes_with_icrcs_good_both_ways_and_filters_what_is_not_ours(
    executor: str, peer_socket: socket.socket, tmp_path: Path
) -> None:
    capture = tmp_path / "udp.pcap"
    cfg = udp_config(executor)
    cfg["socket"]["capture"] = str(capture)
    n = 20
    with Transceiver(cfg) as t:
        for i in range(n):
            payload = b"msg-%03d-" % i + bytes([i]) * i
            peer_socket.sendto(send_only(t, payload, psn=i), (LOCAL_IP, 4791))
            datagram, src = peer_socket.recvfrom(4096)
            p = parse(wire_frame(datagram, src, PEER_IP))
            assert p.icrc_ok, f"reply {i}: ICRC {p.icrc:#x} does not verify"
            assert (p.opcode_name, p.payload, p.psn) == ("UC_SEND_ONLY", payload, i)
            assert p.dest_qp == t.config["qp"]["peer_qpn"]
            assert src == (LOCAL_IP, t.config["local"]["udp_sport"])
        # Not ours: another QP, and a datagram too short to be RoCE.
        peer_socket.sendto(send_only(t, b"x", psn=n, dest_qp=0x99), (LOCAL_IP, 4791))
        peer_socket.sendto(b"hello", (LOCAL_IP, 4791))
        # Ours, but corrupt: the engine counts it.
        bad = bytearray(send_only(t, b"corrupt", psn=n))
        bad[-1] ^= 0xFF
        peer_socket.sendto(bytes(bad), (LOCAL_IP, 4791))
        # Ours, but longer than a slot (2048 bytes with the headers the NIC puts back).
        peer_socket.sendto(send_only(t, bytes(2000), psn=n + 1), (LOCAL_IP, 4791))
        stats = wait_counters(t, nic_filtered=3, nic_too_long=1, icrc_errors=1, nic_rx_frames=n + 1)
        assert stats["rx_packets"] == n + 1 and stats["replies"] == n
        assert stats["express"] == n - 1  # the first SEND Only teaches the header
    stats = t.stats()
    assert stats["nic_tx_frames"] == n and stats["nic_tx_errors"] == 0
    records = read_pcap(capture)
    assert len(records) == 2 * n + 1  # n requests, n replies, the corrupt one; not the filtered
    parsed = [parse(r.data) for r in records]
    assert sum(p.icrc_ok for p in parsed) == 2 * n


def test_inject_and_roundtrip_are_for_the_loopback_wire(peer_socket: socket.socket) -> None:
    with Transceiver(udp_config("cpu")) as t:
        with pytest.raises(RuntimeError, match="socket NIC"):
            t.inject(b"\x00" * 64)
        with pytest.raises(Exception, match="socket NIC"):
            t.roundtrip(count=1)


def test_udp_mode_address_in_use_is_a_clear_error(peer_socket: socket.socket) -> None:
    cfg = udp_config("cpu", local={"ip": PEER_IP}, peer={"ip": LOCAL_IP})  # the peer's port
    t = Transceiver(cfg)
    with pytest.raises(TransceiverError, match=r"bind to 127\.0\.0\.2:4791"):
        t.start()
    t.stop()


@pytest.mark.parametrize(
    ("extra", "key"),
    [
        ({"socket": {"mode": "packet"}}, "socket.interface"),
        ({"socket": {"mode": "udp"}, "far_end": "gpu", "executor": "cuda"}, "far_end"),
        ({"nic": "loopback", "socket": {"mode": "udp"}, "local": {"mac": "auto"}}, "local.mac"),
        ({"socket": {"mode": "udp"}, "peer": {"mac": "auto"}}, "peer.mac"),
    ],
)
def test_socket_config_errors_name_the_key(extra: dict, key: str) -> None:
    cfg = {"nic": "socket", **extra}
    with pytest.raises(ConfigError) as e:
        Transceiver(cfg)
    assert e.value.key == key


def test_packet_mode_unknown_interface_is_a_clear_error() -> None:
    if os.geteuid() != 0:
        skip_missing(
            "netns", "packet mode needs root (AF_PACKET); the error without it is tested below"
        )
    t = Transceiver({"executor": "cpu", "nic": "socket", "socket": {"interface": "nope0rt"}})
    with pytest.raises(TransceiverError, match="interface 'nope0rt' not found"):
        t.start()
    t.stop()


# -- packet mode across a network namespace ------------------------------------------


# The peer, run inside the namespace: SEND Onlys out by AF_PACKET, each echo checked.
PEER = r"""
import json, socket, sys, time
from roce_transceiver.protocol import build, parse
a = json.loads(sys.argv[1])
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))
s.bind((a["interface"], 0))
s.settimeout(0.2)
def frame(payload, psn, **kw):
    kw.setdefault("dest_qp", a["qpn"])
    return build("UC_SEND_ONLY", payload, eth_src=a["peer_mac"], eth_dst=a["local_mac"],
                 ip_src=a["peer_ip"], ip_dst=a["local_ip"], psn=psn, **kw)
def reply(deadline):
    while time.monotonic() < deadline:
        try:
            data = s.recv(65536)
        except socket.timeout:
            continue
        try:
            p = parse(data)
        except ValueError:
            continue
        if p.dest_qp == a["peer_qpn"]:
            return p
    return None
out = {"ok": 0, "bad": []}
s.send(frame(b"x", 0, dest_qp=0x77))                    # another QP: filtered
s.send(b"\xff" * 6 + bytes.fromhex(a["peer_mac"].replace(":", "")) + b"\x88\xb5" + b"\0" * 50)
for i in range(a["count"]):
    payload = b"frame-%04d-" % i + bytes(range(256))[: i % 200]
    s.send(frame(payload, i))
    p = reply(time.monotonic() + 5)
    if p is not None and p.icrc_ok and p.payload == payload and p.psn == i:
        out["ok"] += 1
    else:
        out["bad"].append([i, None if p is None else [p.opcode_name, p.psn, p.icrc_ok]])
print(json.dumps(out))
"""


@pytest.mark.parametrize("executor", EXECUTORS)
def test_packet_mode_across_a_namespace_echoes_byte_exact(
    executor: str, veth_namespace: tuple[str, str, str], tmp_path: Path
) -> None:
    ns, ours, theirs = veth_namespace
    peer_mac = run_cmd("ip", "netns", "exec", ns, "cat", f"/sys/class/net/{theirs}/address").strip()
    cfg = {
        "executor": executor,
        "nic": "socket",
        "socket": {"mode": "packet", "interface": ours, "capture": str(tmp_path / "p.pcap")},
        "local": {"mac": "auto", "ip": "10.77.0.1"},
        "peer": {"mac": peer_mac, "ip": "10.77.0.2"},
        "qp": {"transport": "UC"},
    }
    count = 50
    with Transceiver(cfg) as t:
        args = {
            "interface": theirs,
            "qpn": t.config["qp"]["qpn"],
            "peer_qpn": t.config["qp"]["peer_qpn"],
            "local_mac": Path(f"/sys/class/net/{ours}/address").read_text().strip(),
            "peer_mac": peer_mac,
            "local_ip": "10.77.0.1",
            "peer_ip": "10.77.0.2",
            "count": count,
        }
        done = subprocess.run(
            ["ip", "netns", "exec", ns, sys.executable, "-c", PEER, json.dumps(args)],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        result = json.loads(done.stdout)
        assert result == {"ok": count, "bad": []}
        stats = wait_counters(t, nic_rx_frames=count, rx_packets=count, replies=count)
        assert stats["nic_filtered"] >= 2  # the other QP's frame and the non-IP one
        assert stats["icrc_errors"] == stats["malformed"] == stats["wrong_qp"] == 0
    records = read_pcap(tmp_path / "p.pcap")
    assert len(records) == 2 * count
    assert all(parse(r.data).icrc_ok for r in records)


@pytest.mark.tshark
def test_udp_capture_dissects_in_tshark(
    peer_socket: socket.socket, tmp_path: Path, tshark_path: str
) -> None:
    tshark = tshark_path
    capture = tmp_path / "udp.pcap"
    cfg = udp_config("cpu")
    cfg["socket"]["capture"] = str(capture)
    with Transceiver(cfg) as t:
        for i in range(3):
            peer_socket.sendto(send_only(t, b"tshark-%d" % i, psn=i), (LOCAL_IP, 4791))
            peer_socket.recvfrom(4096)
    cmd = [tshark, "-r", str(capture), "-T", "fields", "-E", "separator=,"]
    cmd += ["-d", "udp.port==4791,infiniband", "-e", "infiniband.bth.opcode"]
    cmd += ["-e", "infiniband.bth.destqp", "-e", "infiniband.bth.psn"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    rows = [line.split(",") for line in done.stdout.splitlines()]
    qpn, peer_qpn = t.config["qp"]["qpn"], t.config["qp"]["peer_qpn"]
    expected = []
    for i in range(3):  # request in, echo out; UC SEND Only is opcode 0x24
        expected += [["36", f"{qpn:#08x}", str(i)], ["36", f"{peer_qpn:#08x}", str(i)]]
    assert rows == expected
