"""``roce-transceiver bench graph`` and the operator path it measures.

Goal: the bench runs small on the cpu executor and writes JSON with every figure it prints;
RoceTransceiverOp hands a graph every frame of a preloaded stream exactly once, in order and
intact (the bench's load: the engine far ahead of the graph); the latency is taken on one
clock (a frame is never seen before its last packet came); a waiting frames() lets the host's
other threads run and ends when the transceiver stops. The cuda executor with the cupy sink
runs on the GPU machine (-m gpu). Oracles: the sensor's content, zlib, the engine's counters.
"""

from __future__ import annotations

import json
import threading
import time
import zlib

import numpy as np
import pytest
from cli_helpers import run_cli

from roce_transceiver.bench import ingest
from roce_transceiver.transceiver import Transceiver

pytest.importorskip("holoscan", reason="bench graph runs a Holoscan graph")

from roce_transceiver.operators import graph_bench

SMALL_RING = 2048  # 64 KiB frames in 4 KiB WRITEs with the record: 120 frames


def test_bench_graph_runs_small_and_writes_its_json(tmp_path) -> None:
    path = tmp_path / "graph.json"
    r = graph_bench.run(
        "cpu", (65536,), ring=SMALL_RING, latency_frames=5, json_path=str(path), frame_batches=(1,)
    )
    assert r["benchmark"] == "graph" and r["executor"] == "cpu"
    (row,) = r["rows"]
    assert row["frame_bytes"] == 65536 and row["epoch_us"] is None and row["frame_batch"] == 1
    eng, graph, floor = row["engine"], row["graph"], row["graph_floor"]
    assert eng["frames"] == eng["frames_whole"] == graph["frames"] == 120
    assert graph["frames_whole"] == graph["frames_seen"] == 120 and graph["frames_dropped"] == 0
    assert graph["touch"].startswith("host numpy")
    assert eng["frames_per_s"] > 0 and graph["frames_per_s"] > 0 and floor["frames_per_s"] > 0
    assert graph["gbit_per_s"] == pytest.approx(graph["frames_per_s"] * 65536 * 8 / 1e9)
    assert row["graph_over_engine"] == pytest.approx(graph["frames_per_s"] / eng["frames_per_s"])
    assert floor["frames_touched_right"] == floor["frames_seen"] == 120
    assert floor["source_cpu_us_per_frame"] > 0 and graph["op_cpu_us_per_frame"] > 0
    assert graph["op_us_per_frame"] > 0 and graph["op_calls_emitting"] >= 1
    lat = row["last_packet_to_graph"]
    assert lat["frames"] == lat["frames_whole"] == 5
    host = row["last_packet_to_host"]
    assert host["frames"] == host["frames_whole"] == 5 and host["latency"]["count"] == 5
    assert lat["latency"]["count"] == 5 and lat["latency"]["unit"] == "us"
    assert 0 < lat["latency"]["min"] <= lat["latency"]["p50"] <= lat["latency"]["max"]
    assert graph_bench.all_whole(r)
    assert json.loads(path.read_text())["rows"] == r["rows"]


@pytest.mark.parametrize("frame_batch", [1, 7, 64])
def test_the_operator_hands_the_graph_every_frame_once_in_order(frame_batch: int) -> None:
    stream = ingest._stream(graph_bench.PAYLOAD, True, 1, 65536, SMALL_RING)
    _, sent, packets = stream
    config = ingest._config("cpu", graph_bench.PAYLOAD, True, len(sent), 1, 1, 65536, SMALL_RING)
    app = graph_bench._Graph(config, packets, len(sent), frame_batch)
    graph_bench._run_graph(app)
    app.sink.settle()
    seen = app.sink.seen
    assert [s.frame_number for s in seen] == [s.frame_number for s in sent]
    for s, want in zip(seen, sent, strict=True):
        assert s.ok and s.bytes == 65536 and s.crc32 == zlib.crc32(want.content)
        strided = np.frombuffer(want.content, np.uint8)[:: graph_bench.HOST_STRIDE]
        assert s.touch == int(strided.sum(dtype=np.uint64))
    stats = app.roce.final_stats
    assert app.roce.emitted["frames"] == stats["frames"] == len(sent)
    assert stats["frames_dropped"] == 0 and stats["frame_page_busy"] == 0
    # A batch a compute(): no more messages than batches of the frames ready.
    assert app.roce.busy_calls >= -(-len(sent) // frame_batch)
    if frame_batch > 1:
        assert app.roce.busy_calls < len(sent)


def test_the_latency_is_taken_on_one_clock() -> None:
    """The record's rx_last_ns (the loopback's inject, CLOCK_MONOTONIC) and the sink's
    time.monotonic_ns(): each frame seen after its last packet, and not seconds after."""
    config = ingest._config("cpu", graph_bench.PAYLOAD, True, 4, 1, 1, 65536, 1024)
    r = graph_bench._latency({**config, "far_end": "cpu"}, 65536, 10)
    assert r["frames_whole"] == 10
    assert r["latency"]["min"] > 0 and r["latency"]["max"] < 1e6  # microseconds


def test_a_waiting_frames_call_lets_other_threads_run_and_ends_at_stop() -> None:
    t = Transceiver({"executor": "cpu", "handler": "frames", "qp": {"transport": "UC"}})
    t.start()
    ticks = 0
    outcome: list[object] = []

    def wait() -> None:
        try:
            outcome.append(t.frames(timeout=30.0, spin=30.0))
        except Exception as e:  # what the stop made of the call, checked below
            outcome.append(e)

    waiter = threading.Thread(target=wait)
    began = time.monotonic()
    waiter.start()
    while time.monotonic() - began < 0.2:  # this thread runs while the other one spins
        ticks += 1
    t.stop()
    waiter.join(10.0)
    assert not waiter.is_alive(), "frames() went on waiting after stop()"
    assert time.monotonic() - began < 10.0 and ticks > 1000
    assert outcome == [[]]  # what came before the stop (nothing), not an error


def test_frames_refuses_a_negative_spin() -> None:
    with (
        Transceiver({"executor": "cpu", "handler": "frames"}) as t,
        pytest.raises(ValueError, match="spin"),
    ):
        t.frames(timeout=0.0, spin=-1.0)


def test_bench_graph_cli_rejects_what_it_cannot_run(capsys) -> None:
    status, _, err = run_cli(capsys, "bench", "graph", "--ring", "1000")
    assert status == 2 and "--ring" in err and "power of two" in err
    status, _, err = run_cli(capsys, "bench", "graph", "--frame-bytes", "65536,x")
    assert status == 2 and "--frame-bytes" in err
    status, _, err = run_cli(capsys, "bench", "graph", "--executor", "cpu", "--frame-bytes", "1000")
    assert status != 0 and "multiple of 64" in err


@pytest.mark.gpu
def test_bench_graph_on_the_cuda_executor_with_a_cupy_sink(tmp_path) -> None:
    r = graph_bench.run(
        "cuda",
        (1 << 20,),
        epochs_us=(1000,),
        ring=8192,
        latency_frames=10,
        json_path=None,
        frame_batches=(1, 16),
    )
    assert [row["frame_batch"] for row in r["rows"]] == [1, 16]
    for row in r["rows"]:
        assert row["epoch_us"] == 1000 and row["graph"]["touch"] == "gpu byte sum"
        assert row["graph"]["frames"] > 1
        assert row["graph"]["frames_per_s"] > 0 and row["engine"]["frames_per_s"] > 0
        assert row["last_packet_to_graph"]["latency"]["count"] == 10
    assert graph_bench.all_whole(r)
