"""Verbs mode end to end: the peer's WRITE + FETCH_ADD in, the handler, put_signal out.

Goal: the one-sided exchange (docs/verbs_mode.md) serves every request with the Ethernet mode's
handlers, our NIC (the software ConnectX) both halves of the queue pair (it places the peer's
requests and acknowledges them; no engine of ours on the path), for each doorbell mode (NIC
handler), on the cpu executor (host-written WQEs) and on the GPU (GPUNetIO's device API).
Oracles: the peer compares every reply with the request (echo) or with the Python decoder's
correction (qec); the serve loop's, our NIC's and the peer engine's counters must agree with the
number of requests; the peer's requester sees our NIC's answers to crafted requests.
"""

from __future__ import annotations

import io
import json
import re
import struct

import pytest
from conftest import skip_missing
from verbs_helpers import gpu_verbs_or_skip

from roce_transceiver import _core
from roce_transceiver.bench import roundtrip as bench_roundtrip
from roce_transceiver.cli import main as cli_main
from roce_transceiver.protocol import build, parse
from roce_transceiver.qec import random_syndromes
from roce_transceiver.stats import Mean
from roce_transceiver.transceiver import Transceiver, TransceiverError
from roce_transceiver.verbs_mode import (
    OURS_QPN,
    PUT_SIGNALS_NEED_CUDA,
    RING_RKEY,
    RING_VA,
    SERVED_HANDLERS,
    SIGNAL_RKEY,
    SIGNAL_VA,
    VerbsLoopback,
    VerbsModeError,
)


def assert_counts_agree(v: VerbsLoopback, requests: int) -> None:
    s = v.stats()
    assert s["server"]["served"] == requests and s["server"]["completed"] == requests, s
    assert s["ours_atomics"] == requests and s["peer_atomics"] == requests, s
    port = s["port"]
    assert port["wqes"] == 2 * requests and port["completions"] == 2 * requests, s
    assert port["errors"] == 0 and port["naks"] == 0 and not port["in_error"], s
    # Our NIC was the responder: each request's WRITE placed and its FETCH_ADD run and answered.
    assert port["requests"] == 2 * requests and port["acks_sent"] == requests, s
    assert port["naks_sent"] == 0 and port["duplicates"] == 0, s


@pytest.mark.parametrize("size", [1, 32, 248])
def test_echo_every_reply_is_its_request(size):
    with VerbsLoopback("echo", executor="cpu", slot_bytes=256) as v:
        payloads = [bytes((i * 13 + k) & 0xFF for k in range(size)) for i in range(7)]
        rt = v.roundtrip(100, payloads=payloads)
        assert (rt.status, rt.sent, rt.received, rt.wrong, rt.bad_frames) == (
            "done",
            100,
            100,
            0,
            0,
        )
        assert rt.rtt_ns.size == 100 and int(rt.rtt_ns.min()) > 0
        assert v.landed_ns.size == 100 and int(v.landed_ns.min()) > 0
    assert_counts_agree(v, 100)
    assert v.stats()["server"]["state"] == "stopped"


@pytest.mark.parametrize("distance", [3, 5])
def test_qec_corrections_are_the_python_decoders(distance):
    requests, expected = random_syndromes(distance, 64, seed=distance)
    with VerbsLoopback("qec", executor="cpu", distance=distance) as v:
        rt = v.roundtrip(150, payloads=requests, expected=expected)
        assert (rt.status, rt.received, rt.wrong) == ("done", 150, 0)
    assert v.stats()["server"]["handler_errors"] == 0


def test_wrong_expectations_are_counted_not_hidden():
    """The oracle can fail: expecting other corrections than the decoder's counts them wrong."""
    requests, expected = random_syndromes(3, 16, seed=3)
    flipped = [bytes(b ^ 0x01 for b in e) for e in expected]
    with VerbsLoopback("qec", executor="cpu", distance=3) as v:
        rt = v.roundtrip(32, payloads=requests, expected=flipped)
    assert rt.received == 32 and rt.wrong == 32


