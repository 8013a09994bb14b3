"""The engine's RC and UC responder, driven frame by frame through the loopback wire.

Goal: what the engine does with each request the far end can send (in order,
ahead of the expected PSN, behind it, multi-packet, malformed or not ours):
which counter moves, whether the handler runs, and which ACK/NAK goes back.

Oracles:
- the InfiniBand Architecture rules as DESIGN.md section 3 states them and as
  Linux soft-RoCE (drivers/infiniband/sw/rxe/rxe_resp.c: check_psn,
  check_op_seq) implements them: RC ACKs with syndrome 0x1F and its MSN, NAKs
  a PSN gap once with 0x60 and the expected PSN, re-ACKs duplicates without
  executing them, NAKs bad sequences and unsupported opcodes with 0x61 (IBA
  9.7.5.1); UC never acknowledges, counts a gap, drops until a First or Only
  resynchronises (IBA 9.7.5.2, rxe's drop_msg);
- P_Key matching per IBA 10.9.3;
- frames are built by roce_transceiver.protocol.build and the engine's
  answers decoded by parse (both checked against scapy and tshark elsewhere);
  whether the handler ran is read from the ``messages`` counter and the
  completion records.
"""

from __future__ import annotations

import pytest
from engine_helpers import (
    ACK,
    ACKNOWLEDGE,
    EXECUTORS,
    NAK_INVALID_REQUEST,
    NAK_PSN_SEQUENCE,
    TRANSPORTS,
    Peer,
    collect_n,
    describe,
    receive_n,
    running,
    wait_counters,
)

from roce_transceiver.protocol import OPCODES, Packet, parse, psn_add

# PSNs near the 24-bit wrap, so every sequence below crosses it.
QP = {"rx_psn": 0xFFFFFE, "tx_psn": 0xFFFFFD}


def aeths(frames: list[Packet]) -> list[tuple[int, int, int]]:
    """(syndrome, psn, msn) of every ACKNOWLEDGE among the frames."""
    out = []
    for p in frames:
        if p.opcode == ACKNOWLEDGE:
            assert p.aeth is not None
            out.append((p.aeth.syndrome, p.psn, p.aeth.msn))
    return out


def sends(frames: list[Packet]) -> list[bytes]:
    """Payloads of the SENDs among the frames (the handler's replies)."""
    return [p.payload for p in frames if p.opcode & 0x1F == 0x04]


# ---------------------------------------------------------------- RC in order


@pytest.mark.parametrize("executor", EXECUTORS)
def test_rc_ack_req_gets_ack_0x1f_with_msn_and_psn_reply_carries_next_tx_psn(executor):
    with running(executor, "RC", qp=QP) as t:
        peer = Peer(t)
        requests = [bytes([i]) * (8 + i) for i in range(4)]
        rx_psns = []
        for r in requests:
            rx_psns.append(peer.psn)
            assert t.inject(peer.next("SEND_ONLY", r, ack_req=True))
        frames = [parse(f) for f in collect_n(t, 2 * len(requests))]
        for f in frames:
            peer.check_addressed_to_peer(f)
        # Per request: the reply (a SEND Only at our next PSN), then the ACK of the request.
        for i, r in enumerate(requests):
            reply, ack = frames[2 * i], frames[2 * i + 1]
            assert reply.opcode_name == "RC_SEND_ONLY", reply.opcode_name
            assert reply.payload == r
            assert reply.psn == psn_add(QP["tx_psn"], i)
            assert reply.ack_req  # RC: the peer acknowledges our SENDs
            assert ack.opcode == ACKNOWLEDGE and ack.aeth is not None
            assert (ack.aeth.syndrome, ack.psn, ack.aeth.msn) == (ACK, rx_psns[i], i + 1)
            assert not ack.payload
        n = len(requests)
        wait_counters(t, acks_sent=n, naks_sent=0, messages=n, replies=n, rx_packets=n)


@pytest.mark.parametrize("executor", EXECUTORS)
def test_rc_without_ack_req_sends_reply_but_no_ack(executor):
    with running(executor, "RC", qp=QP) as t:
        peer = Peer(t)
        assert t.inject(peer.next("SEND_ONLY", b"quiet"))
        before = peer.fence(t)
        assert [p.payload for p in before] == [b"quiet"]
        wait_counters(t, acks_sent=0, messages=2, replies=2)


