"""The engine's RC requester (qp.retransmit): replies and host sends reach an RC responder
exactly once and in order, whatever the wire and the responder do.

Goal: with packets lost both ways, swapped, refused with RNR NAKs, and a responder that NAKs a
gap or stays silent, every reply arrives once, in order, with its bytes; the window refuses
what it cannot hold with an RNR NAK; a peer that never answers, or answers with a fatal NAK,
puts the requester in its error state, and what is lost then is counted.

Oracles:
- the requester's rules of IBA 9.7.5-9.7.7 as rxe's completer applies them (coalesced ACKs;
  NAK PSN sequence error: resend from its PSN; RNR NAK: wait the table 45 timer, resend; a
  timeout: resend from the oldest; retries exhausted: error);
- the far side is roce_transceiver.peers.rc_responder (the responder's rules, checked here
  against hand-made frames too) driven over the loopback wire frame by frame; the delivered
  payloads are compared with the requests' numbers.
"""

from __future__ import annotations

import struct
import time
from typing import Any

import pytest
from engine_helpers import (
    EXECUTORS,
    SETUPS,
    Peer,
    collect_n,
    describe,
    nonzero,
    receive_n,
    running,
    wait_counters,
)

from roce_transceiver.peers.link import Addresses
from roce_transceiver.peers.rc_responder import RcFaults, RcResponder, rnr_syndrome
from roce_transceiver.protocol import parse, psn_add

RELIABLE = {"retransmit": True, "window": 16, "ack_timeout_us": 2000, "tx_psn": 0xFFFFF0}
ACKNOWLEDGE = 0x11
EXCHANGE_S = 30.0


def _responder(t: Any, **kw: Any) -> RcResponder:
    return RcResponder(Addresses.mirror(t.config), expected_psn=t.config["qp"]["tx_psn"], **kw)


def _payload(i: int) -> bytes:
    return struct.pack("<I", i) + bytes(range(28))


def exchange(t: Any, peer: Peer | None, rc: RcResponder, count: int, ahead: int) -> list[bytes]:
    """``count`` echo requests from the peer (with no peer: ``count`` host sends), at most
    ``ahead`` beyond what the responder has taken, the engine's frames through ``rc`` and its
    answers back, until every one is delivered. Returns the delivered payloads, in order."""
    delivered: list[bytes] = []
    sent = 0
    deadline = time.monotonic() + EXCHANGE_S
    while len(delivered) < count:
        while sent < count and sent - len(delivered) < ahead:
            if peer is None:
                t.send(_payload(sent))
            else:
                assert t.inject(peer.next("SEND_ONLY", _payload(sent))), "rx ring full"
            sent += 1
        frames = t.collect(max_frames=4096, timeout=0.005)
        if not frames:
            got, answers = rc.flush()
            delivered += got
            for a in answers:
                assert t.inject(a)
        for f in frames:
            got, answers = rc.receive(f)
            delivered += got
            for a in answers:
                assert t.inject(a), "rx ring full"
        if time.monotonic() > deadline:
            raise AssertionError(
                f"{len(delivered)} of {count} replies delivered in {EXCHANGE_S} s; responder "
                f"{rc.report()}; counters {nonzero(t.stats())}"
            )
    return delivered