@pytest.mark.parametrize("nic_handler", SERVED_HANDLERS)
def test_echo_through_each_doorbell_mode(nic_handler):
    """The cpu executor's queue pair rings as each NIC handler's device code does; our NIC
    follows that doorbell (a NIC reading another mode's would find no WQE, or garbage)."""
    with VerbsLoopback("echo", executor="cpu", nic_handler=nic_handler) as v:
        rt = v.roundtrip(60, 48)
        assert (rt.status, rt.received, rt.wrong) == ("done", 60, 0)
    assert v.stats()["nic_handler"] == nic_handler
    assert_counts_agree(v, 60)


def test_auto_nic_handler_is_gpu_sm_db():
    assert VerbsLoopback("echo", executor="cpu").nic_handler == "gpu_sm_db"


def test_our_nic_answers_the_peers_errors_and_goes_on():
    """Requests the serve loop never sees, answered by our NIC on the wire: a duplicate of the
    last FETCH_ADD is replayed (not executed twice: the signal and the loop do not move), a
    WRITE under an unknown rkey is NAKed remote access, one beyond the ring NAKed as well, a
    PSN ahead of the one expected NAKed as a sequence error; the exchange then goes on."""
    ours = {"dest_qp": OURS_QPN, "eth_src": "02:00:00:00:00:02", "eth_dst": "02:00:00:00:00:01"}
    ours |= {"ip_src": "10.0.0.2", "ip_dst": "10.0.0.1"}
    with VerbsLoopback("echo", executor="cpu", slots=4, slot_bytes=64) as v:
        assert v.roundtrip(3, 16).received == 3  # PSNs 0..5; the last FETCH_ADD is PSN 5
        again = build("RC_FETCH_ADD", psn=5, va=SIGNAL_VA, rkey=SIGNAL_RKEY, swap_add=1, **ours)
        bad_key = build(
            "RC_RDMA_WRITE_ONLY", b"k" * 8, psn=6, ack_req=True, va=RING_VA, rkey=7, **ours
        )
        beyond = build(
            "RC_RDMA_WRITE_ONLY",
            b"o" * 8,
            psn=6,
            ack_req=True,
            va=RING_VA + 256,
            rkey=RING_RKEY,
            **ours,
        )
        ahead = build(
            "RC_RDMA_WRITE_ONLY", b"g" * 8, psn=9, ack_req=True, va=RING_VA, rkey=RING_RKEY, **ours
        )
        got = [parse(f) for f in v.exchange([again, bad_key, beyond, ahead], want=4)]
        assert [(p.opcode_name, p.psn, p.aeth.syndrome) for p in got] == [
            ("RC_ATOMIC_ACKNOWLEDGE", 5, 0x1F),
            ("RC_ACKNOWLEDGE", 6, 0x62),
            ("RC_ACKNOWLEDGE", 6, 0x62),
            ("RC_ACKNOWLEDGE", 6, 0x60),
        ]
        assert got[0].atomic_ack_orig == 2  # the value before the third request's signal
        assert v.roundtrip(2, 16).received == 2  # PSN 6 on: the exchange goes on
        port = v.stats()["port"]
        assert struct.unpack("<Q", bytes(v._port.region(1)))[0] == 5
    assert v.stats()["server"]["served"] == 5 and v.stats()["ours_atomics"] == 5
    assert (port["duplicates"], port["out_of_range"], port["psn_gaps"]) == (1, 2, 1)


def test_runs_continue_across_calls_and_slots_wrap():
    with VerbsLoopback("echo", executor="cpu", slots=4, slot_bytes=64) as v:
        for n in (3, 10, 7):  # 20 requests through 4 slots, PSNs continuing between runs
            rt = v.roundtrip(n, 24)
            assert (rt.received, rt.wrong) == (n, 0)
    assert_counts_agree(v, 20)


def test_a_request_the_handler_refuses_is_answered_with_a_status():
    """A syndrome shorter than the code's is refused by the decoder; the loop still answers
    (an empty reply with a status), so the peer's count of replies stays that of requests."""
    with VerbsLoopback("qec", executor="cpu", distance=5) as v:
        rt = v.roundtrip(5, payloads=[b"\x01"], expected=[b"\x00" * 7])
        assert (rt.received, rt.wrong) == (5, 5)  # an empty reply is not a correction
        assert v.stats()["server"]["handler_errors"] == 5
        requests, expected = random_syndromes(5, 8)
        assert v.roundtrip(8, payloads=requests, expected=expected).wrong == 0  # it goes on


