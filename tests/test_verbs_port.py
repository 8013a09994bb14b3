"""A queue pair behind the software ConnectX's own thread, its wire the engine (the peer).

Goal: the pieces of Verbs mode joined: WQEs written into the port's send ring and a doorbell
(by a test on the CPU, by GPUNetIO's device API in a kernel on the H200, for each NIC handler)
become RC traffic on the loopback wire; the engine, as the peer, places the data in its ring and
counts its signal word; its acknowledgements come back as completions. And the other way: the
peer's requests placed into the port's own regions by its NIC, acknowledged by it. Oracles: the
engine's region read back, the signal words, the port's completion counts; on the GPU, the
device API's own poll.
"""

from __future__ import annotations

import struct
import time

import pytest
from conftest import skip_missing
from net_helpers import bth_opcodes
from verbs_helpers import wqe_fetch_add, wqe_write

from roce_transceiver import _core
from roce_transceiver.transceiver import Transceiver

RING_VA, RING_KEY, SIG_VA, SIG_KEY, LKEY = 0x100000, 0x5A, 0x200000, 0x5B, 0x1C0C
SLOTS, SLOT = 16, 64
# Our side of the one-sided exchange: the request ring and its signal word.
REQ_VA, REQ_KEY, REQ_SIG_VA, REQ_SIG_KEY = 0x300000, 0x6A, 0x400000, 0x6B

PEER = {  # the engine's transceiver: the responder, its ring and signal word registered
    "executor": "cpu",
    "handler": "sink",
    "qp": {"transport": "RC", "qpn": 0x11, "peer_qpn": 0x12},
    "regions": [
        {"va": RING_VA, "rkey": RING_KEY, "length": SLOTS * SLOT},
        {"va": SIG_VA, "rkey": SIG_KEY, "length": 8},
    ],
}
PORT = {
    "qpn": 0x12,
    "peer_qpn": 0x11,
    "sq_wqe_num": 64,
    "cqe_num": 64,
    "mtu": 1024,
    "local_mac": bytes.fromhex("020000000002"),
    "peer_mac": bytes.fromhex("020000000001"),
    "local_ip": bytes([10, 0, 0, 2]),
    "peer_ip": bytes([10, 0, 0, 1]),
    "lkey": LKEY,
    "local_bytes": 4096,
}


def wait_for(condition, timeout: float = 10.0) -> None:
    """Until ``condition()`` holds; fails after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(1e-3)


def test_port_thread_carries_writes_and_signals_to_the_engine():
    with Transceiver(PEER) as t:
        port = _core.VerbsPort(t._core, PORT)
        local = port.local()
        local[:32] = bytes(range(32))
        base = port.local_address()
        ring = port.send_ring(64 * 64)
        port.start()
        try:
            n = 10
            for i in range(n):  # put_signal's two WQEs, ten times, as the device API lays them
                w, s = 2 * i, 2 * i + 1
                ring[w * 64 : w * 64 + 64] = wqe_write(
                    w, 0x12, RING_VA + (i % SLOTS) * SLOT, RING_KEY, base, LKEY, 32
                )
                ring[s * 64 : s * 64 + 64] = wqe_fetch_add(
                    s, 0x12, SIG_VA, SIG_KEY, 1, base + 1024 + 8 * i, LKEY
                )
            port.ring(2 * n)
            wait_for(lambda: port.stats()["completed"] == 2 * n)
        finally:
            port.stop()
        stats = port.stats()
        assert stats["errors"] == 0 and not stats["in_error"]
        assert struct.unpack("<Q", t.read_region(1))[0] == n
        ring_bytes = t.read_region(0)
        assert all(ring_bytes[i * SLOT : i * SLOT + 32] == bytes(range(32)) for i in range(n))
        olds = struct.unpack(f"<{n}Q", bytes(local[1024 : 1024 + 8 * n]))
        assert olds == tuple(range(n))  # each signal saw the count before it


@pytest.mark.gpu
@pytest.mark.parametrize("nic_handler", ["cpu_proxy", "gpu_sm_db", "gpu_sm_bf"])
def test_device_api_put_signal_through_the_software_connectx(nic_handler):
    """GPUNetIO's own doca_gpu_dev_verbs_put_signal (BlueFlame: its steps and submit_bf), in a
    kernel, drives the software ConnectX through each NIC handler's doorbell; the engine is the
    peer. Each put_signal is waited for by the device API's CQ poll."""
    info = _core.gpunetio_info()
    if not info["built"]:
        skip_missing("gpunetio", f"no GPUNetIO device API in this build: {info['source']}")
    if nic_handler == "gpu_sm_bf" and not info["blueflame"]:
        pytest.skip(f"BlueFlame cannot ring with the device API this build has ({info['source']})")
    count = 200
    with Transceiver(PEER) as t:
        # A ring that does not wrap within the run: the device API waits for a slot's last
        # completion with no deadline of its own (wrapping is tested on the CPU).
        port = _core.VerbsPort(
            t._core,
            {**PORT, "gpu": True, "sq_wqe_num": 512, "cqe_num": 512, "nic_handler": nic_handler},
        )
        local = port.local()
        local[:32] = bytes(range(100, 132))
        base = port.local_address()
        port.start()
        try:
            r = port.put_signal_loop(
                {
                    "raddr": RING_VA,
                    "rkey": RING_KEY,
                    "slot_bytes": SLOT,
                    "slots": SLOTS,
                    "laddr": base,
                    "lkey": LKEY,
                    "size": 32,
                    "sig_raddr": SIG_VA,
                    "sig_rkey": SIG_KEY,
                    "sink_laddr": base + 2048,
                    "count": count,
                    "timeout_s": 20.0,
                }
            )
        finally:
            port.stop()
        stats = port.stats()
        print(f"put_signal via the software ConnectX, {nic_handler}: {r}, {stats}")
        assert not r["timed_out"] and r["errors"] == 0 and r["completed"] == count, (r, stats)
        assert stats["consumed"] == 2 * count and stats["completed"] == 2 * count
        assert struct.unpack("<Q", t.read_region(1))[0] == count
        ring_bytes = t.read_region(0)
        assert all(
            ring_bytes[i * SLOT : i * SLOT + 32] == bytes(range(100, 132)) for i in range(SLOTS)
        )


