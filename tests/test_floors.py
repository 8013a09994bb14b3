"""Latency floors: the samples they return, and the statistics printed from them.

Goal: every round-trip benchmark prints these floors beside its own figure (DESIGN.md section 8),
so each floor must return one positive, finite time per requested iteration, fail with a clear
RuntimeError (never hang) where it cannot run, and be summarised correctly.
Oracles: numpy's percentile and mean for ``Percentiles``; the requested iteration count; for the
GPU floors (``-m gpu``, the H200), only sanity orderings between floors, never absolute timings.
"""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest

from roce_transceiver import _core
from roce_transceiver.bench import floors
from roce_transceiver.bench.floors import Percentiles, measure_floors
from roce_transceiver.stats import Mean

GPU_FLOORS = (
    "pinned_pingpong",
    "device_block_pingpong",
    "launch_per_message",
    "launch_per_message_graph",
)


def _gpu_visible() -> bool:
    return bool(_core.cuda_runtime_info()["gpus"])


def _check_samples(samples: list[float], count: int) -> None:
    assert len(samples) == count
    assert all(math.isfinite(s) and s > 0 for s in samples), min(samples)


# ---- host-only floor --------------------------------------------------------------------------


def test_cpu_thread_pingpong_returns_one_positive_finite_sample_per_iteration():
    _check_samples(_core.floor_cpu_thread_pingpong(2000), 2000)


def test_cpu_thread_pingpong_single_iteration():
    _check_samples(_core.floor_cpu_thread_pingpong(1, 5.0), 1)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"iterations": 0}, "iterations=0: must be between 1 and"),
        ({"iterations": _core.FLOOR_MAX_ITERATIONS + 1}, "must be between 1 and"),
        ({"iterations": 10, "timeout_s": 0.0}, "timeout_s=0 s: must be more than 0"),
        ({"iterations": 10, "timeout_s": math.inf}, "timeout_s=inf s"),
    ],
)
def test_cpu_thread_pingpong_rejects_bad_arguments_naming_them(kwargs, message):
    with pytest.raises(ValueError, match=r"^cpu_thread_pingpong: ") as e:
        _core.floor_cpu_thread_pingpong(**kwargs)
    assert message in str(e.value)


def test_measure_floors_cpu_gives_percentiles_in_ns():
    results = measure_floors(["cpu_thread_pingpong"], 500, 2.0)
    r = results["cpu_thread_pingpong"]
    assert isinstance(r, Percentiles)
    assert (r.count, r.unit) == (500, "ns")
    assert 0 < r.min <= r.p50 <= r.p99 <= r.p999 <= r.max


def test_measure_floors_rejects_unknown_names():
    with pytest.raises(ValueError, match="unknown floor 'nope': choose from cpu_thread_pingpong"):
        measure_floors(["nope"], 10, 1.0)


# ---- Percentiles ------------------------------------------------------------------------------


def test_percentiles_match_numpy_on_known_data():
    data = np.random.default_rng(7).lognormal(mean=7.0, sigma=0.5, size=12_345)
    p = Percentiles.from_samples(data)
    want = np.percentile(data, [50, 99, 99.9])
    assert (p.p50, p.p99, p.p999) == tuple(float(x) for x in want)
    assert (p.min, p.max, p.mean) == (data.min(), data.max(), data.mean())
    assert (p.count, p.unit) == (12_345, "ns")


def test_percentiles_by_hand_on_one_to_a_thousand():
    # Linear interpolation between ranks: p50 of 1..1000 is 500.5, p99 is 990.01, p99.9 999.001.
    p = Percentiles.from_samples(list(range(1, 1001)), "us")
    assert p.p50 == pytest.approx(500.5)
    assert p.p99 == pytest.approx(990.01)
    assert p.p999 == pytest.approx(999.001)
    assert (p.min, p.max, p.mean, p.count, p.unit) == (1.0, 1000.0, 500.5, 1000, "us")