def test_a_request_longer_than_its_slot_is_refused_before_it_is_sent():
    with VerbsLoopback("echo", executor="cpu", slot_bytes=64) as v:
        with pytest.raises(VerbsModeError, match="57-byte request does not fit a 64-byte slot"):
            v.roundtrip(1, 57)
        assert v.roundtrip(2, 56).received == 2  # the loop goes on


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"handler": "sink"}, "echo, qec or custom"),
        ({"slots": 0}, "slots 0: must be 1..64"),
        ({"slots": 65}, "slots 65"),
        ({"slot_bytes": 12}, "slot_bytes 12"),
        ({"slot_bytes": 72}, "slot_bytes 72: a multiple of 16"),
        ({"slot_bytes": 2048}, "slot_bytes 2048"),
        ({"nic_handler": "blueflame"}, "nic_handler 'blueflame': one of auto, cpu_proxy"),
        # the configuration's own checks (its schema), as a Transceiver's
        ({"cuda": {"epoch_us": -1}}, "cuda.epoch_us: -1 is below the minimum 0"),
        ({"cuda": {"epochs_in_flight": 5}}, "cuda.epochs_in_flight: 5 is above the maximum 4"),
        ({"cuda": {"epoch_us": 1.5}}, r"cuda.epoch_us: must be int, not float \(1.5\)"),
        ({"handler": "qec", "distance": 4}, "qec.distance"),
        ({"cuda": {"warps": 8}}, "cuda: warps: Verbs mode takes epoch_us and epochs_in_flight"),
    ],
)
def test_bad_settings_are_named(kwargs, message):
    with pytest.raises(VerbsModeError, match=message):
        VerbsLoopback(**{"executor": "cpu", **kwargs})


def test_life_cycle_errors_are_clear():
    v = VerbsLoopback("echo", executor="cpu")
    with pytest.raises(VerbsModeError, match="not running"):
        v.roundtrip(1)
    with pytest.raises(VerbsModeError, match="not started"):
        v.stats()
    v.stop()  # before start: harmless, and final
    with pytest.raises(VerbsModeError, match="starts once"):
        v.start()
    with (
        VerbsLoopback("echo", executor="cpu") as w,
        pytest.raises(VerbsModeError, match="already started"),
    ):
        w.start()
    w.stop()  # idempotent
    with pytest.raises(VerbsModeError, match="not running"):
        w.roundtrip(1)


def test_without_a_serve_loop_the_queue_pair_is_left_to_put_signals():
    """serve=False: peer and port only (the doorbell's floor); the round trip needs the serve
    loop, and put_signals() needs no serve loop beside it and a device-API kernel (cuda)."""
    with VerbsLoopback("echo", executor="cpu", serve=False) as v:
        with pytest.raises(VerbsModeError, match=r"no serve loop \(serve=False"):
            v.roundtrip(1)
        with pytest.raises(VerbsModeError, match="the cpu executor has no device-API kernel"):
            v.put_signals(10)
        s = v.stats()
        assert s["server"] is None and not s["on_gpu"], s
        assert s["port"]["wqes"] == 0 and s["peer_atomics"] == 0, s
    assert v.stats()["server"] is None  # final, after stop()
    with pytest.raises(VerbsModeError, match="put_signals\\(\\): not running"):
        v.put_signals(10)
    with (
        VerbsLoopback("echo", executor="cpu") as w,
        pytest.raises(VerbsModeError, match="the serve loop owns the queue pair"),
    ):
        w.put_signals(10)


def test_cuda_executor_without_a_gpu_says_why():
    if _core.cuda_runtime_info()["gpus"]:
        pytest.skip("a GPU is visible here")
    with pytest.raises(TransceiverError, match="executor 'cuda' cannot run here"):
        VerbsLoopback("echo", executor="cuda")


