"""Echo round trips through the loopback wire, completion records, and the
Transceiver's life cycle.

Goal: the far end (a CPU thread, or a GPU block with far_end "gpu") sends
requests of every size from 1 byte to the largest that fits a slot, over RC and
UC, one at a time or with a window at a rate, and gets every echo back intact;
the engine's counters add up (one message, one reply per request; RC: one ACK
per request, since the far end sets AckReq; UC: none); receive() hands the host
a record of each message with the bytes that went in and out; the Transceiver
starts once, stops idempotently and within its stop timeout (even while a
round trip runs in another thread), and refuses use after stop.

Oracles: the far end's own check of every reply (``wrong``, ``bad_frames``:
decoded, ICRC checked, payload compared with the request in far_end.h); the
largest payload computed independently from roce_transceiver.protocol.build;
the counters named in counters.h; the payloads and PSNs the test chose.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from engine_helpers import (
    EXECUTORS,
    SETUPS,
    TRANSPORTS,
    Peer,
    collect_n,
    largest_payload,
    make,
    nonzero,
    receive_n,
    running,
    wait_counter,
    wait_counters,
)

from roce_transceiver.protocol import OPCODES, parse, psn_add
from roce_transceiver.transceiver import RoundTrip, TransceiverError

SLOT = 2048  # the default queues.slot_bytes
COUNT = 500
# The largest SEND payload whose frame fits a default slot: IPv4, no VLAN, BTH only.
LARGEST = largest_payload(SLOT, "RC_SEND_ONLY")
SIZES = [1, 4, 32, 1000, LARGEST]


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s}B")
@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("setup", SETUPS)
def test_echo_roundtrip_every_size_all_replies_intact_and_counted(setup, transport, size):
    executor, far_end = setup
    with running(executor, transport, far_end) as t:
        # One first, with a short timeout: a size the engine cannot echo fails fast.
        probe = t.roundtrip(count=1, size=size, timeout=2.0)
        assert (probe.status, probe.received, probe.wrong) == ("done", 1, 0), (
            f"no echo of one {size}-byte request: {probe}; counters: {nonzero(t.stats())}"
        )
        # A window of 8: few context switches per message, so a busy 2-core CI box
        # finishes in time; the ping-pong (window 1) runs in the completion tests.
        r = t.roundtrip(count=COUNT, size=size, window=8, timeout=20.0)
        assert (r.status, r.sent, r.received) == ("done", COUNT, COUNT), (r, t.stats())
        assert r.wrong == 0 and r.bad_frames == 0
        assert r.rtt_ns.shape == (COUNT,)
        n = COUNT + 1
        wait_counters(
            t,
            rx_packets=n,
            messages=n,
            replies=n,
            acks_sent=n if transport == "RC" else 0,
            naks_sent=0,
            handler_errors=0,
            psn_gaps=0,
            duplicates=0,
            tx_ring_full=0,
        )


def test_largest_payload_is_the_one_protocol_build_fits_in_a_slot():
    # Ethernet 14 + IPv4 20 + UDP 8 + BTH 12 + payload (padded to 4) + ICRC 4 <= 2048.
    assert LARGEST == 1988
    assert largest_payload(SLOT, "UC_SEND_ONLY") == LARGEST


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("setup", SETUPS)
def test_windowed_roundtrip_at_a_rate_all_replies_in_order(setup, transport):
    executor, far_end = setup
    count = 2000
    with running(executor, transport, far_end) as t:
        r = t.roundtrip(count=count, size=64, window=16, rate=200_000.0, timeout=20.0)
        assert (r.status, r.received, r.wrong, r.bad_frames) == ("done", count, 0, 0), r
        # 2000 requests at 200k/s take at least 10 ms: the rate was honoured.
        assert r.elapsed_ns >= (count - 1) * 1e9 / 200_000 * 0.99
        wait_counters(t, messages=count, replies=count)


@pytest.mark.parametrize("setup", SETUPS)
def test_consecutive_roundtrips_continue_psns_and_rings(setup):
    executor, far_end = setup
    with running(executor, "RC", far_end, queues={"rx_depth": 8, "tx_depth": 8}) as t:
        for k in range(3):
            r = t.roundtrip(count=50, size=16, window=4, timeout=5.0)
            assert (r.status, r.received, r.wrong, r.bad_frames) == ("done", 50, 0, 0), (k, r)
        wait_counters(t, messages=150, psn_gaps=0, duplicates=0)


@pytest.mark.parametrize("setup", SETUPS)
def test_roundtrip_with_expected_replies_counts_wrong_ones(setup):
    # The far end's check is an oracle only if it can say no: expect something else.
    executor, far_end = setup
    with running(executor, "UC", far_end) as t:
        payloads = [bytes([i + 1]) * 8 for i in range(4)]
        expected = [p if i % 2 else bytes(8) for i, p in enumerate(payloads)]
        r = t.roundtrip(count=8, payloads=payloads, expected=expected, timeout=5.0)
        assert (r.status, r.received, r.wrong) == ("done", 8, 4), r


# ---------------------------------------------------------------- completions


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("setup", SETUPS)
def test_completions_carry_request_reply_opcode_and_psn(setup, transport):
    executor, far_end = setup
    qp = {"rx_psn": 0xFFFFFC}  # the PSNs wrap during the run
    with running(executor, transport, far_end, qp=qp) as t:
        payloads = [bytes([i + 1, i + 2, i + 3]) * 11 for i in range(8)]
        r = t.roundtrip(count=8, payloads=payloads, expected=payloads, timeout=5.0)
        assert (r.status, r.received, r.wrong) == ("done", 8, 0), r
        records = receive_n(t, 8)
        assert [c.request for c in records] == payloads
        assert [c.reply for c in records] == payloads
        assert all(c.request_len == c.reply_len == 33 for c in records)
        assert {c.opcode for c in records} == {OPCODES[f"{transport}_SEND_ONLY"]}
        assert [c.psn for c in records] == [psn_add(qp["rx_psn"], i) for i in range(8)]
        assert all(c.imm is None and not c.handler_error and not c.reply_dropped for c in records)
        for c, p in zip(records, payloads, strict=True):  # numpy views of the same bytes
            for arr, raw in ((c.request_array, c.request), (c.reply_array, c.reply)):
                assert arr.dtype == np.uint8 and not arr.flags.writeable and arr.base is raw
                assert arr.tobytes() == p
        if executor == "cpu":  # one clock; on cuda the far end and the kernel may not share it
            assert all(0 < c.rx_timestamp_ns <= c.done_timestamp_ns for c in records)
        assert t.receive() == []


@pytest.mark.parametrize("executor", EXECUTORS)
def test_completion_of_a_large_message_is_truncated_to_half_the_slot(executor):
    # completion_slot_bytes 1024 - a 40-byte record header, halved: 492 bytes each way.
    with running(executor, "UC") as t:
        peer = Peer(t)
        data = bytes(range(256)) * 4
        assert t.inject(peer.next("SEND_ONLY", data))
        assert parse(collect_n(t, 1)[0]).payload == data
        (c,) = receive_n(t, 1)
        assert (c.request_len, c.reply_len) == (1024, 1024)
        assert c.request == c.reply == data[:492]


# ---------------------------------------------------------------- send()


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("executor", EXECUTORS)
def test_send_transmits_send_only_to_the_peer_at_our_psns(executor, transport):
    with running(executor, transport, qp={"tx_psn": 0xFFFFFF}) as t:
        peer = Peer(t)
        messages = [b"host-%d" % i for i in range(3)]
        for m in messages:
            t.send(m)
        frames = [parse(f) for f in collect_n(t, 3)]
        for p in frames:
            peer.check_addressed_to_peer(p)
        assert [p.payload for p in frames] == messages
        assert [p.opcode_name for p in frames] == [f"{transport}_SEND_ONLY"] * 3
        assert [p.psn for p in frames] == [0xFFFFFF, 0, 1]
        assert all(p.ack_req == (transport == "RC") for p in frames)
        wait_counters(t, host_sends=3, messages=0)


@pytest.mark.parametrize("executor", EXECUTORS)
def test_send_too_large_raises_transceiver_error_naming_the_size(executor):
    with running(executor, "RC") as t, pytest.raises(TransceiverError, match=r"\b4000\b"):
        t.send(bytes(4000))


# ---------------------------------------------------------------- life cycle


@pytest.mark.parametrize("executor", EXECUTORS)
def test_context_manager_starts_and_stops(executor):
    with make(executor) as t:
        assert t.running
        assert t.roundtrip(count=10, size=8, timeout=5.0).status == "done"
    assert not t.running
    with pytest.raises(TransceiverError, match=r"stopped|not running"):
        t.receive()


@pytest.mark.parametrize("executor", EXECUTORS)
def test_stop_is_idempotent(executor):
    t = make(executor).start()
    t.stop()
    t.stop()
    assert not t.running


@pytest.mark.parametrize("executor", EXECUTORS)
def test_stop_before_start_is_harmless(executor):
    t = make(executor)
    t.stop()
    assert not t.running


@pytest.mark.parametrize("executor", EXECUTORS)
def test_start_twice_raises(executor):
    with make(executor) as t, pytest.raises(TransceiverError, match="already started"):
        t.start()


@pytest.mark.parametrize("executor", EXECUTORS)
def test_stats_after_stop_are_the_final_counters(executor):
    t = make(executor).start()
    rt = t.roundtrip(count=50, size=8)
    t.stop()
    final = t.stats()
    assert final["messages"] == rt.received == 50
    assert t.stats() == final  # frozen: the loop and its memory are gone


@pytest.mark.parametrize("call", ["receive", "send", "inject", "collect", "roundtrip"])
@pytest.mark.parametrize("executor", EXECUTORS)
def test_use_after_stop_raises_transceiver_error(executor, call):
    t = make(executor).start()
    t.stop()
    calls = {
        "receive": lambda: t.receive(),
        "send": lambda: t.send(b"late"),
        "inject": lambda: t.inject(Peer(t).next("SEND_ONLY", b"late")),
        "collect": lambda: t.collect(),
        "roundtrip": lambda: t.roundtrip(count=1, size=8, timeout=0.5),
    }
    with pytest.raises(TransceiverError):
        calls[call]()


@pytest.mark.parametrize("executor", EXECUTORS)
def test_send_and_receive_before_start_raise(executor):
    t = make(executor)
    with pytest.raises(TransceiverError, match="not running"):
        t.send(b"early")
    with pytest.raises(TransceiverError, match="not running"):
        t.receive()


@pytest.mark.parametrize("setup", SETUPS)
def test_stop_during_a_roundtrip_in_another_thread_returns_in_time_and_ends_it(setup):
    executor, far_end = setup
    stop_timeout = 2.0
    rt_timeout = 30.0  # longer than the test: stop() must be what ends the run
    t = make(executor, "UC", far_end, stop_timeout_s=stop_timeout).start()
    outcome: dict[str, object] = {}

    def far_end_run() -> None:
        try:
            outcome["result"] = t.roundtrip(count=1_000_000, size=16, timeout=rt_timeout)
        except Exception as e:  # handed to the test thread, which fails with it
            outcome["error"] = e

    thread = threading.Thread(target=far_end_run, name="roundtrip")
    thread.start()
    try:
        wait_counter(t, "messages", 10)  # the roundtrip is under way
        began = time.monotonic()
        t.stop()
        took = time.monotonic() - began
        assert took < stop_timeout, f"stop() took {took:.2f} s (stop_timeout_s={stop_timeout})"
    finally:
        thread.join(timeout=stop_timeout + 10.0)
    assert not thread.is_alive(), "the roundtrip did not end after stop()"
    assert "error" not in outcome, outcome.get("error")
    r = outcome["result"]
    assert isinstance(r, RoundTrip)
    # Either far end sees the stop request and ends its run before anything is freed.
    assert r.status == "stopped", r
    assert 10 <= r.received < 1_000_000


@pytest.mark.parametrize("setup", SETUPS)
def test_the_bench_splits_off_the_far_ends_own_part_of_each_round_trip(setup) -> None:
    """bench roundtrip says what of each round trip is the far end's own (building and
    publishing a request, timed on its clock) and what it spends checking each reply, after
    it: both positive, the first a part of the round trip, in the table's words and the JSON."""
    import io

    from roce_transceiver.bench.roundtrip import run_roundtrip

    executor, far_end = setup
    out = io.StringIO()
    r = run_roundtrip(executor, far_end, count=500, floor_iterations=100, out=out)
    assert r["all_done"], out.getvalue()
    send, check = r["far_end_send_us"], r["far_end_check_us"]
    assert 0 < send < r["loop"]["p50"] / 1e3, r  # the loop's row is in ns
    assert check > 0, r
    assert f"echo: the far end's own part: {send:.2f} us a request" in out.getvalue()
