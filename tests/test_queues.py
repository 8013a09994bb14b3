"""Several queues (queues.count): packets steered to a queue, each queue its own engine.

Goal: a transceiver with N queues takes N streams in parallel (a block a queue on the cuda
executor, a thread a queue on the cpu executor) and gives the host exactly what N
transceivers of one queue each would: the same frame records (with the transceiver's own page
numbers), the same counters per queue, the replies each stream's QP should get. Packets are
steered as a ConnectX's flow rules would (queues/steering.h):
- by destination QP: queue i is QP qp.qpn + i, its peer qp.peer_qpn + i;
- by UDP source port: every queue is QP qp.qpn, a packet goes to queue sport % count;
- a packet no queue serves goes to queue 0, whose engine counts it (another QP);
and through the socket NIC (udp mode on loopback) as well as the loopback wire.

Oracles: each stream run alone through a one-queue transceiver, zlib over what the sensors
sent, the addresses the replies must carry.
"""

from __future__ import annotations

import dataclasses
import os
import random
import socket
import zlib
from typing import Any

import pytest
from engine_helpers import EXECUTORS, WAIT_S, Peer, collect_n, merge, wait_counters
from frames_helpers import PAGE, frames_config

from roce_transceiver.config import ConfigError, load_config
from roce_transceiver.peers.link import Addresses
from roce_transceiver.peers.sensor import HSB_SOURCE_PORT, Faults, Sensor
from roce_transceiver.protocol import build, parse
from roce_transceiver.transceiver import Transceiver, TransceiverError

QUEUES = 4
LOCAL_IP, PEER_IP = "127.0.0.1", "127.0.0.2"
PAGES_PER_QUEUE = 12  # a page a frame: the host releases none before the last packet is in
FRAME_SIZES = (700, 2048, 5000, 8192)


def content(stream: int, n: int, size: int) -> bytes:
    return bytes((stream * 61 + n * 29 + i * 7) & 0xFF for i in range(size))


def sensor(cfg: dict[str, Any], stream: int, by: str, seed: int, faults: Faults) -> Sensor:
    """Stream ``stream``'s sensor: its queue's QP (by qp) or its own source port (udp_sport),
    writing into its queue's share of the pages."""
    fr = cfg["frames"]
    base = Addresses.mirror(cfg, own_port=HSB_SOURCE_PORT)
    if by == "qp":
        addresses = dataclasses.replace(
            base,
            their_qpn=cfg["qp"]["qpn"] + stream,
            own_qpn=cfg["qp"]["peer_qpn"] + stream,
        )
    else:
        addresses = dataclasses.replace(base, own_port=HSB_SOURCE_PORT + stream)
    return Sensor(
        addresses,
        va=fr["va"] + stream * PAGES_PER_QUEUE * fr["page_bytes"],
        rkey=fr["rkey"],
        page_bytes=fr["page_bytes"],
        pages=PAGES_PER_QUEUE,
        payload=1024,
        metadata=fr["metadata"],
        first_psn=cfg["qp"]["rx_psn"],
        faults=faults,
        seed=seed,
    )


def stream_packets(cfg: dict[str, Any], stream: int, by: str, frames: int) -> list[bytes]:
    """Stream ``stream``: ``frames`` frames, the odd streams damaged (loss, reorder, ...)."""
    rng = random.Random(stream)
    faults = (
        Faults(loss=0.05, reorder=0.08, duplicate=0.05, corrupt=0.05, end_loss=0.1)
        if stream % 2
        else Faults()
    )
    s = sensor(cfg, stream, by, seed=stream + 1, faults=faults)
    packets: list[bytes] = []
    for n in range(frames):
        s.faults = faults if 0 < n < frames - 1 else Faults()
        packets += s.frame(n, content(stream, n, rng.choice(FRAME_SIZES))).packets
    return packets


def interleaved(streams: list[list[bytes]]) -> list[bytes]:
    """The streams' packets as they would meet on one wire: in turn, each in its own order."""
    out: list[bytes] = []
    for i in range(max(len(s) for s in streams)):
        out += [s[i] for s in streams if i < len(s)]
    return out