# ---------------------------------------------------------------- RC gaps and duplicates


@pytest.mark.parametrize("executor", EXECUTORS)
def test_rc_psn_gap_naks_once_with_expected_psn_and_delivers_nothing_until_it_arrives(executor):
    with running(executor, "RC", qp=QP) as t:
        peer = Peer(t)
        expected = peer.psn
        # Three packets ahead of the expected PSN: counted, one NAK, nothing delivered.
        ahead = {psn_add(expected, k): b"ahead-%d" % k for k in (1, 2, 3)}
        for psn, payload in ahead.items():
            assert t.inject(peer.frame("SEND_ONLY", payload, psn=psn, ack_req=True))
        wait_counters(t, rx_packets=3, psn_gaps=3, messages=0, replies=0)
        nak = [parse(f) for f in collect_n(t, 1)]
        assert aeths(nak) == [(NAK_PSN_SEQUENCE, expected, 0)], [describe(f) for f in t.collect()]
        assert t.receive() == []

        # The expected PSN, then the others again: all delivered, in order.
        frames_in = [(expected, b"first"), *ahead.items()]
        for psn, payload in frames_in:
            assert t.inject(peer.frame("SEND_ONLY", payload, psn=psn, ack_req=True))
        peer.take(4)
        out = [parse(f) for f in collect_n(t, 2 * len(frames_in))]
        assert sends(out) == [p for _, p in frames_in]
        assert aeths(out) == [(ACK, psn, i + 1) for i, (psn, _) in enumerate(frames_in)]
        wait_counters(t, naks_sent=1, psn_gaps=3, messages=4, acks_sent=4, rx_packets=7)
        assert [c.request for c in receive_n(t, 4)] == [p for _, p in frames_in]


@pytest.mark.parametrize("executor", EXECUTORS)
def test_rc_new_gap_after_recovery_is_naked_again(executor):
    # One NAK per gap (rxe: sent_psn_nak): the NAK state clears once the expected PSN arrives.
    with running(executor, "RC", qp=QP) as t:
        peer = Peer(t)
        first_gap = peer.psn
        assert t.inject(peer.frame("SEND_ONLY", b"x", psn=psn_add(first_gap, 5)))
        assert t.inject(peer.next("SEND_ONLY", b"recovered"))
        second_gap = peer.psn
        assert t.inject(peer.frame("SEND_ONLY", b"y", psn=psn_add(second_gap, 7)))
        assert t.inject(peer.frame("SEND_ONLY", b"y", psn=psn_add(second_gap, 8)))
        before = peer.fence(t)
        assert aeths(before) == [
            (NAK_PSN_SEQUENCE, first_gap, 0),
            (NAK_PSN_SEQUENCE, second_gap, 1),
        ]
        assert sends(before) == [b"recovered"]
        wait_counters(t, psn_gaps=3, naks_sent=2, messages=2)


@pytest.mark.parametrize("executor", EXECUTORS)
def test_rc_duplicate_is_reacked_and_not_executed_again(executor):
    with running(executor, "RC", qp=QP) as t:
        peer = Peer(t)
        psns = [peer.psn, psn_add(peer.psn, 1)]
        for i, psn in enumerate(psns):
            assert t.inject(peer.frame("SEND_ONLY", b"once-%d" % i, psn=psn, ack_req=True))
        peer.take(2)
        collect_n(t, 4)  # two replies, two ACKs
        assert len(receive_n(t, 2)) == 2
        # The requester lost our ACKs and retransmits both; the duplicates carry no AckReq
        # on the second one, which the responder must acknowledge all the same.
        assert t.inject(peer.frame("SEND_ONLY", b"once-0", psn=psns[0], ack_req=True))
        assert t.inject(peer.frame("SEND_ONLY", b"once-1", psn=psns[1]))
        before = peer.fence(t)
        # The two originals and the fence: the handler did not run again.
        wait_counters(t, duplicates=2, messages=3, rx_packets=5)
        assert sends(before) == [], "a duplicate was executed again"
        acks = aeths(before)
        assert len(acks) == 2 and all(s == ACK and msn == 2 for s, _, msn in acks), acks
        for (_, psn, _), dup in zip(acks, psns, strict=True):
            # An ACK of a duplicate acknowledges at least it and nothing not yet received.
            assert 0 <= (psn - dup) % (1 << 24) <= (psns[1] - dup) % (1 << 24), (psn, dup)
        assert [c.request for c in receive_n(t, 1)] == [b"fence:00000001"]