@pytest.mark.netns
def test_port_across_a_veth_pair_dissects_as_rc_traffic(tmp_path):
    """The port's packets on a real interface: its socket opened inside a network namespace on
    one end of a veth pair, the peer's engine (socket NIC, packet mode) on the other. The run's
    capture dissects in tshark as RC WRITE / FETCH_ADD and their ACK / ATOMIC ACKNOWLEDGE."""
    import shutil
    import socket

    from roce_transceiver.netns import inside, veth_namespace, why_not

    if why_not(exec_needed=False):
        skip_missing("netns", why_not(exec_needed=False))
    with veth_namespace() as v:
        ours_mac, theirs_mac = v.mac("ours"), v.mac("theirs")
        peer_cfg = {
            **PEER,
            "nic": "socket",
            "socket": {"mode": "packet", "interface": v.ours},
            "local": {"mac": ours_mac, "ip": "10.78.0.1"},
            "peer": {"mac": theirs_mac, "ip": "10.78.0.2"},
        }

        def bound() -> socket.socket:
            s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0003))
            s.bind((v.theirs, 0))
            return s

        sock = inside(v.namespace, bound)
        capture = tmp_path / "verbs.pcap"
        port_cfg = {
            **PORT,
            "local_mac": bytes.fromhex(theirs_mac.replace(":", "")),
            "peer_mac": bytes.fromhex(ours_mac.replace(":", "")),
            "local_ip": bytes([10, 78, 0, 2]),
            "peer_ip": bytes([10, 78, 0, 1]),
            # Patient: the socket NIC's first answers take milliseconds (5-7 ms seen here), and
            # a resend would double frames in the capture counted below.
            "retransmit_ns": 10**9,
        }
        with Transceiver(peer_cfg) as t:
            port = _core.VerbsPort.over_socket(sock.detach(), str(capture), port_cfg)
            local = port.local()
            local[:32] = bytes(range(50, 82))
            base = port.local_address()
            ring = port.send_ring(64 * 64)
            n = 8
            for i in range(n):
                w, s = 2 * i, 2 * i + 1
                ring[w * 64 : w * 64 + 64] = wqe_write(
                    w, 0x12, RING_VA + i * SLOT, RING_KEY, base, LKEY, 32
                )
                ring[s * 64 : s * 64 + 64] = wqe_fetch_add(
                    s, 0x12, SIG_VA, SIG_KEY, 1, base + 1024 + 8 * i, LKEY
                )
            port.start()
            try:
                port.ring(2 * n)
                wait_for(lambda: port.stats()["completed"] == 2 * n)
            finally:
                port.stop()
            assert port.stats()["errors"] == 0
            assert struct.unpack("<Q", t.read_region(1))[0] == n
            assert all(t.read_region(0, i * SLOT, 32) == bytes(range(50, 82)) for i in range(n))
            assert port.stats()["retransmits"] == 0 and t.stats()["duplicates"] == 0
            port = None  # closes the socket and flushes the capture
    tshark = shutil.which("tshark")
    if tshark is None:
        skip_missing("tshark", "tshark not found: the capture was written but not dissected")
    opcodes = bth_opcodes(tshark, str(capture))
    # RC: RDMA WRITE Only 10, FETCH_ADD 20, ACKNOWLEDGE 17, ATOMIC ACKNOWLEDGE 18.
    counts = {o: opcodes.count(o) for o in set(opcodes)}
    assert counts == {"10": n, "20": n, "17": n, "18": n}, counts