def test_bench_roundtrip_mode_verbs_reports_each_doorbell_mode_with_the_floor(tmp_path, capsys):
    out = tmp_path / "rt.json"
    argv = ["bench", "roundtrip", "--executor", "cpu", "--mode", "verbs", "--count", "200"]
    status = cli_main([*argv, "--floor-iterations", "200", "--json", str(out)])
    text = capsys.readouterr().out
    assert status == 0, text
    assert "cpu_thread_pingpong" in text
    r = json.loads(out.read_text())
    assert r["mode"] == "verbs" and r["all_done"]
    lines = text.splitlines()
    for nh in SERVED_HANDLERS:  # a row each, side by side, each read against the floor
        assert f"echo verbs {nh}" in text
        verbs = r["loops"][f"echo verbs {nh}"]
        assert (verbs["replies"], verbs["wrong"], verbs["status"]) == (200, 0, "done")
        assert verbs["latency"]["count"] == 200
        assert r["verbs"][nh]["port"]["errors"] == 0 and r["verbs"][nh]["nic_handler"] == nh
        assert f"echo verbs {nh} p50 / cpu_thread_pingpong p50" in r["ratios"]
        assert_put_signal_floor_not_measured(r, lines, "echo", nh)


def assert_put_signal_floor_not_measured(r: dict, lines: list[str], handler: str, nh: str):
    """The cpu executor's doorbell floor: its reason, printed, in the row under the loop's, and
    in the JSON; no ratio to it."""
    reason = f"verbs mode: put_signal floor {nh}: not measured: {PUT_SIGNALS_NEED_CUDA}"
    assert reason in lines, lines
    loop = next(i for i, ln in enumerate(lines) if ln.startswith(f"{handler} verbs {nh} "))
    row = lines[loop + 1]
    assert re.match(rf"put_signal {nh} \(mean\) +- +- +not measured: ", row), row
    assert row.endswith(PUT_SIGNALS_NEED_CUDA), row
    assert r["verbs"][nh]["put_signal_floor_us"] == PUT_SIGNALS_NEED_CUDA
    assert not any("put_signal" in k for k in r["ratios"]), r["ratios"]


def test_bench_qec_mode_verbs_gives_the_put_signal_floors_reason_on_the_cpu(tmp_path, capsys):
    out = tmp_path / "qec.json"
    argv = ["bench", "qec", "--executor", "cpu", "--mode", "verbs", "--count", "100"]
    argv += ["--nic-handler", "cpu_proxy", "--floor-iterations", "100", "--json", str(out)]
    status = cli_main(argv)
    text = capsys.readouterr().out
    assert status == 0, text
    r = json.loads(out.read_text())
    assert list(r["verbs"]) == ["cpu_proxy"] and r["all_done"]
    assert_put_signal_floor_not_measured(r, text.splitlines(), "qec", "cpu_proxy")
    # The floor's put_signal would carry what the serve loop's does: a slot header and a
    # correction (d=5: 2 x 25 bits, a byte each way).
    _, corrections = random_syndromes(5, 1, seed=1)
    assert r["verbs"]["cpu_proxy"]["put_signal"]["bytes"] == 8 + len(corrections[0])


def test_a_measured_put_signal_floor_is_a_mean_beside_its_loop(monkeypatch):
    """Where the floor is measured (cuda), its mean goes in the row under the loop's, in the
    JSON and in a ratio to the loop's p50; stood in for here on the cpu executor."""
    asked = []

    def stand_in(executor, nic_handler, count, size, out):
        asked.append((executor, nic_handler, count, size))
        return Mean(4000.0, count), {"count": count, "floor_us": 4.0}

    monkeypatch.setattr(bench_roundtrip, "_put_signal_floor", stand_in)
    text = io.StringIO()
    r = bench_roundtrip.run_roundtrip(
        executor="cpu",
        mode="verbs",
        nic_handler="gpu_sm_db",
        count=50,
        size=16,
        floor_iterations=100,
        out=text,
    )
    assert asked == [("cpu", "gpu_sm_db", 50, 8 + 16)]
    lines = text.getvalue().splitlines()
    loop = next(i for i, ln in enumerate(lines) if ln.startswith("echo verbs gpu_sm_db "))
    assert lines[loop + 1].split() == ["put_signal", "gpu_sm_db", "(mean)", "-", "50"] + [
        "-"
    ] * 5 + ["4.000"]
    assert r["verbs"]["gpu_sm_db"]["put_signal_floor_us"] == 4.0
    p50_ns = r["loops"]["echo verbs gpu_sm_db"]["latency"]["p50"]
    ratio = r["ratios"]["echo verbs gpu_sm_db p50 / put_signal gpu_sm_db mean"]
    assert ratio == pytest.approx(p50_ns / 4000.0)
    assert any(
        ln.startswith("echo verbs gpu_sm_db: p50 ")
        and ln.endswith("; put_signal gpu_sm_db floor 4.00 us (mean of 50)")
        for ln in lines
    ), lines