@pytest.mark.parametrize("executor", EXECUTORS)
@pytest.mark.parametrize(
    ("faults", "nak_on_gap"),
    [
        (RcFaults(loss=0.05, answer_loss=0.05, seed=3), True),
        (RcFaults(loss=0.05, answer_loss=0.05, seed=4), False),  # only the timer resends
        (RcFaults(loss=0.05, reorder=0.05, rnr_every=20, rnr_burst=3, seed=5), True),
    ],
    ids=["loss-nak", "loss-timeout", "reorder-rnr"],
)
def test_every_reply_delivered_once_in_order(executor, faults, nak_on_gap):
    count = 400
    with running(executor, qp=RELIABLE) as t:
        rc = _responder(t, faults=faults, nak_on_gap=nak_on_gap)
        delivered = exchange(t, Peer(t), rc, count, ahead=8)
        assert delivered == [_payload(i) for i in range(count)], "replies lost, doubled or swapped"
        # Settle: the last ACKs reach the requester; nothing is outstanding, nothing failed.
        deadline = time.monotonic() + 5
        while t.stats()["rc_acked"] < count and time.monotonic() < deadline:
            for f in t.collect(max_frames=64, timeout=0.01):
                for a in rc.receive(f)[1]:
                    t.inject(a)
        s = t.stats()
    assert s["rc_acked"] == count and s["replies"] == count
    assert s["rc_errors"] == 0 and s["rc_dropped"] == 0
    assert s["rc_retransmits"] > 0, "the faults should have cost resends"
    if faults.rnr_burst:
        assert s["rnr_naks_received"] == rc.stats.rnr_naks > 0
    if not nak_on_gap:
        assert s["rc_timeouts"] > 0 and rc.stats.naks == 0


@pytest.mark.parametrize("executor", EXECUTORS)
def test_lossless_exchange_sends_each_packet_once(executor):
    # A timer far longer than this peer (Python, frame by frame) takes to answer.
    with running(executor, qp={**RELIABLE, "ack_timeout_us": 200_000}) as t:
        rc = _responder(t)
        delivered = exchange(t, Peer(t), rc, 200, ahead=16)
        assert delivered == [_payload(i) for i in range(200)]
        s = t.stats()
    assert s["rc_retransmits"] == 0 and s["rc_timeouts"] == 0 and s["replies"] == 200
    assert rc.stats.duplicates == 0 and rc.stats.out_of_order == 0


@pytest.mark.parametrize("executor", EXECUTORS)
def test_host_sends_are_delivered_once_in_order_under_loss(executor):
    count = 100
    with running(executor, qp=RELIABLE) as t:
        rc = _responder(t, faults=RcFaults(loss=0.05, answer_loss=0.05, seed=9))
        delivered = exchange(t, None, rc, count, ahead=8)
        s = t.stats()
    assert delivered == [_payload(i) for i in range(count)], nonzero(s)
    assert s["host_sends"] == count and s["rc_retransmits"] > 0


@pytest.mark.parametrize("executor", EXECUTORS)
def test_a_full_window_refuses_the_request_with_an_rnr_nak_and_takes_it_again(executor):
    qp = {**RELIABLE, "window": 4, "rnr_timer": 14}
    with running(executor, qp=qp) as t:
        peer = Peer(t)
        for i in range(5):  # no answers: the window fills with the first four replies
            assert t.inject(peer.next("SEND_ONLY", _payload(i), ack_req=True))
        # Four replies, four ACKs of the requests, and the fifth request's RNR NAK.
        raw = collect_n(t, 9)
        frames = [parse(f) for f in raw]
        replies = [f for f, p in zip(raw, frames, strict=True) if p.opcode_name == "RC_SEND_ONLY"]
        naks = [p for p in frames if p.opcode == ACKNOWLEDGE and p.aeth.syndrome & 0x60 == 0x20]
        assert [parse(f).payload for f in replies] == [_payload(i) for i in range(4)]
        assert len(naks) == 1, [describe(f) for f in raw]
        assert naks[0].aeth.syndrome == rnr_syndrome(14) and naks[0].psn == psn_add(peer.psn, -1)
        # The responder takes the four; the refused request, sent again, is answered.
        rc = _responder(t)
        for f in replies:
            for a in rc.receive(f)[1]:
                assert t.inject(a)
        assert t.inject(peer.frame("SEND_ONLY", _payload(4), psn=naks[0].psn, ack_req=True))
        again = [parse(f) for f in collect_n(t, 2)]  # its reply and its ACK
        s = t.stats()
    assert [p.payload for p in again if p.opcode_name == "RC_SEND_ONLY"] == [_payload(4)]
    assert s["rnr_naks_sent"] == 1 and s["messages"] == 5 and s["rc_acked"] == 4


