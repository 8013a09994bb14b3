"""The GPUNetIO-shaped rings around the engine: rx, tx and the completion ring.

Goal: a full ring drops and counts, and never overwrites a slot its consumer
has not released (DESIGN section 4: "never overwritten before release: this is
the bug that drops and duplicates packets in existing GPUNetIO pipelines").
- rx: a producer that fills the ring gets False and ``ring_drops`` counts the
  rest; the packets already in the ring are processed later, in order, intact.
- tx: when the far end does not drain the tx ring, replies that do not fit are
  counted (``tx_ring_full``) and their completion records say ``reply_dropped``;
  nothing already queued is replaced.
- completions: a host that never reads loses the newest records, counted
  (``completion_drops``), and the loop does not stall; records published a batch at a
  time (``queues.completion_batch``) reach the host all, in order, intact, or counted.

Oracles: the sequence of distinct payloads injected (each echo must come back
once, in order, unaltered), the counters named in counters.h, the completion
records' flags.
"""

from __future__ import annotations

import itertools
import threading
import time

import pytest
from engine_helpers import (
    EXECUTORS,
    TRANSPORTS,
    WAIT_S,
    Peer,
    collect_n,
    make,
    receive_n,
    running,
    wait_counters,
)

from roce_transceiver.protocol import parse, psn_add


def payload(i: int) -> bytes:
    return b"req-%04d-" % i + bytes([i]) * 40


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("executor", EXECUTORS)
def test_rx_ring_full_before_start_drops_and_counts_then_processes_all_in_order(
    executor, transport
):
    t = make(executor, transport, queues={"rx_depth": 4})
    try:
        peer = Peer(t)
        accepted = [
            t.inject(peer.frame("SEND_ONLY", payload(i), psn=psn_add(peer.psn, i)))
            for i in range(4)
        ]
        assert accepted == [True] * 4
        # The loop is not draining: the ring is full, and stays full.
        refused = [t.inject(peer.frame("SEND_ONLY", payload(99), psn=peer.psn)) for _ in range(3)]
        assert refused == [False] * 3
        assert t.stats()["ring_drops"] == 3
        peer.take(4)
        t.start()
        frames = [parse(f) for f in collect_n(t, 4)]
        replies = [p for p in frames if p.opcode & 0x1F == 0x04]
        assert [p.payload for p in replies] == [payload(i) for i in range(4)]
        assert [p.psn for p in replies] == [psn_add(peer.tx_psn, i) for i in range(4)]
        wait_counters(t, rx_packets=4, messages=4, replies=4, ring_drops=3, psn_gaps=0)
        # The slots came back: the ring takes packets again, and the drops stay counted.
        assert [p.payload for p in peer.fence(t)] == []
        wait_counters(t, rx_packets=5, ring_drops=3)
    finally:
        t.stop()


@pytest.mark.parametrize("executor", EXECUTORS)
def test_rx_ring_wraps_many_times_without_loss_or_duplication(executor):
    # 16 slots, 200 packets injected in bursts of at most 16: every slot is reused 12 times.
    with running(executor, "UC", queues={"rx_depth": 16}) as t:
        peer = Peer(t)
        n = 200
        echoed: list[bytes] = []
        sent = refused = 0
        deadline = time.monotonic() + WAIT_S
        while len(echoed) < n:
            assert time.monotonic() < deadline, (
                f"{sent} of {n} packets in, {len(echoed)} echoes out after {WAIT_S} s"
            )
            # As many as the ring takes; a refusal (ring full) is retried later.
            while sent < n:
                if not t.inject(peer.frame("SEND_ONLY", payload(sent), psn=peer.psn)):
                    refused += 1
                    break
                peer.take()
                sent += 1
            echoed += [parse(f).payload for f in t.collect(max_frames=64, timeout=0.01)]
        assert echoed == [payload(i) for i in range(n)]
        wait_counters(t, rx_packets=n, messages=n, psn_gaps=0, duplicates=0, ring_drops=refused)


@pytest.mark.parametrize("executor", EXECUTORS)
def test_tx_ring_full_counts_and_marks_completions_reply_dropped(executor):
    tx_depth = 4
    n = 10
    with running(executor, "UC", queues={"tx_depth": tx_depth}) as t:
        peer = Peer(t)
        for i in range(n):
            assert t.inject(peer.next("SEND_ONLY", payload(i)))
        # Nobody drains the tx ring: the first tx_depth replies fill it, the rest drop.
        wait_counters(t, messages=n, replies=tx_depth, tx_ring_full=n - tx_depth)
        records = receive_n(t, n)
        assert [c.request for c in records] == [payload(i) for i in range(n)]
        assert [c.reply_dropped for c in records] == [False] * tx_depth + [True] * (n - tx_depth)
        # The handler did answer; only the transmission was dropped.
        assert all(c.reply == c.request and c.reply_len == len(c.request) for c in records)
        # What is in the ring is what was first put there, not overwritten by later replies.
        frames = [parse(f) for f in collect_n(t, tx_depth)]
        assert [p.payload for p in frames] == [payload(i) for i in range(tx_depth)]
        assert [p.psn for p in frames] == [psn_add(peer.tx_psn, i) for i in range(tx_depth)]
        # Drained, the ring carries replies again; the dropped ones used no PSN.
        assert peer.fence(t) == []
        assert peer.tx_psn == psn_add(t.config["qp"]["tx_psn"], tx_depth + 1)