# ---------------------------------------------------------------- UC gaps


@pytest.mark.parametrize("executor", EXECUTORS)
def test_uc_gap_counts_and_resyncs_on_only_at_its_new_psn(executor):
    with running(executor, "UC", qp=QP) as t:
        peer = Peer(t)
        jump = psn_add(peer.psn, 3)
        assert t.inject(peer.frame("SEND_ONLY", b"after-gap", psn=jump))
        assert t.inject(peer.frame("SEND_ONLY", b"next", psn=psn_add(jump, 1)))
        peer.psn = psn_add(jump, 2)
        before = peer.fence(t)
        assert sends(before) == [b"after-gap", b"next"]
        assert aeths(before) == []
        wait_counters(t, psn_gaps=1, messages=3, acks_sent=0, naks_sent=0)
        assert [c.psn for c in receive_n(t, 3)] == [jump, psn_add(jump, 1), psn_add(jump, 2)]


@pytest.mark.parametrize("executor", EXECUTORS)
def test_uc_gap_drops_middle_and_last_until_a_first_resyncs(executor):
    with running(executor, "UC", qp=QP) as t:
        peer = Peer(t)
        assert t.inject(peer.next("SEND_FIRST", b"A" * 64))  # a message in progress...
        lost = peer.take()  # ...whose Middle is lost
        assert t.inject(peer.next("SEND_MIDDLE", b"C" * 64))
        assert t.inject(peer.next("SEND_LAST", b"D" * 64))
        assert lost  # the PSN no packet carried
        wait_counters(t, rx_packets=3, psn_gaps=1, messages=0)
        # A new message resynchronises, First to Last.
        assert t.inject(peer.next("SEND_FIRST", b"E" * 64))
        assert t.inject(peer.next("SEND_LAST", b"F" * 8))
        before = peer.fence(t)
        assert sends(before) == [b"E" * 64 + b"F" * 8]
        assert aeths(before) == []
        wait_counters(t, psn_gaps=1, messages=2, acks_sent=0, naks_sent=0, rx_packets=6)


@pytest.mark.parametrize("executor", EXECUTORS)
def test_uc_only_behind_expected_psn_resyncs_like_rxe(executor):
    # UC has no duplicates (rxe check_psn: `drop_msg || diff != 0`, then a
    # START packet resyncs): a sender that restarts its PSNs, as an HSB sensor does at
    # PSN 0, must be heard at once. DESIGN section 3: "never stalls the receiver".
    with running(executor, "UC") as t:
        peer = Peer(t)
        for i in range(5):
            assert t.inject(peer.next("SEND_ONLY", b"run-%d" % i))
        collect_n(t, 5)
        peer.psn = 0  # the sender restarts; the expected PSN is 5
        assert t.inject(peer.next("SEND_ONLY", b"restarted"))
        # Dropped as a "duplicate", it would leave messages at 5 and duplicates at 1.
        wait_counters(t, timeout=2.0, rx_packets=6, messages=6, duplicates=0)
        assert sends([parse(f) for f in collect_n(t, 1)]) == [b"restarted"]
        assert sends(peer.fence(t)) == []  # and the receiver follows the new PSNs


