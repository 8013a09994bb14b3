"""RC atomics on the responder side: FETCH_ADD and COMPARE_SWAP on an 8-byte word of a
registered region, answered with ATOMIC ACKNOWLEDGE carrying the value before.

Goal: the signal half of GPUNetIO's put_signal lands (Verbs mode, docs/verbs_mode.md).
Oracles: the region's bytes read back after each atomic (the arithmetic done here in Python),
the acknowledgements decoded by the protocol core; a duplicate (the requester's timeout) is
answered again with the same value and not executed twice (IBA 9.4.5); a word outside a
region is NAKed remote access, a misaligned one invalid request; PSN order holds across
atomics and WRITEs (a WRITE then its signal: the data is there when the signal counts).
"""

from __future__ import annotations

import struct

import pytest
from engine_helpers import (
    EXECUTORS,
    NAK_INVALID_REQUEST,
    NAK_REMOTE_ACCESS,
    Peer,
    running,
    wait_counters,
)

from roce_transceiver.protocol import parse

REGION = {"va": 0x10000, "rkey": 0x77, "length": 256}
ATOMIC_ACK = 0x12


def word(t, offset: int = 0) -> int:
    return struct.unpack("<Q", t.read_region(0, offset, 8))[0]


def answers(t, want: int) -> list:
    return [parse(f) for f in t.collect(want=want, timeout=10.0)]


@pytest.mark.parametrize("executor", EXECUTORS)
def test_fetch_add_adds_and_answers_the_value_before(executor):
    with running(executor, "RC", regions=[REGION]) as t:
        peer = Peer(t)
        for k, add in enumerate([1, 1, 40, 2**64 - 1]):  # the last one wraps: -1
            psn = peer.psn
            assert t.inject(peer.next("FETCH_ADD", va=0x10000 + 8, rkey=0x77, swap_add=add))
            (ack,) = answers(t, 1)
            before = [0, 1, 2, 42][k]
            assert ack.opcode & 0x1F == ATOMIC_ACK and ack.psn == psn
            assert ack.aeth.syndrome == 0x1F and ack.atomic_ack_orig == before
            assert word(t, 8) == (before + add) % 2**64
        wait_counters(t, atomics=4, naks_sent=0)


@pytest.mark.parametrize("executor", EXECUTORS)
def test_compare_swap_swaps_only_on_a_match(executor):
    with running(executor, "RC", regions=[REGION]) as t:
        peer = Peer(t)
        t.inject(peer.next("COMPARE_SWAP", va=0x10000, rkey=0x77, compare=5, swap_add=9))
        (miss,) = answers(t, 1)
        assert miss.atomic_ack_orig == 0 and word(t) == 0
        t.inject(peer.next("COMPARE_SWAP", va=0x10000, rkey=0x77, compare=0, swap_add=9))
        (hit,) = answers(t, 1)
        assert hit.atomic_ack_orig == 0 and word(t) == 9


@pytest.mark.parametrize("executor", EXECUTORS)
def test_duplicate_atomic_is_answered_again_not_executed_twice(executor):
    with running(executor, "RC", regions=[REGION]) as t:
        peer = Peer(t)
        psn = peer.psn
        frame = peer.next("FETCH_ADD", va=0x10000, rkey=0x77, swap_add=3)
        t.inject(frame)
        (first,) = answers(t, 1)
        t.inject(frame)  # the requester did not see the answer and sent it again
        (again,) = answers(t, 1)
        assert (again.psn, again.atomic_ack_orig) == (first.psn, first.atomic_ack_orig) == (psn, 0)
        assert word(t) == 3
        wait_counters(t, atomics=1, duplicates=1)


@pytest.mark.parametrize("executor", EXECUTORS)
@pytest.mark.parametrize(
    ("va", "rkey", "syndrome"),
    [
        (0x10000 + 256, 0x77, NAK_REMOTE_ACCESS),
        (0x10000, 0x78, NAK_REMOTE_ACCESS),
        (0x10004, 0x77, NAK_INVALID_REQUEST),
    ],
    ids=["past-the-end", "unknown-rkey", "misaligned"],
)
def test_bad_atomic_is_naked_and_writes_nothing(executor, va, rkey, syndrome):
    with running(executor, "RC", regions=[REGION]) as t:
        peer = Peer(t)
        psn = peer.psn
        t.inject(peer.frame("FETCH_ADD", psn=psn, va=va, rkey=rkey, swap_add=1))
        (nak,) = answers(t, 1)
        assert nak.aeth.syndrome == syndrome and nak.psn == psn
        assert t.read_region(0) == bytes(256)
        wait_counters(t, atomics=0, out_of_range=1)


@pytest.mark.parametrize("executor", EXECUTORS)
def test_write_then_signal_in_order(executor):
    """put_signal's two packets: the data is in the region when the signal word counts."""
    with running(executor, "RC", regions=[REGION]) as t:
        peer = Peer(t)
        t.inject(peer.next("RDMA_WRITE_ONLY", b"payload!" * 4, va=0x10040, rkey=0x77, ack_req=True))
        t.inject(peer.next("FETCH_ADD", va=0x10000, rkey=0x77, swap_add=1))
        frames = answers(t, 2)
        assert [f.opcode & 0x1F for f in frames] == [0x11, ATOMIC_ACK]
        assert word(t) == 1 and t.read_region(0, 0x40, 32) == b"payload!" * 4
