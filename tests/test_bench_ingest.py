"""``roce-transceiver bench ingest`` and the preload it stands on.

Goal: the whole stream preloaded into the rx ring before start() reaches the frames handler
intact (every frame whole, CRC-32 of what the sensor sent), the rate comes from the engine's
own timestamps, and the copy floor of the same bytes is in the same result; preload() refuses
what it cannot do, naming it. The GPU rows (device-memory rings) run on the H200 (-m gpu).
Oracles: the sensor's content and zlib (inside the benchmark), the engine's counters.
"""

from __future__ import annotations

import json

import pytest
from cli_helpers import run_cli
from frames_helpers import frames_config, sensor_for

from roce_transceiver.bench import ingest
from roce_transceiver.transceiver import Transceiver, TransceiverError


def test_preload_fills_the_ring_before_start_and_the_engine_takes_it_all() -> None:
    t = Transceiver(frames_config("cpu", metadata=False))
    sensor = sensor_for(t, payload=1024)
    sent = [sensor.frame(n, bytes((n + i) & 0xFF for i in range(4096))) for n in range(3)]
    packets = [p for s in sent for p in s.packets]
    assert t.preload(packets) == len(packets)
    with t:
        got = []
        while len(got) < 3 and (more := t.frames(timeout=5.0)):
            got += more
        assert [f.data.tobytes() for f in got] == [s.content for s in sent]
        assert all(f.ok for f in got)
        assert got[0].done_ns <= got[1].done_ns <= got[2].done_ns and got[0].done_ns > 0
        with pytest.raises(TransceiverError, match="before start"):
            t.preload(packets[:1])


def test_preload_stops_at_the_rings_depth_and_refuses_an_oversized_frame() -> None:
    t = Transceiver({"executor": "cpu", "queues": {"rx_depth": 8}})
    frame = bytes(64)
    assert t.preload([frame] * 12) == 8
    with pytest.raises(ValueError, match="exceeds slot_bytes=2048"):
        t.preload([bytes(4096)])
    t.stop()


def test_bench_ingest_on_the_cpu_executor(tmp_path) -> None:
    path = tmp_path / "ingest.json"
    r = ingest.run("cpu", (1024,), json_path=str(path), latency_frames=0)
    assert r["frame_to_host"] is None
    assert [(row["payload"], row["metadata"]) for row in r["rows"]] == [(1024, False), (1024, True)]
    for row in r["rows"]:
        assert row["frames_whole"] == row["frames"] > 1 and row["frames_dropped"] == 0
        assert row["packets_per_s"] > 0 and row["floor"]["copy_one_thread_gbit_per_s"] > 0
        assert "plain_pass_gbit_per_s" not in row["floor"]  # the cuda executor's floor
    assert json.loads(path.read_text())["rows"] == r["rows"]


def test_bench_ingest_cli_rejects_a_bad_payload(capsys) -> None:
    status, _, err = run_cli(capsys, "bench", "ingest", "--payloads", "64,0")
    assert status == 2 and "--payloads" in err


@pytest.mark.parametrize("warps", ["0", "17", "4,x"])
def test_bench_ingest_cli_rejects_a_crew_it_cannot_run(capsys, warps: str) -> None:
    status, _, err = run_cli(capsys, "bench", "ingest", "--warps", warps)
    assert status == 2 and "--warps" in err


def test_bench_ingest_reports_the_cpu_crews_batches(tmp_path) -> None:
    # The cpu executor's crew of one takes the preloaded stream in batches: their depth
    # and count are in the row's profile; it has no cycle clock, so no cycles.
    r = ingest.run("cpu", (1024,), json_path=str(tmp_path / "ingest.json"), latency_frames=0)
    for row in r["rows"]:
        prof = row["profile"]
        assert prof["batch_depth"] == 32 and prof["batches"] > 0, prof
        assert 1 < prof["frames_per_batch"] <= 32 and "cycles_per_frame" not in prof


@pytest.mark.gpu
def test_bench_ingest_on_the_gpu_with_device_memory_rings(tmp_path) -> None:
    r = ingest.run("cuda", (4096,), json_path=str(tmp_path / "ingest.json"), latency_frames=20)
    for row in r["rows"]:
        assert row["frames_whole"] == row["frames"] and row["packets_per_s"] > 0
        assert row["floor"]["copy_one_warp_gbit_per_s"] > 0
        # The plain per-packet pass of the row's own packets, every one of them passed.
        assert row["floor"]["plain_pass_gbit_per_s"] > 0 and row["floor"]["plain_pass_mpps"] > 0
    # Issue 26: every epoch length, one launch included, records every frame.
    lat = r["frame_to_host"]
    assert [row["epoch_us"] for row in lat["rows"]] == [10_000, 1_000, 0]
    for row in lat["rows"]:
        assert row["frames_whole"] == row["frames"] == 20 and row["latency"]["count"] == 20
    assert lat["floor"]["pinned_pingpong"]["p50"] > 0


def test_bench_ingest_reports_the_frame_end_to_host_latency(tmp_path) -> None:
    """Each frame sent alone and awaited: a latency per frame, next to the floor of the run."""
    path = tmp_path / "ingest.json"
    r = ingest.run("cpu", (4096,), json_path=str(path), latency_frames=8)
    lat = r["frame_to_host"]
    (row,) = lat["rows"]
    assert row["epoch_us"] is None and row["frames_whole"] == row["frames"] == 8
    assert row["latency"]["count"] == 8 and 0 < row["latency"]["p50"] <= row["latency"]["max"]
    assert row["latency"]["unit"] == "us"
    assert lat["floor"]["cpu_thread_pingpong"]["p50"] > 0
    assert json.loads(path.read_text())["frame_to_host"] == lat
