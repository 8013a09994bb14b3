"""``queues.batch`` is the batch depth on every executor (docs/configuration.md).

Goal: with the rx ring full before the loop starts, a pass takes exactly ``queues.batch``
packets (the last pass the rest), whatever the executor, and what comes out does not depend
on where the batches split the stream:
- a sensor stream into the frames handler (the stream step, stream_batch.h), at depths that
  split its frames at every place (1 to 100 packets, frames of 11 and 21 packets): the same
  records, byte-exact pages, CRCs (zlib's of what was sent) and counters at every depth;
- requests with the express path (engine_step on the cpu executor and the one-warp kernel):
  the same replies and counters at every depth.

Oracles: zlib over what the sensor sent; the depth-1 run of the same packets; the count of
batches each depth must take (the cpu executor's own, after stop()).
"""

from __future__ import annotations

import zlib
from typing import Any

import pytest
from engine_helpers import EXECUTORS, Peer, make, wait_counters
from frames_helpers import frames_config
from test_batch_step import content, drain, drain_frames, merged, sized_run

from roce_transceiver.config import load_config
from roce_transceiver.peers.sensor import Sensor
from roce_transceiver.protocol import icrc, parse
from roce_transceiver.transceiver import Transceiver

#: Depths around the frames' lengths and the stream's: every split of a frame.
DEPTHS = (1, 2, 3, 5, 8, 10, 11, 12, 16, 21, 22, 32, 33, 64, 100)
SIZES = (10 * 2048, 20 * 2048, 10 * 2048 + 300, 5000)  # frames of 11, 21, 12 and 4 packets


def _stream_run(executor: str, depth: int) -> dict[str, Any]:
    return sized_run(executor, {"queues": {"batch": depth}}, SIZES, pages=8)


def _record(r: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(v for k, v in sorted(r.items()) if not k.endswith("_ns"))


@pytest.mark.parametrize("executor", EXECUTORS)
def test_a_stream_split_across_batches_of_every_depth_gives_the_same_frames(
    executor: str,
) -> None:
    runs = {depth: _stream_run(executor, depth) for depth in DEPTHS}
    oracle = runs[1]
    for depth, run in runs.items():
        assert [r["crc32"] for r in run["records"]] == [
            zlib.crc32(f.content) for f in run["sent"]
        ], depth
        assert all(r["ok"] for r in run["records"]), depth
        assert [_record(r) for r in run["records"]] == [_record(r) for r in oracle["records"]], (
            depth
        )
        assert run["stats"] == oracle["stats"], depth
        e = run["epochs"]
        if executor == "cpu":  # the thread's own batches, read after stop()
            assert e["batch_depth"] == depth
            assert e["batch_frames"] == run["packets"]
            # Each pass takes `depth` (the ring was full), but where a frame's page must be
            # read for its CRC the batch ends after the frame's end: at least this many.
            assert e["batches"] >= -(-run["packets"] // depth), depth


def _as_rc(packet: bytes) -> bytes:
    """A sensor's UC WRITE Only (0x2A, 0x2B) as the RC one (0x0A, 0x0B), its ICRC made right."""
    out = bytearray(packet)
    at = 14 + 20 + 8  # the BTH's opcode, after Ethernet, IPv4 and UDP
    assert out[at] in (0x2A, 0x2B)
    out[at] -= 0x20
    out[-4:] = icrc(bytes(out)).to_bytes(4, "little")
    return bytes(out)


def _rc_stream_run(executor: str, depth: int) -> dict[str, Any]:
    """The stream of _stream_run over RC: nothing is placed before the commit, so every
    packet of a run the commit takes at once is stored by execute."""
    uc = merged(frames_config(executor, True, pages=8), {"queues": {"rx_depth": 256}})
    queues = {"rx_depth": 256, "slot_bytes": 2304, "batch": depth}
    t = Transceiver(merged(uc, {"qp": {"transport": "RC"}, "queues": queues}))
    sensor = Sensor.for_config(load_config(uc), payload=2048)
    sent = [sensor.frame(n, content(n, size)) for n, size in enumerate(SIZES)]
    packets = [_as_rc(p) for f in sent for p in f.packets]
    for p in packets:
        assert t.inject(p)
    with t:
        records = drain_frames(t, len(packets))
        stats = t.stats()
    return {"sent": sent, "records": records, "stats": stats}


@pytest.mark.parametrize("executor", EXECUTORS)
def test_an_rc_stream_split_across_batches_gives_the_same_frames(executor: str) -> None:
    runs = {depth: _rc_stream_run(executor, depth) for depth in (1, 7, 16, 32, 64)}
    oracle = runs[1]
    for depth, run in runs.items():
        assert [r["crc32"] for r in run["records"]] == [
            zlib.crc32(f.content) for f in run["sent"]
        ], depth
        assert [r["payload_crc"] for r in run["records"]] == [
            zlib.crc32(f.content) for f in run["sent"]
        ], depth  # the page's bytes, as execute stored them
        assert all(r["ok"] for r in run["records"]), depth
        assert [_record(r) for r in run["records"]] == [_record(r) for r in oracle["records"]], (
            depth
        )
        assert run["stats"] == oracle["stats"], depth


def _requests(peer: Peer, n: int) -> list[bytes]:
    return [peer.frame("SEND_ONLY", bytes([i]) * (8 + i % 24), psn=peer.take()) for i in range(n)]


def _echo_run(executor: str, depth: int, n: int) -> dict[str, Any]:
    t = make(executor, "UC", queues={"rx_depth": 256, "batch": depth})
    peer = Peer(t)
    for f in _requests(peer, n):
        assert t.inject(f)
    with t:
        wait_counters(t, rx_packets=n, replies=n)
        sent = drain(lambda: t.collect(max_frames=4096, timeout=0.2))
        stats = t.stats()
    return {"sent": [parse(f) for f in sent], "stats": stats, "epochs": t.epoch_stats()}


@pytest.mark.parametrize("executor", EXECUTORS)
def test_requests_are_taken_queues_batch_a_pass(executor: str) -> None:
    """The cpu executor takes a request queue's ring in express batches of ``queues.batch``
    requests (at most 16, express_batch.h), as a crew of warps does: 40 requests in the ring
    at the start are the first alone (it teaches the express path its header), then 39 in
    batches of min(depth, 16), rounded up; at depth 1 a pass takes one, each a batch."""
    n = 40
    runs = {depth: _echo_run(executor, depth, n) for depth in (1, 3, 8, 16, 32)}
    for depth, run in runs.items():
        assert run["sent"] == runs[1]["sent"], depth
        differ = {
            k for k in run["stats"] if k != "express" and run["stats"][k] != runs[1]["stats"][k]
        }
        assert not differ, (depth, differ)
        if executor == "cpu":
            e = run["epochs"]
            each = min(depth, 16)
            if depth == 1:
                assert (e["batch_depth"], e["batches"], e["batch_frames"]) == (1, n, n)
            else:
                batches = -(-(n - 1) // each)
                assert (e["batch_depth"], e["batches"], e["batch_frames"]) == (each, batches, n - 1)