def test_percentiles_convert_ns_to_us_and_back():
    p = Percentiles.from_samples([1000.0, 2000.0, 4000.0])
    us = p.to("us")
    assert (us.min, us.p50, us.max, us.mean, us.unit) == (1.0, 2.0, 4.0, pytest.approx(7 / 3), "us")
    back = us.to("ns")
    assert (back.min, back.p50, back.max, back.unit) == (p.min, p.p50, p.max, "ns")


@pytest.mark.parametrize(
    ("samples", "unit", "message"),
    [
        ([], "ns", "non-empty"),
        ([[1.0, 2.0]], "ns", "1-D"),
        ([1.0, math.nan], "ns", "1 non-finite"),
        ([1.0], "ms", "unit='ms'"),
    ],
)
def test_percentiles_reject_what_they_cannot_summarise(samples, unit, message):
    with pytest.raises(ValueError, match=message):
        Percentiles.from_samples(samples, unit)


# ---- table, summary, command line -------------------------------------------------------------


def test_table_shows_figures_in_us_and_reasons_for_unmeasured_floors():
    results: dict[str, Percentiles | str] = {
        "cpu_thread_pingpong": Percentiles.from_samples([100.0, 200.0, 300.0]),
        "pinned_pingpong": "pinned_pingpong: no usable CUDA GPU (because)",
    }
    lines = floors.format_table(results).splitlines()
    assert lines[0].split()[:3] == ["floor", "clock", "n"]
    assert lines[0].endswith("(us)")
    assert lines[1].split()[:5] == ["cpu_thread_pingpong", "host", "3", "0.100", "0.200"]
    assert lines[2].endswith("not measured: pinned_pingpong: no usable CUDA GPU (because)")
    assert floors.summary_line(results) == (
        "floors: cpu_thread_pingpong p50 0.20 us; pinned_pingpong not measured"
    )


def test_table_shows_only_the_mean_of_a_figure_timed_in_total():
    """A Mean (a loop that times its whole run, as put_signal_loop does) prints its count and
    mean; its order statistics are '-', not numbers it does not have."""
    results = {
        "cpu_thread_pingpong": Percentiles.from_samples([100.0, 200.0, 300.0]),
        "put_signal gpu_sm_db (mean)": Mean(5120.0, 2000),
    }
    lines = floors.format_table(results).splitlines()
    cells = lines[2].split()
    assert cells[:3] == ["put_signal", "gpu_sm_db", "(mean)"]
    assert cells[3:] == ["-", "2000", "-", "-", "-", "-", "-", "5.120"]
    assert Mean(5120.0, 2000).to("us") == Mean(5.12, 2000, "us")
    assert Mean(5.12, 2000, "us").as_dict() == {"mean": 5.12, "count": 2000, "unit": "us"}
    with pytest.raises(ValueError, match="unit='s'"):
        Mean(1.0, 1).to("s")


def test_main_prints_the_table_and_writes_json(tmp_path, capsys):
    path = tmp_path / "floors.json"
    assert (
        floors.main(["--iterations", "300", "--floors", "cpu_thread_pingpong", "--json", str(path)])
        == 0
    )
    out = capsys.readouterr().out.splitlines()
    assert out[-1].startswith("floors: cpu_thread_pingpong p50 ")
    doc = json.loads(path.read_text())
    cpu = doc["floors"]["cpu_thread_pingpong"]
    assert (doc["benchmark"], doc["iterations"], doc["warmup"]) == (
        "floors",
        300,
        _core.FLOOR_WARMUP,
    )
    assert (cpu["count"], cpu["unit"], cpu["clock"]) == (300, "ns", "host")
    assert doc["summary"] == out[-1]


def test_main_rejects_unknown_floor_names(capsys):
    with pytest.raises(SystemExit):
        floors.main(["--floors", "cpu_thread_pingpong,bogus"])
    assert "bogus: not a floor" in capsys.readouterr().err


# ---- GPU floors without a GPU -----------------------------------------------------------------