@pytest.mark.parametrize("executor", EXECUTORS)
def test_a_silent_peer_exhausts_the_retries_and_what_is_lost_is_counted(executor):
    qp = {**RELIABLE, "ack_timeout_us": 500, "retry_count": 2}
    with running(executor, qp=qp) as t:
        peer = Peer(t)
        for i in range(3):
            assert t.inject(peer.next("SEND_ONLY", _payload(i)))
        # Sent once, then again after each of 2 timeouts; the third gives up.
        frames = collect_n(t, 9)
        deadline = time.monotonic() + 5
        while t.stats()["rc_errors"] == 0 and time.monotonic() < deadline:
            frames += t.collect(max_frames=64, timeout=0.01)
        s = t.stats()
        assert s["rc_errors"] == 1 and s["rc_dropped"] == 3, nonzero(s)
        assert s["rc_timeouts"] == 3 and s["rc_retransmits"] == 6
        assert [parse(f).payload for f in frames] == [_payload(i) for i in range(3)] * 3
        # In the error state a reply is not sent: counted, and its record says so.
        t.receive(timeout=0.1, max_messages=64)
        assert t.inject(peer.next("SEND_ONLY", _payload(3)))
        record = receive_n(t, 1)[-1]
        assert not t.collect(max_frames=8, timeout=0.05)
        s = t.stats()
    assert record.reply_dropped and s["rc_dropped"] == 4


@pytest.mark.parametrize("executor", EXECUTORS)
def test_a_fatal_nak_puts_the_requester_in_error(executor):
    with running(executor, qp=RELIABLE) as t:
        peer = Peer(t)
        assert t.inject(peer.next("SEND_ONLY", _payload(0)))
        reply = parse(collect_n(t, 1)[0])
        nak = Addresses.mirror(t.config).frame(
            "ACKNOWLEDGE", b"", psn=reply.psn, syndrome=0x62, msn=0
        )  # remote access error
        assert t.inject(nak)
        deadline = time.monotonic() + 5
        while t.stats()["rc_errors"] == 0 and time.monotonic() < deadline:
            time.sleep(0.001)  # a poll interval for the counters, not a synchronisation
        s = t.stats()
    assert s["rc_errors"] == 1 and s["naks_received"] == 1 and s["rc_dropped"] == 1


@pytest.mark.parametrize("setup", SETUPS)
@pytest.mark.parametrize("window", [1, 16])
def test_the_loopback_far_end_acks_every_reply_and_nothing_is_sent_twice(setup, window):
    executor, far_end = setup
    count = 3000
    # No resend while a loaded host schedules; a window past the far end's (which does not
    # send a request again after an RNR NAK).
    qp = {**RELIABLE, "ack_timeout_us": 1_000_000, "window": 64}
    with running(executor, "RC", far_end, qp=qp) as t:
        for k in range(2):  # a second run continues the PSNs, nothing left outstanding
            r = t.roundtrip(count=count, size=64, window=window, timeout=20.0)
            assert (r.status, r.received, r.wrong, r.bad_frames) == ("done", count, 0, 0), r
            wait_counters(t, rc_acked=(k + 1) * count)
        s = t.stats()
    assert s["replies"] == 2 * count and s["rc_retransmits"] == 0 and s["rc_errors"] == 0
    assert s["rnr_naks_sent"] == 0
    # The express path takes the requests and the far end's ACKs alike (half the packets are
    # ACKs): all but the first of each, which the general path learns the headers from, and
    # a few a GPU's crew takes alone.
    assert s["express"] >= 0.9 * s["rx_packets"], nonzero(s)