def records(t: Transceiver, packets: int) -> list[dict[str, Any]]:
    """Every frame record of a run of ``packets`` packets (timestamps dropped, each with its
    data's CRC). Once every queue has counted all its packets, every record is in the
    completion rings (a pass writes its records before it publishes its counters): drained
    until empty, nothing waited for."""
    wait_counters(t, rx_packets=packets)
    got: list[dict[str, Any]] = []
    while batch := t.frames(timeout=0, max_frames=4096):
        for f in batch:
            d = f.as_dict()
            for k in ("rx_first_ns", "rx_last_ns", "done_ns"):
                d.pop(k)
            d["data_crc"] = zlib.crc32(f.data.tobytes())
            got.append(d)
            f.release()
    return got


def multi_config(executor: str, by: str, metadata: bool = True) -> dict[str, Any]:
    return merge(
        frames_config(executor, metadata, pages=QUEUES * PAGES_PER_QUEUE),
        {"queues": {"count": QUEUES, "steer": by, "rx_depth": 4096}},
    )


def alone(executor: str, by: str, stream: int, packets: list[bytes]) -> dict[str, Any]:
    """The oracle: stream ``stream`` through a transceiver of one queue whose QP and pages are
    the ones its queue has in the multi-queue run."""
    multi = load_config(multi_config(executor, by))
    cfg = merge(
        frames_config(executor, True, pages=PAGES_PER_QUEUE),
        {
            "queues": {"rx_depth": 4096},
            "qp": {"qpn": multi["qp"]["qpn"] + (stream if by == "qp" else 0)},
            "frames": {
                "va": multi["frames"]["va"] + stream * PAGES_PER_QUEUE * PAGE,
                "rkey": multi["frames"]["rkey"],
            },
        },
    )
    t = Transceiver(cfg)
    for p in packets:
        assert t.inject(p)
    with t:
        recs = records(t, len(packets))
    return {"records": recs, "stats": t.stats()}  # after stop(): final


@pytest.mark.parametrize("by", ["qp", "udp_sport"])
@pytest.mark.parametrize("executor", EXECUTORS)
def test_streams_steered_to_their_queues_are_recorded_as_each_alone(executor: str, by: str) -> None:
    cfg = load_config(multi_config(executor, by))
    streams = [stream_packets(cfg, s, by, frames=12) for s in range(QUEUES)]
    t = Transceiver(multi_config(executor, by))
    for p in interleaved(streams):
        assert t.inject(p), "the script is longer than an rx ring"
    with t:
        got = records(t, sum(len(s) for s in streams))
        assert t.epoch_stats()["blocks"] == QUEUES
    stats = t.stats()  # after stop(): final
    per_queue = [t.queue_stats(q) for q in range(QUEUES)]
    assert len(got) == stats["frames"]
    for q in range(QUEUES):
        oracle = alone(executor, by, q, streams[q])
        mine = [dict(r) for r in got if r["queue"] == q]
        for r in mine:
            assert q * PAGES_PER_QUEUE <= r["page"] < (q + 1) * PAGES_PER_QUEUE, r
            r["page"] -= q * PAGES_PER_QUEUE  # the queue's own page numbers, as alone
            r["queue"] = 0
        assert mine == oracle["records"], f"queue {q}: records differ from the stream alone"
        differ = {
            k: (per_queue[q][k], v) for k, v in oracle["stats"].items() if per_queue[q][k] != v
        }
        assert not differ, f"queue {q}: counters (queue, alone) differ: {differ}"
        assert per_queue[q]["rx_packets"] == len(streams[q])
    # The sum is every queue's; whole streams recorded whole.
    assert {k: sum(s[k] for s in per_queue) for k in stats} == dict(stats)
    for q in (0, 2):  # the clean streams: every frame, CRC of what was sent
        clean = [r for r in got if r["queue"] == q]
        assert len(clean) == 12 and all(r["crc_ok"] and r["bytes_ok"] for r in clean)


@pytest.mark.parametrize("executor", EXECUTORS)
def test_a_packet_for_no_queue_is_counted_by_queue_0(executor: str) -> None:
    t = Transceiver(
        merge(multi_config(executor, "qp"), {"handler": "echo", "qp": {"transport": "UC"}})
    )
    peer = Peer(t)
    stray = peer.frame("SEND_ONLY", b"x" * 32, psn=peer.take(), dest_qp=peer.qpn + QUEUES)
    for_q3 = peer.frame("SEND_ONLY", b"y" * 32, psn=0, dest_qp=peer.qpn + 3)
    with t:
        assert t.inject(stray) and t.inject(for_q3)
        wait_counters(t, rx_packets=2)
        q0, q3 = t.queue_stats(0), t.queue_stats(3)
    assert q0["rx_packets"] == 1 and q0["wrong_qp"] == 1, q0
    assert q3["rx_packets"] == 1 and q3["messages"] == 1, q3