def test_bench_roundtrip_one_nic_handler(tmp_path, capsys):
    out = tmp_path / "rt.json"
    argv = ["bench", "roundtrip", "--executor", "cpu", "--mode", "verbs", "--count", "50"]
    argv += ["--nic-handler", "gpu_sm_bf", "--floor-iterations", "100", "--json", str(out)]
    status = cli_main(argv)
    captured = capsys.readouterr()
    assert status == 0, captured.out + captured.err
    r = json.loads(out.read_text())
    assert [k for k in r["loops"] if "verbs" in k] == ["echo verbs gpu_sm_bf"]


def test_bench_roundtrip_runs_a_users_echo_in_verbs_mode_beside_the_built_in_one(tmp_path, capsys):
    out = tmp_path / "rt.json"
    argv = ["bench", "roundtrip", "--executor", "cpu", "--mode", "verbs", "--count", "50"]
    argv += ["--handler", "custom", "--repeats", "1", "--nic-handler", "gpu_sm_db"]
    status = cli_main([*argv, "--floor-iterations", "100", "--json", str(out)])
    captured = capsys.readouterr()
    assert status == 0, captured.out + captured.err
    r = json.loads(out.read_text())
    rows = [k for k in r["loops"] if "verbs" in k]
    assert rows == ["echo verbs gpu_sm_db", "custom verbs gpu_sm_db"], rows
    custom = r["loops"]["custom verbs gpu_sm_db"]
    assert (custom["replies"], custom["wrong"], custom["status"]) == (50, 0, "done")
    assert r["verbs_custom"]["gpu_sm_db"]["server"]["handler_errors"] == 0


@pytest.mark.gpu
@pytest.mark.parametrize("nic_handler", SERVED_HANDLERS)
def test_gpu_echo_through_gpunetio_device_api(nic_handler):
    gpu_verbs_or_skip(nic_handler)
    with VerbsLoopback("echo", executor="cuda", nic_handler=nic_handler) as v:
        assert v.stats()["on_gpu"]
        payloads = [bytes((i * 29 + k) & 0xFF for k in range(32)) for i in range(11)]
        rt = v.roundtrip(2000, payloads=payloads)
        assert (rt.status, rt.received, rt.wrong, rt.bad_frames) == ("done", 2000, 0, 0)
        p = rt.percentiles("us")
        print(f"verbs echo on the GPU, {nic_handler}: p50 {p.p50:.2f} us, p99 {p.p99:.2f} us")
        print(f"  our NIC: {v.stats()['port']}")
    assert_counts_agree(v, 2000)
    assert v.stats()["server"]["state"] == "stopped"


@pytest.mark.gpu
@pytest.mark.parametrize("distance", [3, 5])
def test_gpu_qec_through_gpunetio_device_api(distance):
    gpu_verbs_or_skip()
    requests, expected = random_syndromes(distance, 256, seed=distance)
    with VerbsLoopback("qec", executor="cuda", distance=distance) as v:
        rt = v.roundtrip(1000, payloads=requests, expected=expected)
        assert (rt.status, rt.received, rt.wrong) == ("done", 1000, 0)
    assert_counts_agree(v, 1000)
    assert v.stats()["server"]["handler_errors"] == 0