@pytest.mark.parametrize("executor", EXECUTORS)
def test_completion_ring_full_counts_drops_and_keeps_the_oldest(executor):
    n = 7
    with running(executor, "UC", queues={"completion_depth": 2}) as t:
        peer = Peer(t)
        for i in range(n):
            assert t.inject(peer.next("SEND_ONLY", payload(i)))
        # The loop does not wait for the host: all replies go out.
        assert [parse(f).payload for f in collect_n(t, n)] == [payload(i) for i in range(n)]
        wait_counters(t, messages=n, replies=n, completion_drops=n - 2)
        assert [c.request for c in receive_n(t, 2)] == [payload(0), payload(1)]
        assert t.receive() == []
        # Read, the ring records again.
        assert peer.fence(t) == []
        assert [c.request for c in receive_n(t, 1)] == [b"fence:00000001"]
        wait_counters(t, completion_drops=n - 2)


@pytest.mark.parametrize("executor", EXECUTORS)
def test_completions_off_records_nothing(executor):
    with running(executor, "UC", completions=False) as t:
        peer = Peer(t)
        for i in range(3):
            assert t.inject(peer.next("SEND_ONLY", payload(i)))
        assert [parse(f).payload for f in collect_n(t, 3)] == [payload(i) for i in range(3)]
        wait_counters(t, messages=3, replies=3, completion_drops=0)
        # The counters are published after the records of the same pass.
        assert t.receive() == []


# Completion records are published in batches (queues.completion_batch, issue 16): the host
# sees them a batch at a time, or when the loop idles, never one less or out of order.


def records_of(payloads: list[bytes], first_psn: int, records: list) -> list[tuple]:
    """What each record says, next to what the far end sent at its PSN."""
    return [
        (c.psn, c.request, c.reply, payloads[(c.psn - first_psn) % (1 << 24) % len(payloads)])
        for c in records
    ]


@pytest.mark.parametrize("executor", EXECUTORS)
def test_batched_completions_every_record_in_order_with_its_bytes(executor):
    count = 3000  # not a multiple of the batch: the last records are shown once the loop idles
    payloads = [bytes([i, 3 * i, 7]) * 11 for i in range(7)]
    queues = {"completion_depth": 4096, "completion_batch": 128}
    with running(executor, "UC", queues=queues) as t:
        rx_psn = t.config["qp"]["rx_psn"]
        r = t.roundtrip(count=count, payloads=payloads, expected=payloads, window=8, timeout=60)
        assert (r.status, r.received, r.wrong) == ("done", count, 0), r
        records = receive_n(t, count)
        wait_counters(t, messages=count, completion_drops=0)
    assert [c.psn for c in records] == [psn_add(rx_psn, i) for i in range(count)]
    assert all(req == rep == want for _, req, rep, want in records_of(payloads, rx_psn, records))


@pytest.mark.parametrize("executor", EXECUTORS)
def test_full_completion_ring_under_traffic_keeps_the_first_and_counts_the_rest(executor):
    queues = {"completion_depth": 64, "completion_batch": 16}
    payloads = [b"full ring %d" % i for i in range(5)]
    with running(executor, "UC", queues=queues) as t:
        rx_psn = t.config["qp"]["rx_psn"]
        r = t.roundtrip(count=500, payloads=payloads, expected=payloads, window=8, timeout=60)
        assert (r.status, r.received, r.wrong) == ("done", 500, 0), r
        wait_counters(t, messages=500, completion_drops=500 - 64)
        kept = receive_n(t, 64)
        assert [c.psn for c in kept] == [psn_add(rx_psn, i) for i in range(64)]
        assert all(req == want for _, req, _, want in records_of(payloads, rx_psn, kept))
        assert t.receive() == []
        # Drained while the loop was idle, the ring records again at once.
        r = t.roundtrip(count=10, payloads=payloads, expected=payloads, timeout=10)
        assert (r.status, r.received) == ("done", 10), r
        again = receive_n(t, 10)
        assert [c.psn for c in again] == [psn_add(rx_psn, 500 + i) for i in range(10)]
        wait_counters(t, completion_drops=500 - 64)


@pytest.mark.parametrize("executor", EXECUTORS)
def test_completions_drained_while_the_loop_runs_none_lost_uncounted(executor):
    # A host thread drains a small ring while the far end runs: whatever the host keeps up
    # with, each message is a record (in order, with its bytes) or a counted drop.
    count = 4000
    payloads = [b"drained %02d" % i for i in range(9)]
    queues = {"completion_depth": 32, "completion_batch": 8}
    records: list = []
    with running(executor, "UC", queues=queues) as t:
        rx_psn = t.config["qp"]["rx_psn"]
        done = threading.Event()

        def drain() -> None:
            while not done.is_set():
                records.extend(t.receive(timeout=0.01, max_messages=4096))

        drainer = threading.Thread(target=drain, name="drain")
        drainer.start()
        try:
            r = t.roundtrip(count=count, payloads=payloads, expected=payloads, window=8, timeout=60)
        finally:
            done.set()
            drainer.join(timeout=WAIT_S)
        assert not drainer.is_alive()
        assert (r.status, r.received, r.wrong) == ("done", count, 0), r
        stats = wait_counters(t, messages=count)
        # The rest of the records: the loop shows them once idle.
        deadline = time.monotonic() + WAIT_S
        while len(records) + stats["completion_drops"] < count and time.monotonic() < deadline:
            records.extend(t.receive(timeout=0.05, max_messages=4096))
            stats = t.stats()
    assert len(records) + stats["completion_drops"] == count, (len(records), stats)
    psns = [c.psn for c in records]
    assert all(0 < (b - a) % (1 << 24) < 1 << 23 for a, b in itertools.pairwise(psns)), "order"
    assert all(req == rep == want for _, req, rep, want in records_of(payloads, rx_psn, records))