# ---------------------------------------------------------------- multi-packet SENDs


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("executor", EXECUTORS)
def test_send_first_middle_last_is_one_message_echoed_as_the_concatenation(executor, transport):
    with running(executor, transport, qp=QP) as t:
        peer = Peer(t)
        parts = [bytes(range(256)), b"\xa5" * 256, b"\x5a" * 256, b"tail"]
        ops = ["SEND_FIRST", "SEND_MIDDLE", "SEND_MIDDLE", "SEND_LAST"]
        for op, part in zip(ops, parts, strict=True):
            assert t.inject(peer.next(op, part, ack_req=transport == "RC" and op == "SEND_LAST"))
        frames = [parse(f) for f in collect_n(t, 2 if transport == "RC" else 1)]
        whole = b"".join(parts)
        assert sends(frames) == [whole]
        if transport == "RC":
            assert aeths(frames) == [(ACK, psn_add(QP["rx_psn"], 3), 1)]
        (c,) = receive_n(t, 1)
        assert c.request_len == len(whole) and c.reply_len == len(whole)
        # Both are truncated to half the completion slot: (1024 - 40) / 2 bytes.
        assert c.request == c.reply == whole[:492]
        assert c.opcode == OPCODES[f"{transport}_SEND_LAST"]
        assert c.psn == psn_add(QP["rx_psn"], 3)
        wait_counters(t, messages=1, rx_packets=4, replies=1)


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("executor", EXECUTORS)
def test_send_last_with_immediate_delivers_the_immediate(executor, transport):
    with running(executor, transport) as t:
        peer = Peer(t)
        assert t.inject(peer.next("SEND_FIRST", b"a" * 32))
        assert t.inject(peer.next("SEND_LAST_WITH_IMMEDIATE", b"b" * 4, imm=0xCAFEF00D))
        assert sends(peer.fence(t)) == [b"a" * 32 + b"b" * 4]
        c = receive_n(t, 2)[0]
        assert c.imm == 0xCAFEF00D and c.request == b"a" * 32 + b"b" * 4


@pytest.mark.parametrize(
    "ops",
    [["SEND_MIDDLE"], ["SEND_LAST"], ["SEND_FIRST", "SEND_FIRST"], ["SEND_FIRST", "SEND_ONLY"]],
    ids=["middle_without_first", "last_without_first", "first_inside", "only_inside"],
)
@pytest.mark.parametrize("executor", EXECUTORS)
def test_rc_bad_sequence_counts_opcode_sequence_and_naks_0x61(executor, ops):
    with running(executor, "RC", qp=QP) as t:
        peer = Peer(t)
        for op in ops[:-1]:
            assert t.inject(peer.next(op, b"m" * 16))
        bad = peer.psn
        assert t.inject(peer.frame(ops[-1], b"x" * 16, psn=bad))
        before = peer.fence(t)  # the rejected packet's PSN is still the expected one
        assert aeths(before) == [(NAK_INVALID_REQUEST, bad, 0)]
        assert sends(before) == []
        wait_counters(t, opcode_sequence=1, naks_sent=1, messages=1)


@pytest.mark.parametrize("new", ["SEND_FIRST", "SEND_ONLY"], ids=["first_inside", "only_inside"])
@pytest.mark.parametrize("executor", EXECUTORS)
def test_uc_first_or_only_inside_a_message_drops_it_and_delivers_the_new_one(executor, new):
    """The UC twin of the RC bad-sequence test: at the expected PSN, a First or Only that
    interrupts a message in progress loses that message (counted, no NAK: UC has none) and
    starts the new one at once (IBA 9.7.5.2.x)."""
    with running(executor, "UC") as t:
        peer = Peer(t)
        assert t.inject(peer.next("SEND_FIRST", b"interrupted-" * 4))
        assert t.inject(peer.next(new, b"new"))  # at the expected PSN
        if new == "SEND_FIRST":
            assert t.inject(peer.next("SEND_LAST", b"-msg"))
        before = peer.fence(t)
        assert sends(before) == [b"new-msg" if new == "SEND_FIRST" else b"new"]
        assert aeths(before) == []
        wait_counters(t, opcode_sequence=1, naks_sent=0, psn_gaps=0, messages=2)


@pytest.mark.parametrize("executor", EXECUTORS)
def test_uc_middle_without_first_is_dropped_silently(executor):
    with running(executor, "UC") as t:
        peer = Peer(t)
        assert t.inject(peer.next("SEND_MIDDLE", b"orphan"))
        assert t.inject(peer.next("SEND_LAST", b"orphan"))
        assert t.inject(peer.next("SEND_FIRST", b"new"))
        assert t.inject(peer.next("SEND_LAST", b"-msg"))
        before = peer.fence(t)
        assert sends(before) == [b"new-msg"]
        assert aeths(before) == []
        # The orphan Middle breaks the sequence; its Last is dropped too (as a sequence
        # error, or as a PSN gap where the dropped Middle's PSN was not consumed).
        stats = wait_counters(t, messages=2, rx_packets=5)
        assert stats["opcode_sequence"] >= 1