@pytest.mark.gpu
def test_gpu_bench_gives_each_doorbell_modes_put_signal_floor(tmp_path, capsys):
    """On the cuda executor each NIC handler's row has its doorbell's floor: a kernel's
    put_signals through the device API, in a loopback of their own (the loop's peer counts
    only the loop's replies), a mean, in the table, the JSON and a ratio to the loop."""
    gpu_verbs_or_skip()
    out = tmp_path / "rt.json"
    argv = ["bench", "roundtrip", "--executor", "cuda", "--mode", "verbs", "--count", "500"]
    status = cli_main([*argv, "--floor-iterations", "500", "--json", str(out)])
    text = capsys.readouterr().out
    assert status == 0, text
    r = json.loads(out.read_text())
    bf = _core.gpunetio_info()["blueflame"]
    served = [nh for nh in SERVED_HANDLERS if nh != "gpu_sm_bf" or bf]
    assert list(r["verbs"]) == served
    for nh in served:
        v = r["verbs"][nh]
        floor, ps = v["put_signal_floor_us"], v["put_signal"]
        assert isinstance(floor, float) and floor > 0, (floor, ps)
        assert (ps["completed"], ps["errors"], ps["timed_out"]) == (500, 0, False), ps
        assert floor == pytest.approx(ps["elapsed_ns"] / 500 / 1e3)
        # Its own NIC carried its put_signals alone (the warm-up's too): two WQEs each.
        assert ps["port"]["wqes"] == 2 * (500 + ps["warmup"]) and ps["port"]["errors"] == 0
        # The loop's peer counted the loop's replies only (warm-up and measured run).
        assert v["peer_atomics"] == 1000 and v["server"]["served"] == 1000, v
        assert f"verbs mode: put_signal floor {nh}: {floor:.2f} us a put_signal" in text
        row = re.search(rf"^put_signal {nh} \(mean\) +- +500 +(?:- +){{5}}([0-9.]+)$", text, re.M)
        assert row is not None and float(row.group(1)) == pytest.approx(floor, abs=1e-3), text
        p50_ns = r["loops"][f"echo verbs {nh}"]["latency"]["p50"]
        ratio = r["ratios"][f"echo verbs {nh} p50 / put_signal {nh} mean"]
        assert ratio == pytest.approx(p50_ns / (floor * 1e3))


def run_across_veth(
    executor: str, handler: str, n: int, capture: str, nic_handler: str = "auto"
) -> dict:
    """Verbs mode across a veth pair: our engine and the port on our end, the peer (engine and
    requester) inside a namespace; echo, or qec d=3 checked against the Python decoder."""
    from roce_transceiver.netns import veth_namespace, why_not

    reason = why_not(exec_needed=False)
    if reason:
        skip_missing("netns", reason)
    if handler == "qec":
        payloads, expected = random_syndromes(3, 32, seed=7)
    else:
        payloads = [bytes((i * 31 + k) & 0xFF for k in range(48)) for i in range(5)]
        expected = None
    with (
        veth_namespace() as v,
        VerbsLoopback(
            handler, executor=executor, veth=v, capture=capture, nic_handler=nic_handler
        ) as lb,
    ):
        rt = lb.roundtrip(n, payloads=payloads, expected=expected, timeout=20.0)
    return {"rt": rt, "stats": lb.stats()}


def assert_capture_is_the_exchange(capture: str, n: int) -> None:
    """Our end's capture, dissected by tshark: the peer's n WRITEs (no AckReq) and FETCH_ADDs
    arriving, our NIC's n ATOMIC ACKNOWLEDGEs of them leaving (it is the responder, on the same
    socket), our n reply WRITEs and FETCH_ADDs leaving, the peer engine's n ACKs and n ATOMIC
    ACKNOWLEDGEs arriving."""
    import shutil

    from net_helpers import bth_opcodes

    tshark = shutil.which("tshark")
    if tshark is None:
        skip_missing(
            "tshark", f"tshark not found: the capture {capture} was written but not dissected"
        )
    opcodes = bth_opcodes(tshark, capture)
    counts = {o: opcodes.count(o) for o in set(opcodes)}
    # RC: RDMA WRITE Only 10, FETCH_ADD 20, ACKNOWLEDGE 17, ATOMIC ACKNOWLEDGE 18.
    assert counts == {"10": 2 * n, "20": 2 * n, "17": n, "18": 2 * n}, counts


@pytest.mark.netns
@pytest.mark.parametrize("handler", ["echo", "qec"])
def test_across_a_veth_pair_dissects_as_rc_traffic(tmp_path, handler):
    capture = str(tmp_path / f"verbs_veth_{handler}.pcap")
    r = run_across_veth("cpu", handler, 20, capture)
    rt, stats = r["rt"], r["stats"]
    assert (rt.status, rt.received, rt.wrong, rt.bad_frames) == ("done", 20, 0, 0)
    assert stats["port"]["retransmits"] == 0 and stats["port"]["errors"] == 0, stats
    assert stats["server"]["completed"] == 20 and stats["peer_atomics"] == 20, stats
    assert_capture_is_the_exchange(capture, 20)


