"""The loopback far end as an offered load: a schedule, several queues, and its benches.

Goal (issue 16): ``roundtrip(rate=...)`` offers requests open loop, each round trip counted
from the request's due time (so a loop that falls behind shows its queue: no coordinated
omission); a request that goes out late is counted late, one that cannot go out within
``drop_after`` is dropped, counted and never sent; ``queues=N`` deals the schedule out to N
queues, each with its own far end, addressed as the NIC steers (QP or UDP source port); the
far end checks each reply byte for byte against the frame it must be (a template patched with
the PSN and request number), and decodes only what differs. ``bench qec --rate`` and ``bench
roundtrip --completions`` run on that and say what they measured. No assertion here is on
speed: counts, identities between the far end's clocks, and correctness.

Oracles: the schedule's own arithmetic (request i is due i / rate after the start, so its
round trip plus i intervals is its reply's time: the last one's equals the run's elapsed time
less count - 1 intervals); the engine's counters and completion records (what reached the
engine, per queue, in PSN order); the Python lookup-table decoder for every correction.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from engine_helpers import SETUPS, largest_payload, receive_n, running, wait_counters

from roce_transceiver.bench import roundtrip as bench_roundtrip
from roce_transceiver.cli import main as cli_main
from roce_transceiver.commands import bench as bench_command
from roce_transceiver.protocol import psn_add
from roce_transceiver.qec import random_syndromes

QEC = {"handler": "qec", "qec": {"distance": 5}}


@pytest.fixture(scope="module")
def syndromes() -> tuple[list[bytes], list[bytes]]:
    return random_syndromes(5, 256, seed=16)


@pytest.mark.parametrize("setup", SETUPS)
def test_open_loop_round_trips_count_from_the_due_time(setup, syndromes):
    # All requests due at once (1 ns apart) and one in flight at a time: request i waits for
    # reply i-1, so its round trip from its due time holds the queue of those before it.
    executor, far_end = setup
    requests, expected = syndromes
    count = 300
    with running(executor, "UC", far_end, **QEC, completions=False) as t:
        r = t.roundtrip(count=count, payloads=requests, expected=expected, rate=1e9, timeout=20)
    assert (r.status, r.sent, r.received, r.wrong, r.dropped) == ("done", count, count, 0, 0)
    rtt = r.rtt_ns.astype(np.int64)
    # Reply i at start + i ns + rtt[i]: the replies come one after another, so the round
    # trips from the due times only grow (less the 1 ns between due times: a coarse GPU clock
    # may stamp two replies alike), and the last one is the whole run less (count-1) ns.
    assert (np.diff(rtt) >= -1).all()
    assert int(rtt[-1]) == r.elapsed_ns - (count - 1)
    # Late: every request after the first went out a round trip or more after its due time.
    assert count - 1 <= r.late <= count
    assert r.max_lag_ns > 0


@pytest.mark.parametrize("setup", SETUPS)
def test_late_after_is_the_lateness_that_counts(setup, syndromes):
    executor, far_end = setup
    requests, expected = syndromes
    with running(executor, "UC", far_end, **QEC, completions=False) as t:
        r = t.roundtrip(
            count=200, payloads=requests, expected=expected, rate=1e9, late_after=1e3, timeout=20
        )
    # Nothing in a run of seconds is 1000 s late.
    assert (r.status, r.received, r.late) == ("done", 200, 0)


@pytest.mark.parametrize("setup", SETUPS)
def test_requests_that_cannot_go_out_in_time_are_dropped_counted_never_sent(setup, syndromes):
    # 5000 due within 5 us, one in flight, 1 ms to go out each: no loop answers 5000 in a
    # millisecond, so some are dropped, whatever the machine's load.
    executor, far_end = setup
    requests, expected = syndromes
    count = 5000
    # Room for a record of every request that may be sent.
    with running(executor, "UC", far_end, **QEC, queues={"completion_depth": 8192}) as t:
        first_psn = t.config["qp"]["rx_psn"]
        r = t.roundtrip(
            count=count,
            payloads=requests,
            expected=expected,
            rate=1e9,
            drop_after=1e-3,
            timeout=20,
        )
        assert r.status == "done" and r.dropped > 0 and r.sent + r.dropped == count, r
        assert (r.received, r.wrong, r.rtt_ns.size) == (r.sent, 0, r.sent)
        # The engine saw exactly the requests sent, their PSNs without a gap: dropped ones
        # took no PSN.
        wait_counters(t, messages=r.sent, psn_gaps=0, handler_errors=0)
        records = receive_n(t, r.sent) if r.sent else []
        assert [c.psn for c in records] == [psn_add(first_psn, i) for i in range(r.sent)]
        # The next run goes on from there.
        again = t.roundtrip(count=50, payloads=requests, expected=expected, timeout=20)
        assert (again.status, again.received, again.wrong, again.dropped) == ("done", 50, 0, 0)


@pytest.mark.parametrize("steer", ["qp", "udp_sport"])
@pytest.mark.parametrize("setup", SETUPS)
def test_queues_each_take_every_nth_request_as_the_nic_steers(setup, steer, syndromes):
    executor, far_end = setup
    requests, expected = syndromes
    n_queues, count = 4, 1002
    queues = {"count": n_queues, "steer": steer, "completion_depth": 1024}
    with running(executor, "UC", far_end, **QEC, queues=queues) as t:
        first_psn = t.config["qp"]["rx_psn"]
        r = t.roundtrip(
            count=count,
            payloads=requests,
            expected=expected,
            window=8,
            rate=1e5,
            queues=n_queues,
            timeout=30,
        )
        assert (r.status, r.sent, r.received, r.wrong, r.bad_frames) == (
            "done",
            count,
            count,
            0,
            0,
        ), r
        shares = [251, 251, 250, 250]  # the schedule dealt out in turn
        assert [q["received"] for q in r.per_queue] == shares
        assert [q["status"] for q in r.per_queue] == ["done"] * n_queues
        assert r.rtt_ns.size == count
        for q in range(n_queues):
            wait_counters(t, messages=count)
            assert t.queue_stats(q)["messages"] == shares[q], (q, t.queue_stats(q))
        records = receive_n(t, count)
    by_queue = {q: [c for c in records if c.queue == q] for q in range(n_queues)}
    for q, mine in by_queue.items():
        # Each queue's PSNs from the first, its requests its own share's, in turn.
        assert [c.psn for c in mine] == [psn_add(first_psn, i) for i in range(shares[q])]
        assert [c.request for c in mine] == [requests[i % len(requests)] for i in range(shares[q])]
        assert [c.reply for c in mine] == [expected[i % len(expected)] for i in range(shares[q])]


@pytest.mark.parametrize("size", [1, 3, 4, 33, 1000, largest_payload(2048, "UC_SEND_ONLY")])
@pytest.mark.parametrize("setup", SETUPS)
def test_replies_checked_against_their_template_decoded_only_to_learn_the_psn(setup, size):
    # The far end decodes the first reply (it learns the reply PSN there) and compares every
    # other with the frame it must be, PSN, request number and ICRC patched in: a wrong patch
    # would make every reply a slow check (and every request an ICRC error at the engine).
    executor, far_end = setup
    with running(executor, "UC", far_end, completions=False) as t:
        r = t.roundtrip(count=500, size=size, window=4, timeout=20)
        assert (r.status, r.received, r.wrong, r.bad_frames) == ("done", 500, 0, 0), r
        assert r.slow_checks == 1
        wait_counters(t, messages=500, icrc_errors=0)
    with running(executor, "UC", far_end, completions=False) as t:
        payloads = [bytes([i + 1]) * size for i in range(3)]
        expected = [p if i % 2 else bytes(size) for i, p in enumerate(payloads)]
        r = t.roundtrip(count=30, payloads=payloads, expected=expected, timeout=20)
        # Replies that are not the expected ones: each decoded, and counted wrong.
        assert (r.status, r.received, r.wrong) == ("done", 30, 20), r
        assert r.slow_checks >= 20


# --- the benches ----------------------------------------------------------------------------


def test_bench_qec_at_a_rate_with_queues_prints_and_writes_what_it_measured(tmp_path, capsys):
    out = tmp_path / "qec.json"
    argv = ["bench", "qec", "--executor", "cpu", "--rate", "50000", "--count", "2000"]
    argv += ["--queues", "2", "--steer", "udp_sport", "--floor-iterations", "200"]
    status = cli_main([*argv, "--json", str(out)])
    text = capsys.readouterr().out
    assert status == 0, text
    assert "50,000 msgs/s offered" in text and "cpu_thread_pingpong" in text
    r = json.loads(out.read_text())
    assert (r["replies"], r["sent"], r["wrong"], r["dropped"], r["status"]) == (
        2000,
        2000,
        0,
        0,
        "done",
    )
    assert (r["queues"], r["steer"], r["rate_offered"], r["all_done"]) == (
        2,
        "udp_sport",
        50000.0,
        True,
    )
    assert [q["received"] for q in r["per_queue"]] == [1000, 1000]
    # Late: a request that went out more than one interval (20 us) after its due time. So
    # some are late exactly when the latest one lagged more than that; each queue's are the
    # run's, and the printed line says the same.
    assert r["late_us"] == 20.0 and r["late"] <= r["sent"]
    assert (r["late"] > 0) == (r["max_lag_us"] > r["late_us"]), (r["late"], r["max_lag_us"])
    assert sum(q["late"] for q in r["per_queue"]) == r["late"]
    assert f"sustained; {r['late']} late (max lag" in text
    # Open loop: request i is due i / rate after the start and none goes out early, so the
    # run lasts at least (count - 1) intervals: sustained at most count / that, and above 0.
    assert 0 < r["rate_sustained"] <= 2000 / (1999 / 50000), r["rate_sustained"]
    assert r["pool"] == "1024/1024 of the pool minimum weight by pymatching"
    assert r["loop"]["count"] == 2000 and "qec p50 / cpu_thread_pingpong p50" in r["ratios"]


def test_bench_qec_flat_out_with_a_drop_deadline_needs_a_rate(capsys):
    status = cli_main(["bench", "qec", "--executor", "cpu", "--rate", "max", "--drop-us", "5"])
    err = capsys.readouterr().err
    assert status != 0 and "--late-us and --drop-us need a --rate" in err


def test_bench_qec_flat_out_counts_every_correction(tmp_path, capsys):
    out = tmp_path / "max.json"
    argv = ["bench", "qec", "--executor", "cpu", "--rate", "max", "--count", "3000"]
    status = cli_main([*argv, "--window", "16", "--floor-iterations", "200", "--json", str(out)])
    assert status == 0, capsys.readouterr().out
    r = json.loads(out.read_text())
    assert (r["replies"], r["wrong"], r["late"], r["rate_offered"]) == (3000, 0, 0, "max")


def test_bench_qec_window_limit_is_the_clis(capsys):
    # The CLI's range and the bench's (the rings are sized for the window) are one limit.
    assert bench_command.MAX_WINDOW == bench_roundtrip.MAX_WINDOW
    with pytest.raises(ValueError, match="window=16385: must be 1 to 16384"):
        bench_roundtrip.run_qec(executor="cpu", window=16385)


def test_bench_roundtrip_with_completions_checks_every_record(tmp_path, capsys):
    out = tmp_path / "rt.json"
    argv = ["bench", "roundtrip", "--executor", "cpu", "--completions", "--count", "1500"]
    status = cli_main([*argv, "--floor-iterations", "200", "--json", str(out)])
    text = capsys.readouterr().out
    assert status == 0, text
    assert "echo completions p50 / echo p50" in text
    r = json.loads(out.read_text())
    assert set(r["loops"]) == {"echo", "echo completions", "echo completions each"}
    checks = r["completions"]["loops"]
    assert {k: (c["records"], c["records_ok"]) for k, c in checks.items()} == {
        "echo completions": (1500, True),
        "echo completions each": (1500, True),
    }
    assert (
        checks["echo completions"]["completion_batch"],
        checks["echo completions each"]["completion_batch"],
    ) == (128, 1)
    assert r["completions"]["p50_ratio"] > 0 and r["all_done"]
    assert all(r["loops"][k]["replies"] == 1500 for k in r["loops"])


def test_completion_record_check_says_what_is_wrong():
    # The bench's record check is an oracle only if it can say no.
    from roce_transceiver.transceiver import Completion

    payload = bytes(range(8))

    def record(psn: int, i: int) -> Completion:
        data = i.to_bytes(4, "little") + payload[4:]
        return Completion(data, data, 8, 8, None, 0x64, psn, False, False, 0, 0)

    good = [record(10, 0), record(11, 1), record(12, 0)]
    assert bench_roundtrip._check_records(good, [2, 1], payload, 10) == ""
    assert "2 records for 3" in bench_roundtrip._check_records(good[:2], [2, 1], payload, 10)
    assert "PSN 0xc" in bench_roundtrip._check_records(
        [good[0], good[2], good[1]], [2, 1], payload, 10
    )
    wrong = [record(10, 0), record(11, 0), record(12, 0)]
    assert "request 1" in bench_roundtrip._check_records(wrong, [2, 1], payload, 10)


@pytest.mark.gpu
@pytest.mark.parametrize("far_end", ["cpu", "gpu"])
def test_gpu_qec_at_a_million_a_second_every_correction_right(far_end, syndromes):
    # On the H200 (the lead's run): correctness at the target's rate, and the counts that say
    # whether the rate was offered; the figures are bench qec's.
    requests, expected = syndromes
    count = 200_000
    with running("cuda", "UC", far_end, **QEC, completions=False) as t:
        r = t.roundtrip(
            count=count, payloads=requests, expected=expected, window=64, rate=1e6, timeout=60
        )
    assert (r.status, r.sent, r.received, r.wrong, r.bad_frames) == ("done", count, count, 0, 0)
    assert r.slow_checks == 1
    p = r.percentiles("us")
    print(
        f"qec 1 MHz, {far_end} far end: {r.messages_per_s:,.0f} msgs/s, {r.late} late, "
        f"p50 {p.p50:.2f} us, p99 {p.p99:.2f} us"
    )


@pytest.mark.gpu
@pytest.mark.parametrize("steer", ["qp", "udp_sport"])
def test_gpu_far_end_feeds_several_queues(steer, syndromes):
    requests, expected = syndromes
    queues = {"count": 4, "steer": steer}
    with running("cuda", "UC", "gpu", **QEC, completions=False, queues=queues) as t:
        r = t.roundtrip(
            count=40_000, payloads=requests, expected=expected, window=64, queues=4, timeout=60
        )
        assert (r.status, r.received, r.wrong, r.bad_frames) == ("done", 40_000, 0, 0), r
        assert [q["received"] for q in r.per_queue] == [10_000] * 4
        assert r.slow_checks == 4
        for q in range(4):
            wait_counters(t, messages=40_000)
            assert t.queue_stats(q)["messages"] == 10_000


@pytest.mark.gpu
@pytest.mark.parametrize("far_end", ["cpu", "gpu"])
def test_gpu_bench_roundtrip_completions_every_record_exact(tmp_path, capsys, far_end):
    out = tmp_path / "rt.json"
    argv = ["bench", "roundtrip", "--executor", "cuda", "--far-end", far_end, "--completions"]
    status = cli_main([*argv, "--count", "5000", "--floor-iterations", "1000", "--json", str(out)])
    text = capsys.readouterr().out
    assert status == 0, text
    r = json.loads(out.read_text())
    checks = r["completions"]["loops"]
    assert all((c["records"], c["records_ok"]) == (5000, True) for c in checks.values()), checks
    print(f"completions p50 / bare p50, {far_end} far end: {r['completions']['p50_ratio']:.2f}")