@pytest.mark.parametrize("executor", EXECUTORS)
def test_each_queue_answers_from_its_own_qp(executor: str) -> None:
    """An echo request to QP qpn + i comes back from queue i, to peer_qpn + i, in its PSNs."""
    t = Transceiver(
        merge(multi_config(executor, "qp"), {"handler": "echo", "qp": {"transport": "RC"}})
    )
    peer = Peer(t)
    with t:
        for q in range(QUEUES):
            payload = bytes([q]) * 40
            assert t.inject(peer.frame("SEND_ONLY", payload, psn=0, dest_qp=peer.qpn + q))
        replies = [parse(f) for f in collect_n(t, QUEUES)]
        messages = t.receive(timeout=WAIT_S, max_messages=QUEUES)
    by_qp = {r.dest_qp: r for r in replies}
    assert sorted(by_qp) == [peer.peer_qpn + q for q in range(QUEUES)], [r.dest_qp for r in replies]
    for q in range(QUEUES):
        assert by_qp[peer.peer_qpn + q].payload == bytes([q]) * 40
    assert sorted(m.queue for m in messages) == list(range(QUEUES))


def test_queues_are_checked_with_the_key_that_is_wrong() -> None:
    with pytest.raises(ConfigError, match=r"frames\.pages.*multiple of queues\.count"):
        load_config(merge(frames_config("cpu", pages=6), {"queues": {"count": 4}}))
    with pytest.raises(ConfigError, match=r"qp\.qpn.*24-bit"):
        load_config({"queues": {"count": 4}, "qp": {"qpn": 0xFFFFFE}})
    with pytest.raises(ConfigError, match=r"queues\.count"):
        load_config({"queues": {"count": 17}})
    with pytest.raises(ConfigError, match=r"queues\.steer"):
        load_config({"queues": {"steer": "rss"}})
    # One QP for every queue: no QP numbers are used up.
    load_config({"queues": {"count": 4, "steer": "udp_sport"}, "qp": {"qpn": 0xFFFFFE}})


def test_a_queue_thread_that_cannot_be_pinned_is_named() -> None:
    allowed = sorted(os.sched_getaffinity(0))
    last = allowed[-1]
    t = Transceiver({"executor": "cpu", "cpu_core": last, "queues": {"count": 2}})
    with pytest.raises(TransceiverError, match=f"queue 1's thread to core {last + 1}"):
        t.start()
    t.stop()


def test_the_socket_nic_steers_datagrams_to_the_queues() -> None:
    """udp mode on loopback: a peer's SENDs to QPs qpn and qpn + 1 are echoed by queues 0
    and 1, each reply to its own peer QP; one for a QP no queue serves is filtered."""
    peer_sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    peer_sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    peer_sock.bind((PEER_IP, 4791))
    peer_sock.settimeout(WAIT_S)
    cfg = {
        "executor": "cpu",
        "nic": "socket",
        "socket": {"mode": "udp"},
        "local": {"ip": LOCAL_IP},
        "peer": {"ip": PEER_IP},
        "qp": {"transport": "UC"},
        "queues": {"count": 2},
    }
    try:
        with Transceiver(cfg) as t:
            qpn, peer_qpn = t.config["qp"]["qpn"], t.config["qp"]["peer_qpn"]
            for q in (0, 1, 2):
                frame = build(
                    "UC_SEND_ONLY",
                    bytes([q]) * 24,
                    ip_src=PEER_IP,
                    ip_dst=LOCAL_IP,
                    udp_sport=4791,
                    psn=0,
                    dest_qp=qpn + q,
                )
                peer_sock.sendto(frame[42:], (LOCAL_IP, 4791))  # BTH to ICRC
            got = {}
            for _ in range(2):
                data, _ = peer_sock.recvfrom(4096)
                got[int.from_bytes(data[5:8], "big")] = data
            stats = wait_counters(t, rx_packets=2, nic_filtered=1, messages=2)
            per_queue = [t.queue_stats(q)["messages"] for q in (0, 1)]
        assert sorted(got) == [peer_qpn, peer_qpn + 1]
        assert got[peer_qpn + 1][12:-4] == bytes([1]) * 24
        assert per_queue == [1, 1] and stats["icrc_errors"] == 0
    finally:
        peer_sock.close()