@pytest.mark.gpu
@pytest.mark.netns
@pytest.mark.parametrize("handler", ["echo", "qec"])
def test_gpu_across_a_veth_pair(tmp_path, handler):
    """As above with the serve loop on the GPU (GPUNetIO's device API). Where tshark is missing
    (the GPU machine), RT_KEEP_CAPTURE_DIR keeps the capture to dissect elsewhere."""
    import os
    import shutil

    gpu_verbs_or_skip()
    capture = str(tmp_path / f"verbs_veth_gpu_{handler}.pcap")
    r = run_across_veth("cuda", handler, 200, capture)
    rt, stats = r["rt"], r["stats"]
    assert stats["on_gpu"]
    assert (rt.status, rt.received, rt.wrong, rt.bad_frames) == ("done", 200, 0, 0)
    assert stats["port"]["retransmits"] == 0 and stats["port"]["errors"] == 0, stats
    assert stats["server"]["completed"] == 200 and stats["peer_atomics"] == 200, stats
    p = rt.percentiles("us")
    print(f"verbs {handler} across a veth pair on the GPU: p50 {p.p50:.2f} us (a test's timing)")
    keep = os.environ.get("RT_KEEP_CAPTURE_DIR")
    if keep:
        shutil.copy(capture, keep)
    assert_capture_is_the_exchange(capture, 200)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"count": 0}, ValueError, "roundtrip\\(\\): count=0"),
        ({"count": 2**32}, ValueError, "roundtrip\\(\\): count="),
        ({"size": 0}, ValueError, "roundtrip\\(\\): size=0"),
        ({"timeout": -1.0}, ValueError, "roundtrip\\(\\): timeout=-1.0"),
        ({"count": "3"}, TypeError, "count"),
        ({"payloads": ["ab"]}, TypeError, "payloads"),
        ({"payloads": [b"ab", b"abc"]}, TransceiverError, "payloads must be non-empty and of one"),
    ],
)
def test_roundtrip_arguments_are_checked_as_the_transceivers_are(kwargs, error, message):
    """Verbs mode's roundtrip() is the Transceiver's: the same bad value is the same error from
    both."""
    with VerbsLoopback("echo", executor="cpu") as v, Transceiver({"executor": "cpu"}) as t:
        for loop in (v, t):
            with pytest.raises(error, match=message):
                loop.roundtrip(**{"count": 1, **kwargs})
        assert v.roundtrip(2, 8).received == 2  # nothing was sent: the loop goes on


def test_verbs_mode_is_a_transceiver_and_refuses_what_only_the_ethernet_mode_has():
    """One roundtrip(), the Transceiver's: what Verbs mode's requester cannot keep (a window,
    a rate, several queues) and the Ethernet mode's own calls are refused by name, and the
    loop goes on."""
    with VerbsLoopback("echo", executor="cpu") as v:
        assert isinstance(v, Transceiver) and v.running
        for kwargs, name in (({"window": 4}, "window=4"), ({"rate": 1e3}, "rate=")):
            with pytest.raises(VerbsModeError, match=f"roundtrip\\(\\): {name}.*one request"):
                v.roundtrip(5, **kwargs)
        for call in (
            lambda: v.send(b"x"),
            lambda: v.receive(),
            lambda: v.frames(),
            lambda: v.inject(b"x"),
            lambda: v.collect(),
            lambda: v.preload([b"x"]),
            lambda: v.read_region(0),
            lambda: v.queue_stats(0),
            lambda: v.epoch_stats(),
            lambda: v.nic_info(),
        ):
            with pytest.raises(VerbsModeError, match="the Ethernet mode's"):
                call()
        assert v.roundtrip(3, 8).received == 3
    assert not v.running


def test_the_qec_blob_is_the_transceivers():
    """Verbs mode's serve loop takes the decoder table the Transceiver builds (one blob)."""
    from roce_transceiver.qec import engine_table

    v = VerbsLoopback("qec", executor="cpu", distance=5)
    assert v._serve_config["qec_blob"] == v._qec_blob == engine_table(5)
    v.stop()