@pytest.mark.skipif(_gpu_visible(), reason="a GPU is visible: the GPU floors run (see -m gpu)")
@pytest.mark.parametrize(
    "call",
    [
        lambda: _core.floor_pinned_pingpong(10, 1.0),
        lambda: _core.floor_device_block_pingpong(10, 1.0),
        lambda: _core.floor_launch_per_message(10, 32, False),
        lambda: _core.floor_launch_per_message(10, 32, True),
    ],
    ids=GPU_FLOORS,
)
def test_gpu_floors_without_a_gpu_raise_runtime_error_saying_why(call):
    with pytest.raises(RuntimeError) as e:
        call()
    message = str(e.value)
    assert message.split(":")[0] in {*GPU_FLOORS, "launch_per_message(graph)"}
    assert "no CUDA support" in message or "no usable CUDA GPU" in message


@pytest.mark.skipif(_gpu_visible(), reason="a GPU is visible: the GPU floors run (see -m gpu)")
def test_measure_floors_without_a_gpu_gives_reasons_not_figures():
    results = measure_floors(list(GPU_FLOORS), 10, 1.0)
    assert set(results) == set(GPU_FLOORS)
    for name, r in results.items():
        assert isinstance(r, str), name
        assert "no CUDA support" in r or "no usable CUDA GPU" in r


# ---- the plain per-packet pass ----------------------------------------------------------------

# A queue's QP and region as the ingest benchmark's config gives them: the floor's target.
_PLAIN = {"qpn_first": 0x100, "qpn_count": 1, "rkey": 7, "region_va": 1 << 20, "region_bytes": 4096}


def _plain_pass(packets=(bytes(64),), slot_bytes=256, blocks=1, threads=32, **kw):
    return _core.floor_plain_pass(list(packets), slot_bytes, blocks, threads, **{**_PLAIN, **kw})


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"packets": ()}, "no packets"),
        ({"packets": (bytes(300),)}, "packet 0 is 300 bytes: must be between 1 and slot_bytes=256"),
        ({"packets": (bytes(64), b"")}, "packet 1 is 0 bytes"),
        ({"slot_bytes": 200}, "slot_bytes=200: must be a multiple of 16"),
        ({"blocks": 0}, "blocks=0: must be between 1 and"),
        ({"threads": 48}, "threads=48: must be a multiple of 32 between 32 and 1024"),
        ({"threads": 2048}, "threads=2048"),
        ({"qpn_count": 0}, "must be at least one, all below 2^24"),
        ({"qpn_first": (1 << 24) - 1, "qpn_count": 2}, "all below 2^24"),
        ({"region_bytes": 0}, "region_bytes=0"),
        ({"region_bytes": (1 << 32) + 1}, "must be between 1 and 4294967296"),
        ({"repeats": 0}, "repeats=0: must be between 1 and 1000"),
    ],
)
def test_plain_pass_rejects_bad_arguments_in_every_build(kwargs, message):
    # Checked before anything touches CUDA: the same ValueError with or without a GPU.
    with pytest.raises(ValueError, match=r"^plain_pass: ") as e:
        _plain_pass(**kwargs)
    assert message in str(e.value)


@pytest.mark.skipif(_gpu_visible(), reason="a GPU is visible: the plain pass runs (see -m gpu)")
def test_plain_pass_without_a_gpu_raises_runtime_error_saying_why():
    with pytest.raises(RuntimeError, match=r"^plain_pass: ") as e:
        _plain_pass()
    assert "no CUDA support" in str(e.value) or "no usable CUDA GPU" in str(e.value)


@pytest.fixture(scope="module")
def ingest_stream():
    """20 whole frames (320 packets) of the ingest benchmark's 4 KiB stream and its config."""
    from roce_transceiver.bench import ingest
    from roce_transceiver.config import load_config

    _, sent, _ = ingest._stream(4096, False)
    cfg = load_config(ingest._config("cuda", 4096, False, len(sent), 1))
    frames = sent[:20]
    return cfg, [p for s in frames for p in s.packets], sum(len(s.content) for s in frames)


def _plain_pass_of(cfg, packets, threads=128):
    fr = cfg["frames"]
    return _core.floor_plain_pass(
        packets,
        cfg["queues"]["slot_bytes"],
        1,
        threads,
        qpn_first=cfg["qp"]["qpn"],
        qpn_count=1,
        rkey=fr["rkey"],
        region_va=fr["va"],
        region_bytes=fr["pages"] * fr["page_bytes"],
        repeats=3,
    )