def test_bench_roundtrip_reliable_rows(tmp_path):
    from roce_transceiver.bench.roundtrip import RELIABLE_LOOPS, run_roundtrip

    out = tmp_path / "out.txt"
    with out.open("w") as f:
        result = run_roundtrip(
            executor="cpu", count=300, floor_iterations=100, reliable=True, repeats=1, out=f
        )
    text = out.read_text()
    assert "reliable replies: echo p50 UC" in text and "RC retransmit / UC" in text
    reliable = result["reliable"]
    assert reliable["lossless_resends"] == 0
    assert set(reliable["p50_us"]) == set(RELIABLE_LOOPS)
    assert reliable["retransmit_over_uc"] > 0


def _udp_on_lo(peer_ip: str, qp: dict[str, Any]) -> dict[str, Any]:
    """A transceiver on the socket NIC over udp on lo, its peer at ``peer_ip``."""
    return {
        "executor": "cpu",
        "nic": "socket",
        "socket": {"mode": "udp"},
        "local": {"ip": "127.0.0.1"},
        "peer": {"ip": peer_ip},
        "qp": {"transport": "RC", **qp},
    }


def test_host_sends_over_udp_on_lo_reach_a_lossy_responder_once_in_order():
    """The same over real sockets: the socket NIC on lo, the responder behind a peer's link."""
    from roce_transceiver.peers import open_link
    from roce_transceiver.transceiver import Transceiver

    cfg = _udp_on_lo("127.0.0.2", {**RELIABLE, "ack_timeout_us": 20_000})
    count = 200
    with Transceiver(cfg) as t, open_link(t.config, "udp") as link:
        rc = RcResponder(
            link.addresses,
            expected_psn=t.config["qp"]["tx_psn"],
            faults=RcFaults(loss=0.05, answer_loss=0.05, seed=11),
        )
        delivered: list[bytes] = []
        sent = 0
        deadline = time.monotonic() + EXCHANGE_S
        while len(delivered) < count and time.monotonic() < deadline:
            while sent < count and sent - len(delivered) < 8:
                t.send(_payload(sent))
                sent += 1
            p = link.receive(timeout=0.01)
            if p is None:
                continue
            got, answers = rc.receive(p)
            delivered += got
            for a in answers:
                link.send(a)
        s = t.stats()
    assert delivered == [_payload(i) for i in range(count)], (rc.report(), nonzero(s))
    assert s["rc_retransmits"] > 0 and s["rc_errors"] == 0


def test_uc_ignores_retransmit():
    with running("cpu", "UC", qp=RELIABLE) as t:
        peer = Peer(t)
        assert t.inject(peer.next("SEND_ONLY", _payload(0)))
        collect_n(t, 1)
        assert not t.collect(max_frames=8, timeout=0.02)  # no timer: sent once
        s = t.stats()
    assert s["rc_retransmits"] == 0 and s["rc_timeouts"] == 0


@pytest.mark.parametrize("window", [0, 3, 8192])
def test_window_must_be_a_power_of_two_in_range(window):
    from roce_transceiver.config import ConfigError, load_config

    with pytest.raises(ConfigError, match=r"qp\.window"):
        load_config({"qp": {"window": window}})


# The responder's own rules, against hand-made frames.


def _rc_send(a: Addresses, psn: int, payload: bytes = b"x") -> bytes:
    mirrored = Addresses(
        a.their_mac, a.their_ip, 4791, a.their_qpn, a.own_mac, a.own_ip, a.own_qpn, "RC"
    )
    return mirrored.frame("SEND_ONLY", payload, psn=psn, ack_req=True)


def _answers(frames: list[bytes]) -> list[tuple[int, int]]:
    return [(parse(f).aeth.syndrome, parse(f).psn) for f in frames]