# ---------------------------------------------------------------- frames that are not served


def _bad_frames(peer: Peer) -> dict[str, tuple[bytes, str]]:
    """name -> (frame, the counter it must move); frames at the expected PSN."""
    psn = peer.psn
    good = peer.frame("SEND_ONLY", b"payload!", psn=psn)
    other = "UC" if peer.transport == "RC" else "RC"
    return {
        "bad_icrc": (peer.frame("SEND_ONLY", b"payload!", psn=psn, icrc=0x12345678), "icrc_errors"),
        "wrong_dest_qp": (
            peer.frame("SEND_ONLY", b"payload!", psn=psn, dest_qp=peer.qpn + 1),
            "wrong_qp",
        ),
        "wrong_pkey": (peer.frame("SEND_ONLY", b"payload!", psn=psn, pkey=0x8123), "bad_pkey"),
        "garbage": (bytes(range(7, 71)), "malformed"),
        "truncated": (good[:40], "malformed"),
        "other_transport": (
            peer.frame(f"{other}_SEND_ONLY", b"payload!", psn=psn),
            "malformed",
        ),
    }


BAD = ["bad_icrc", "wrong_dest_qp", "wrong_pkey", "garbage", "truncated", "other_transport"]


@pytest.mark.parametrize("case", BAD)
@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("executor", EXECUTORS)
def test_unserved_frame_counted_handler_not_run_no_answer(executor, transport, case):
    with running(executor, transport) as t:
        peer = Peer(t)
        frame, counter = _bad_frames(peer)[case]
        assert t.inject(frame)
        wait_counters(t, **{counter: 1, "rx_packets": 1, "messages": 0})
        before = peer.fence(t)  # the expected PSN did not move
        assert before == [], [p.opcode_name for p in before]
        wait_counters(t, **{counter: 1, "messages": 1, "acks_sent": 0, "naks_sent": 0})
        assert [c.request for c in receive_n(t, 1)] == [b"fence:00000001"]


@pytest.mark.parametrize("executor", EXECUTORS)
def test_rc_read_unsupported_nak_0x61_handler_not_run(executor):
    with running(executor, "RC", regions=[{"va": 0x1000, "rkey": 7, "length": 64}]) as t:
        peer = Peer(t)
        region = t.read_region(0)
        psn = peer.psn
        fields = {"va": 0x1000, "rkey": 7, "dma_len": 8}
        assert t.inject(peer.frame("RDMA_READ_REQUEST", psn=psn, **fields))
        before = peer.fence(t)
        assert aeths(before) == [(NAK_INVALID_REQUEST, psn, 0)]
        wait_counters(t, unsupported=1, messages=1, naks_sent=1)
        assert t.read_region(0) == region


@pytest.mark.parametrize("executor", EXECUTORS)
def test_icrc_check_off_accepts_a_bad_icrc(executor):
    with running(executor, "UC", check_icrc=False) as t:
        peer = Peer(t)
        assert t.inject(peer.next("SEND_ONLY", b"unchecked", icrc=0))
        assert sends(peer.fence(t)) == [b"unchecked"]
        wait_counters(t, icrc_errors=0, messages=2)


@pytest.mark.parametrize(
    ("qp_pkey", "frame_pkey", "accepted"),
    [
        (0xFFFF, 0xFFFF, True),
        (0xFFFF, 0x7FFF, True),  # a limited member talking to a full member
        (0x7FFF, 0xFFFF, True),
        (0x7FFF, 0x7FFF, False),  # two limited members never talk (IBA 10.9.3)
        (0x8001, 0x8002, False),  # another partition
    ],
)
@pytest.mark.parametrize("executor", EXECUTORS)
def test_pkey_membership_rule(executor, qp_pkey, frame_pkey, accepted):
    with running(executor, "UC", qp={"pkey": qp_pkey}) as t:
        peer = Peer(t)
        assert t.inject(peer.frame("SEND_ONLY", b"pk", psn=peer.psn, pkey=frame_pkey))
        if accepted:
            peer.take()
        assert sends(peer.fence(t)) == ([b"pk"] if accepted else [])
        wait_counters(t, bad_pkey=0 if accepted else 1, messages=2 if accepted else 1)