def test_one_sided_echo_exchange_driven_from_the_cpu():
    """The one-sided exchange of Verbs mode with the serve loop's part played by this test: the
    peer WRITEs a request into our ring and FETCH_ADDs our signal word, both executed by the
    port's own NIC (its responder: the port's regions) and acknowledged by it; we see the
    signal in the port's region, and answer with put_signal's two WQEs through the same port
    into the peer's ring and signal word. Checks the layout the GPU echo uses: regions, keys,
    order (the request is in place when the signal counts; the reply when the peer's signal
    does) and the split wire (our answers to the peer's requester, our requests to its engine)."""
    from roce_transceiver.protocol import build, parse

    addr = {
        "eth_src": "02:00:00:00:00:01",
        "eth_dst": "02:00:00:00:00:02",
        "ip_src": "10.0.0.1",
        "ip_dst": "10.0.0.2",
        "dest_qp": 0x12,
    }
    regions = [
        {"va": REQ_VA, "rkey": REQ_KEY, "length": SLOTS * SLOT},
        {"va": REQ_SIG_VA, "rkey": REQ_SIG_KEY, "length": 8},
    ]
    count = 40
    with Transceiver(PEER) as peer:
        port_end, requester = _core.Wire.split_loopback(peer._core)
        port = _core.VerbsPort.over_wire(port_end, {**PORT, "regions": regions})
        local, base, ring = port.local(), port.local_address(), port.send_ring(64 * 64)
        port.start()
        signal = port.region(1)
        acks: list[bytes] = []

        def all_acks() -> bool:
            acks.extend(requester.receive(16))
            return len(acks) >= count

        try:
            for i in range(count):
                payload = bytes((3 * i + k) % 256 for k in range(32))
                slot = (i % SLOTS) * SLOT
                for frame in (
                    build(
                        "RC_RDMA_WRITE_ONLY",
                        payload,
                        psn=2 * i,
                        va=REQ_VA + slot,
                        rkey=REQ_KEY,
                        **addr,
                    ),
                    build(
                        "RC_FETCH_ADD",
                        psn=2 * i + 1,
                        va=REQ_SIG_VA,
                        rkey=REQ_SIG_KEY,
                        swap_add=1,
                        **addr,
                    ),
                ):
                    wait_for(lambda f=frame: requester.send(f))
                # The serve loop's part: wait for the signal, take the request, put_signal it.
                wait_for(lambda i=i: struct.unpack("<Q", bytes(signal))[0] == i + 1)
                local[:32] = bytes(port.region(0)[slot : slot + 32])
                w, s = (2 * i) % 64, (2 * i + 1) % 64
                ring[w * 64 : w * 64 + 64] = wqe_write(
                    2 * i, 0x12, RING_VA + slot, RING_KEY, base, LKEY, 32
                )
                ring[s * 64 : s * 64 + 64] = wqe_fetch_add(
                    2 * i + 1, 0x12, SIG_VA, SIG_KEY, 1, base + 64, LKEY
                )
                port.ring(2 * i + 2)
                wait_for(lambda i=i: struct.unpack("<Q", peer.read_region(1))[0] == i + 1)
                assert peer.read_region(0, slot, 32) == payload
                acks += requester.receive(16)
            # The peer's signal counts before its acknowledgement reaches us: wait for the last.
            wait_for(lambda: port.stats()["completed"] == 2 * count)
            wait_for(all_acks)
        finally:
            port.stop()
        stats = port.stats()
        assert (
            stats["errors"] == 0 and stats["atomics"] == count and peer.stats()["atomics"] == count
        )
        assert stats["requests"] == 2 * count and stats["bytes_placed"] == 32 * count
        got = [parse(f) for f in acks]
        assert [(p.opcode_name, p.psn, p.atomic_ack_orig) for p in got] == [
            ("RC_ATOMIC_ACKNOWLEDGE", 2 * i + 1, i) for i in range(count)
        ]
