"""Express batches (express_batch.h): requests that queue up, taken several at once.

Goal: a batch is an optimisation only. With requests waiting in the rx ring, a crew takes
them in express batches (the cpu executor's thread as a crew of one, queues.batch at a time;
the cuda executor's block of cuda.warps warps, a request a warp) and transmits the same bytes
in the same order, records the same completions, counts the same counters and leaves the
same bytes in the regions as the general path taking them one at a time; and batches do form.
- Every script of test_engine_express.py, in the ring before the loop starts: what a batch
  takes (SEND Onlys, with and without an ACK request) mixed with what ends it (a WRITE with
  Immediate, a corrupt ICRC, a PSN gap, a new header, a multi-packet SEND, a wrong QP);
  and an 8-slot tx ring nobody drains (a batch cut to the slots left).
- A long run of SEND Onlys of every pad: full batches.
- QEC syndromes with short ones among them (a handler error: no reply, so no PSN used up,
  which the commit's PSN and slot accounting must skip).

Oracles: the same run with ``express: false`` (the general path); the Python decoder's table
for each correction; the loop's own count of batches and their frames (epoch_stats) for the
batches formed.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from engine_helpers import (
    EXECUTORS,
    TRANSPORTS,
    Peer,
    collect_n,
    merge,
    receive_n,
    wait_counters,
)
from test_engine_express import (
    REGIONS,
    WritesWithImmediate,
    acked_sends,
    crowded_tx_ring,
    same_as_general_path,
    scripted,
)

from roce_transceiver.protocol import parse, psn_add
from roce_transceiver.qec import LookupTableDecoder, RotatedSurfaceCode, pack_syndrome
from roce_transceiver.transceiver import Transceiver


def _shapes(executor: str) -> list[dict[str, Any]]:
    """The crews a run is taken by: the cpu thread's batch depth; the cuda block's warps."""
    if executor == "cpu":
        return [{"queues": {"batch": 16}}, {"queues": {"batch": 3}}]
    return [{"cuda": {"warps": 4}}, {"cuda": {"warps": 16}}]


def _mean_batch(run: dict[str, Any]) -> float:
    e = run["epochs"]
    return e["batch_frames"] / max(1, e["batches"])


def sends(peer: Peer) -> list[bytes]:
    """A SEND Only to teach the header, then 150 of every pad and a few lengths."""
    return [
        peer.frame("SEND_ONLY", bytes([i % 251]) * (i % 67), psn=peer.take()) for i in range(151)
    ]


SCRIPTS = {
    "scripted": (scripted, {}),
    "acked": (acked_sends, {}),
    "writes": (WritesWithImmediate, {"regions": REGIONS}),
    "sends": (sends, {"queues": {"rx_depth": 256}}),
}


@pytest.mark.parametrize("script", list(SCRIPTS))
@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("executor", EXECUTORS)
def test_requests_waiting_in_the_ring_take_batches_with_the_general_paths_results(
    executor: str, transport: str, script: str
) -> None:
    make_script, config = SCRIPTS[script]
    for shape in _shapes(executor):
        s = make_script() if isinstance(make_script, type) else make_script
        fast = same_as_general_path(executor, transport, s, True, **merge(config, shape))
        assert fast["stats"]["express"] > 0, shape
        if script == "sends":
            assert fast["stats"]["express"] == 150, shape
            # 150 in the ring at once: most go in batches as deep as the crew allows.
            assert _mean_batch(fast) > 2, (shape, fast["epochs"])
        assert all(parse(f).icrc_ok for f in fast["sent"])


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("executor", EXECUTORS)
def test_a_batch_is_cut_to_the_tx_slots_left(executor: str, transport: str) -> None:
    for shape in _shapes(executor):
        fast = same_as_general_path(
            executor,
            transport,
            crowded_tx_ring,
            True,
            **merge({"queues": {"tx_depth": 8}}, shape),
        )
        s = fast["stats"]
        if transport == "RC":
            assert (s["express"], s["tx_ring_full"], s["acks_sent"]) == (3, 3, 3), shape
        else:
            assert (s["express"], s["tx_ring_full"]) == (5, 0), shape


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("executor", EXECUTORS)
def test_qec_syndromes_in_batches_get_the_tables_corrections_and_short_ones_none(
    executor: str, transport: str
) -> None:
    distance = 5
    dec = LookupTableDecoder(RotatedSurfaceCode(distance))
    code = dec.code
    rng = np.random.default_rng(5)
    good = [
        pack_syndrome(
            rng.integers(0, 2, code.num_x_checks, dtype=np.uint8),
            rng.integers(0, 2, code.num_z_checks, dtype=np.uint8),
        )
        for _ in range(120)
    ]
    # Every seventh one short: a handler error, no reply.
    requests = [r[:-1] if i % 7 == 3 else r for i, r in enumerate(good)]
    for shape in _shapes(executor):
        config = {
            "executor": executor,
            "handler": "qec",
            "qec": {"distance": distance},
            "qp": {"transport": transport},
            "queues": {"rx_depth": 256},
        }
        t = Transceiver(merge(config, shape))
        peer = Peer(t)
        for r in requests:
            assert t.inject(peer.next("SEND_ONLY", r))
        short = sum(len(r) != len(good[0]) for r in requests)
        with t:
            # Every counter the test reads, each published in its turn.
            stats = wait_counters(
                t, messages=len(requests), handler_errors=short, replies=len(requests) - short
            )
            records = receive_n(t, len(requests))
            sent = [parse(f) for f in collect_n(t, len(requests) - short)]
        replies = [p for p in sent if p.opcode & 0x1F == 0x04]  # SEND Onlys
        epochs = t.epoch_stats()
        # The replies in order, their PSNs one after another: a short request used none.
        assert [p.payload for p in replies] == [
            dec.decode_packed(r) for r in requests if len(r) == len(good[0])
        ], shape
        assert [p.psn for p in replies] == [
            psn_add(replies[0].psn, k) for k in range(len(replies))
        ], shape
        for r, c in zip(requests, records, strict=True):
            assert c.request == r
            if len(r) == len(good[0]):
                assert c.reply == dec.decode_packed(r) and not c.handler_error, shape
            else:
                assert c.handler_error and c.reply_len == -2, shape
        assert stats["express"] == len(requests) - 1, shape  # all but the first
        assert epochs["batch_frames"] / max(1, epochs["batches"]) > 2, (shape, epochs)