@pytest.mark.gpu
def test_plain_pass_passes_every_packet_of_the_ingest_stream(ingest_stream):
    cfg, packets, payload_bytes = ingest_stream
    r = _plain_pass_of(cfg, packets)
    assert (r["good"], r["bad"], r["bytes"]) == (len(packets), 0, payload_bytes)
    assert math.isfinite(r["ns"]) and r["ns"] > 0


@pytest.mark.gpu
def test_plain_pass_counts_a_corrupted_payload_and_a_foreign_qp_bad(ingest_stream):
    cfg, packets, payload_bytes = ingest_stream
    packets = list(packets)
    corrupt = bytearray(packets[5])
    corrupt[-10] ^= 0x01  # a payload byte (the last 4 are the ICRC): the ICRC no longer matches
    packets[5] = bytes(corrupt)
    r = _plain_pass_of(cfg, packets, threads=32)
    assert (r["good"], r["bad"]) == (len(packets) - 1, 1)
    assert r["bytes"] == payload_bytes - 4096
    # The same packets as another QP's: the header checks refuse every one.
    fr = cfg["frames"]
    other = _core.floor_plain_pass(
        packets,
        cfg["queues"]["slot_bytes"],
        2,
        64,
        qpn_first=cfg["qp"]["qpn"] + 1,
        qpn_count=4,
        rkey=fr["rkey"],
        region_va=fr["va"],
        region_bytes=fr["pages"] * fr["page_bytes"],
        repeats=1,
    )
    assert (other["good"], other["bad"], other["bytes"]) == (0, len(packets), 0)


# ---- GPU floors (the H200) --------------------------------------------------------------------


@pytest.mark.gpu
def test_pinned_pingpong_returns_one_positive_sample_per_iteration():
    _check_samples(_core.floor_pinned_pingpong(3000, 2.0), 3000)


@pytest.mark.gpu
def test_device_block_pingpong_returns_one_positive_sample_per_iteration():
    _check_samples(_core.floor_device_block_pingpong(3000, 2.0), 3000)


@pytest.mark.gpu
@pytest.mark.parametrize("graph", [False, True], ids=["launch", "graph"])
@pytest.mark.parametrize("size", [1, 32, 4096])
def test_launch_per_message_echoes_and_returns_one_sample_per_message(size, graph):
    _check_samples(_core.floor_launch_per_message(500, size, graph), 500)


@pytest.mark.gpu
def test_gpu_floors_order_sanely():
    # Device-memory ping-pong needs no PCIe crossing, launch + sync needs several: the fastest
    # device round trip must beat the typical launch. No absolute figure is asserted.
    results = measure_floors(
        ["device_block_pingpong", "pinned_pingpong", "launch_per_message"], 2000, 2.0
    )
    r = {name: v for name, v in results.items() if isinstance(v, Percentiles)}
    assert set(r) == set(results), results
    assert r["device_block_pingpong"].min < r["launch_per_message"].p50
    assert r["device_block_pingpong"].min < r["pinned_pingpong"].p50
    assert all(v.count == 2000 for v in r.values())


@pytest.mark.gpu
def test_floors_are_repeatable_in_one_process():
    # Each call frees what it allocated and leaves no kernel running: a second call works.
    for _ in range(3):
        _check_samples(_core.floor_pinned_pingpong(200, 2.0), 200)
        _check_samples(_core.floor_device_block_pingpong(200, 2.0), 200)


@pytest.mark.gpu
def test_pinned_pingpong_timeout_raises_naming_the_iteration_and_recovers():
    # 1 us is shorter than the first round trip, which includes the kernel's launch: the host
    # gives up, says which round trip was outstanding, stops the kernel and frees its memory.
    with pytest.raises(RuntimeError) as e:
        _core.floor_pinned_pingpong(1000, 1e-6)
    assert re.match(
        r"pinned_pingpong: kernel did not answer (warm-up )?iteration \d+ of \d+ within 1e-06 s \(",
        str(e.value),
    ), str(e.value)
    _check_samples(_core.floor_pinned_pingpong(100, 2.0), 100)