def test_responder_rules():
    a = Addresses(
        "02:00:00:00:00:02", "10.0.0.2", 4791, 0x12, "02:00:00:00:00:01", "10.0.0.1", 0x11, "RC"
    )
    rc = RcResponder(a, expected_psn=0xFFFFFF)
    got, answers = rc.receive(_rc_send(a, 0xFFFFFF, b"a"))  # in order, across the wrap
    assert got == [b"a"] and _answers(answers) == [(0x1F, 0xFFFFFF)]
    got, answers = rc.receive(_rc_send(a, 1, b"c"))  # 0 lost: NAKed once at the expected PSN
    assert got == [] and _answers(answers) == [(0x60, 0)]
    assert rc.receive(_rc_send(a, 2, b"d")) == ([], [])  # the same gap: no second NAK
    got, answers = rc.receive(_rc_send(a, 0xFFFFFF, b"a"))  # a duplicate: ACKed, not delivered
    assert got == [] and _answers(answers) == [(0x1F, 0xFFFFFF)]
    got, answers = rc.receive(_rc_send(a, 0, b"b"))
    assert got == [b"b"] and _answers(answers) == [(0x1F, 0)]
    rnr = RcResponder(a, expected_psn=5, faults=RcFaults(rnr_every=1, rnr_burst=2, rnr_timer=3))
    assert rnr.receive(_rc_send(a, 5, b"p"))[0] == [b"p"]
    for _ in range(2):  # not ready twice, at the expected PSN
        got, answers = rnr.receive(_rc_send(a, 6, b"q"))
        assert got == [] and _answers(answers) == [(rnr_syndrome(3), 6)]
    assert rnr.receive(_rc_send(a, 6, b"q"))[0] == [b"q"]
    assert rnr.stats.rnr_naks == 2 and rnr.stats.taken == 2


def test_responder_faults_are_checked():
    with pytest.raises(ValueError, match="loss"):
        RcFaults(loss=1.0)
    with pytest.raises(ValueError, match="rnr timer"):
        RcFaults(rnr_timer=32)


def test_host_messages_reach_the_software_bridge_once_in_order():
    """HSB 2.7's host-to-bridge traffic: the host's sends to the software bridge's RC receive
    side (peers/bridge.py, HostMessages) over udp on lo, 5 % of them and of the bridge's ACKs
    lost, RNR bursts: every message taken once, in order."""
    from roce_transceiver.peers.bridge import HostMessages, SoftwareBridge
    from roce_transceiver.transceiver import Transceiver

    qp = {**RELIABLE, "qpn": 0x11, "peer_qpn": 0x300, "ack_timeout_us": 20_000}
    cfg = _udp_on_lo("127.0.0.3", qp)
    faults = RcFaults(loss=0.05, answer_loss=0.05, rnr_every=15, rnr_burst=2, seed=21)
    host = HostMessages(0x300, 0x11, "127.0.0.1", first_psn=qp["tx_psn"], faults=faults)
    count = 150
    with SoftwareBridge("127.0.0.3", host_messages=host) as bridge, Transceiver(cfg) as t:
        for i in range(count):
            t.send(_payload(i), timeout=EXCHANGE_S)  # the window is the backpressure
        deadline = time.monotonic() + EXCHANGE_S
        while len(bridge.taken) < count and time.monotonic() < deadline:
            time.sleep(0.01)  # a poll interval for the bridge's thread, not a synchronisation
        s = t.stats()
        rc = bridge.rc.report() if bridge.rc else {}
    assert bridge.taken == [_payload(i) for i in range(count)], (rc, nonzero(s))
    assert s["host_sends"] == count and s["rc_retransmits"] > 0 and s["rc_errors"] == 0
    assert rc["lost"] > 0 and rc["rnr_naks"] > 0 and not bridge.errors


def test_a_bridge_takes_host_messages_over_udp_only():
    from roce_transceiver.peers.bridge import HostMessages, SoftwareBridge

    with pytest.raises(ValueError, match="udp link only"):
        SoftwareBridge(
            "127.0.0.3",
            link="packet",
            interface="lo",
            host_messages=HostMessages(1, 2, "127.0.0.1"),
        )
