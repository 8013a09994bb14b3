"""The qec handler inside the running engine: syndromes in, corrections out.

Goal: with handler "qec" (rotated surface code, d = 3 and 5) over RC and UC,
every request the far end sends (one round of syndrome bits) is answered with
the lookup-table correction, and the correction the engine reports for a
message (receive()) is a minimum-weight correction that reproduces the syndrome.

Oracles:
- ``LookupTableDecoder.decode_packed`` (the Python decoder, itself checked
  against brute force and pymatching in test_qec.py) for the expected reply of
  every request, which the far end compares byte for byte (``wrong``);
- pymatching (``Matching`` from the same check matrices, uniform weights: an
  exact minimum-weight decoder for these codes) for the weight of the
  correction of each sampled syndrome; the check matrices for the syndrome a
  correction produces;
- the syndromes come from errors the test draws itself: i.i.d. bit flips from
  a seeded numpy generator, and stim's depolarizing noise on the data qubits
  of a circuit that measures our stabilizers (MPP), independent of our code.
"""

from __future__ import annotations

from functools import cache

import numpy as np
import pymatching
import pytest
from engine_helpers import (
    EXECUTORS,
    SETUPS,
    TRANSPORTS,
    Peer,
    collect_n,
    receive_n,
    running,
    wait_counters,
)

from roce_transceiver.protocol import parse
from roce_transceiver.qec import (
    LookupTableDecoder,
    RotatedSurfaceCode,
    pack_syndrome,
    reply_bytes,
    request_bytes,
    stim_syndromes,
    unpack_correction,
    unpack_syndrome,
)

COUNT = 1000  # one completion record each: under the default completion_depth of 1024
SAMPLE = 200  # of them, checked against pymatching


@cache
def decoder(distance: int) -> LookupTableDecoder:
    return LookupTableDecoder(RotatedSurfaceCode(distance))


def numpy_syndromes(code: RotatedSurfaceCode, n: int, p: float, seed: int) -> list[bytes]:
    """Requests for i.i.d. X and Z flips with probability p on each data qubit."""
    rng = np.random.default_rng(seed)
    ex = (rng.random((n, code.num_data)) < p).astype(np.uint8)
    ez = (rng.random((n, code.num_data)) < p).astype(np.uint8)
    sx = ez.astype(int) @ code.hx.T % 2  # X checks see Z errors
    sz = ex.astype(int) @ code.hz.T % 2  # Z checks see X errors
    return [pack_syndrome(a, b) for a, b in zip(sx, sz, strict=True)]


SOURCES = {"numpy": numpy_syndromes, "stim": stim_syndromes}


@pytest.mark.parametrize("source", list(SOURCES))
@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("distance", [3, 5], ids=lambda d: f"d{d}")
@pytest.mark.parametrize("setup", SETUPS)
def test_qec_replies_equal_lookup_table_and_weights_equal_pymatching(
    setup, distance, transport, source
):
    executor, far_end = setup
    dec = decoder(distance)
    code = dec.code
    requests = SOURCES[source](code, COUNT, 0.08, seed=distance * 10 + len(transport))
    assert all(len(r) == request_bytes(distance) for r in requests)
    # The draw has to exercise the decoder: most requests carry defects.
    assert sum(r != bytes(len(r)) for r in requests) > COUNT // 2
    expected = [dec.decode_packed(r) for r in requests]
    config = {"handler": "qec", "qec": {"distance": distance}}
    with running(executor, transport, far_end, **config) as t:
        r = t.roundtrip(count=COUNT, payloads=requests, expected=expected, window=8, timeout=20.0)
        assert (r.status, r.received, r.wrong, r.bad_frames) == ("done", COUNT, 0, 0), r
        wait_counters(t, messages=COUNT, replies=COUNT, handler_errors=0, completion_drops=0)
        records = receive_n(t, COUNT)

    assert [c.request for c in records] == requests
    assert [c.reply for c in records] == expected
    assert all(c.reply_len == reply_bytes(distance) for c in records)

    # A sample, against pymatching and the check matrices.
    rng = np.random.default_rng(distance)
    picked = rng.choice(COUNT, size=SAMPLE, replace=False)
    sx = np.array([unpack_syndrome(records[i].request, distance)[0] for i in picked])
    sz = np.array([unpack_syndrome(records[i].request, distance)[1] for i in picked])
    cx = np.array([unpack_correction(records[i].reply)[0] for i in picked])
    cz = np.array([unpack_correction(records[i].reply)[1] for i in picked])
    for corr, synd, h in ((cx, sz, code.hz), (cz, sx, code.hx)):
        assert ((corr.astype(int) @ h.T % 2) == synd).all(), "a correction misses its syndrome"
        pm = pymatching.Matching(h).decode_batch(synd)
        assert (corr.sum(axis=1) == pm.sum(axis=1)).all(), "not minimum weight"


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("distance", [3, 5], ids=lambda d: f"d{d}")
@pytest.mark.parametrize("executor", EXECUTORS)
def test_qec_short_request_is_a_handler_error_and_gets_no_reply(executor, distance, transport):
    # A request shorter than one syndrome round (rt/handlers/qec.h: kQecRequestTooShort) is
    # counted, recorded as a handler error, and answered with nothing; the next one is fine.
    dec = decoder(distance)
    good = pack_syndrome(
        np.zeros(dec.code.num_x_checks, np.uint8),
        np.eye(1, dec.code.num_z_checks, 0, dtype=np.uint8)[0],
    )
    with running(executor, transport, handler="qec", qec={"distance": distance}) as t:
        peer = Peer(t)
        assert t.inject(peer.next("SEND_ONLY", good[:-1]))
        assert t.inject(peer.next("SEND_ONLY", good))
        replies = [p for p in map(parse, collect_n(t, 1)) if p.opcode & 0x1F == 0x04]
        assert [p.payload for p in replies] == [dec.decode_packed(good)]
        bad, ok = receive_n(t, 2)
        assert bad.handler_error and bad.reply_len == -2 and bad.request == good[:-1]
        assert not ok.handler_error and ok.reply == dec.decode_packed(good)
        wait_counters(t, handler_errors=1, messages=2, replies=1)
