"""handler custom on both executors: one source, the same answers, on the cpu executor (the
host compiler's shared object) and on the cuda executor (NVRTC's engine kernel with the handler
in it; @pytest.mark.gpu). Also the frames stream's statistic (handler frames with
custom.source) and what a handler that never returns or faults does to the loop.

Goal: every answer of both examples equals its Python oracle on each executor, with the far end
on the CPU and (cuda) on the GPU; a handler with state keeps it across calls on its queue; the
frames statistic's result arrives with each frame's record; a reply past its capacity is a
handler error and the loop goes on; a handler that never returns makes stop() raise after
stop_timeout_s naming the user handler (no hang); a faulting handler's CUDA error surfaces at
the next call.

Oracles: the repetition code's majority in Python; numpy's count of samples above the threshold;
the call count a stateful handler returns is the request's place in the schedule (window 1).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from engine_helpers import Peer, collect_n, receive_n, running, wait_counters
from frames_helpers import PAGE, frames_config, send, sensor_for
from verbs_helpers import gpu_verbs_or_skip

from roce_transceiver.protocol import parse
from roce_transceiver.repetition import majority_correction
from roce_transceiver.transceiver import (
    HandlerBuildError,
    Transceiver,
    TransceiverError,
)

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "handlers"
MAJORITY = EXAMPLES / "majority_vote.cu"
THRESHOLD = EXAMPLES / "threshold_count.cu"
ECHO = EXAMPLES / "echo.cu"

# (executor, far end); the cuda rows need a GPU. Each start builds its handler (the cuda
# executor's: compiled alone and linked into the engine's kernels, in under a second; a cached
# module after that, in the user's cache as a deployment would).
SETUPS = [
    pytest.param(("cpu", "cpu"), id="cpu"),
    pytest.param(("cuda", "cpu"), id="cuda", marks=pytest.mark.gpu),
    pytest.param(("cuda", "gpu"), id="cuda-gpu-far-end", marks=pytest.mark.gpu),
]
EXECUTORS = [
    pytest.param("cpu", id="cpu"),
    pytest.param("cuda", id="cuda", marks=pytest.mark.gpu),
]


@pytest.mark.parametrize("setup", SETUPS)
@pytest.mark.parametrize("distance", [5, 21])
def test_majority_vote_answers_like_the_python_majority(setup, distance):
    executor, far_end = setup
    rng = np.random.default_rng(distance)
    nbytes = (distance + 7) // 8
    readings = [bytes(rng.integers(0, 256, nbytes, dtype=np.uint8)) for _ in range(400)]
    expected = [majority_correction(r, distance) for r in readings]
    custom = {"source": str(MAJORITY), "entry": "majority_vote", "params": [distance]}
    with running(executor, "UC", far_end, handler="custom", custom=custom) as t:
        r = t.roundtrip(payloads=readings, expected=expected, count=len(readings), timeout=60)
        assert (r.status, r.received, r.wrong) == ("done", len(readings), 0)


@pytest.mark.parametrize("setup", SETUPS)
def test_the_custom_echo_answers_like_the_built_in_one(setup):
    executor, far_end = setup
    custom = {"source": str(ECHO), "entry": "echo"}
    with running(executor, "UC", far_end, handler="custom", custom=custom) as t:
        for size in (1, 32, 333, 1024):
            r = t.roundtrip(count=200, size=size, timeout=60)
            assert (r.status, r.received, r.wrong) == ("done", 200, 0), size
        # Stateless: the express path takes it, as it takes the built-in echo.
        assert t.stats()["express"] > 0


COUNTER = """
#include "rt/handlers/custom.h"
// Replies with how many calls this queue has had (state), from lane 0's count, and the sum of
// the lanes' numbers over the team.
RT_HD int handle(const rt::CustomCall& call) {
  if (call.state_bytes < 8 || call.reply_capacity < 8) return rt::kHandlerError;
  uint32_t* calls = reinterpret_cast<uint32_t*>(call.state);
  const uint32_t lanes = rt::custom_sum(call, call.lane);
  rt::custom_sync(call);
  if (call.lane == 0) {
    calls[0] += 1;
    uint32_t n = calls[0];
    for (int i = 0; i < 4; ++i) call.reply[i] = uint8_t(n >> (8 * i));
    for (int i = 0; i < 4; ++i) call.reply[4 + i] = uint8_t(lanes >> (8 * i));
  }
  rt::custom_sync(call);
  return 8;
}
"""
# Stateless: which team called it (lanes, and the sum of the lanes' numbers), and the request.
TEAM = """
#include "rt/handlers/custom.h"
RT_HD int handle(const rt::CustomCall& call) {
  if (call.reply_capacity < 8 + call.request_len) return rt::kHandlerError;
  const uint32_t sum = rt::custom_sum(call, call.lane);
  for (uint32_t i = call.lane; i < call.request_len; i += call.lanes)
    call.reply[8 + i] = call.request[i];
  if (call.lane == 0)
    for (int i = 0; i < 4; ++i) {
      call.reply[i] = uint8_t(call.lanes >> (8 * i));
      call.reply[4 + i] = uint8_t(sum >> (8 * i));
    }
  rt::custom_sync(call);
  return int(8 + call.request_len);
}
"""


@pytest.mark.parametrize("executor", EXECUTORS)
def test_state_is_kept_from_call_to_call(executor):
    # A handler with state takes the general path (after the ICRC check), where the GPU runs
    # it on the warp's 32 lanes as the express path does (docs/handlers.md, "The team"): their
    # numbers sum to 496; the CPU's team is one lane, its sum 0.
    n = 300
    lanes_sum = 496 if executor == "cuda" else 0
    payloads = [bytes([i & 0xFF]) for i in range(n)]
    expected = [(i + 1).to_bytes(4, "little") + lanes_sum.to_bytes(4, "little") for i in range(n)]
    custom = {"source": COUNTER, "state_bytes": 64}
    with running(executor, "RC", handler="custom", custom=custom) as t:
        r = t.roundtrip(payloads=payloads, expected=expected, count=n, timeout=60)
        assert (r.status, r.received, r.wrong) == ("done", n, 0)


@pytest.mark.parametrize("executor", EXECUTORS)
def test_every_path_calls_a_stateless_handler_on_every_lane_of_the_warp(executor):
    # The team is the warp on the GPU (32 lanes, their numbers summing to 496), one lane on the
    # CPU, on the express path and on the general path alike (the first request, before the
    # express path has its prediction, takes the general path).
    lanes = 32 if executor == "cuda" else 1
    n = 300
    payloads = [bytes([i & 0xFF, 7, 9]) for i in range(n)]
    team = lanes.to_bytes(4, "little") + (lanes * (lanes - 1) // 2).to_bytes(4, "little")
    expected = [team + p for p in payloads]
    with running(executor, "UC", handler="custom", custom={"source": TEAM}) as t:
        r = t.roundtrip(payloads=payloads, expected=expected, count=n, timeout=60)
        stats = t.stats()
    assert (r.status, r.received, r.wrong) == ("done", n, 0)
    assert n - 5 <= stats["express"] < n, stats["express"]  # the first one took the general path
    assert stats["handler_errors"] == 0


OVERLONG = """
#include "rt/handlers/custom.h"
RT_HD int handle(const rt::CustomCall& call) {
  if (call.request_len && call.request[0] % 2) return int(call.reply_capacity) + 1;
  if (call.lane == 0) call.reply[0] = call.request[0];
  rt::custom_sync(call);
  return 1;
}
"""


@pytest.mark.parametrize("executor", EXECUTORS)
def test_a_reply_past_its_capacity_is_a_handler_error_and_the_loop_goes_on(executor):
    with running(executor, "RC", handler="custom", custom={"source": OVERLONG}) as t:
        peer = Peer(t)
        for first in (1, 2, 3, 6):
            assert t.inject(peer.next("SEND_ONLY", bytes([first]) + b"rest"))
        replies = [p for p in map(parse, collect_n(t, 2)) if p.opcode & 0x1F == 0x04]
        assert sorted(p.payload for p in replies) == [b"\x02", b"\x06"]
        recs = receive_n(t, 4)
        assert [c.handler_error for c in recs] == [True, False, True, False]
        wait_counters(t, handler_errors=2, messages=4, replies=2)


@pytest.mark.parametrize("executor", EXECUTORS)
def test_the_frames_statistic_comes_with_each_frame(executor):
    threshold = 1000
    rng = np.random.default_rng(11)
    cfg = frames_config(executor, metadata=True, pages=4)
    cfg["custom"] = {
        "source": str(THRESHOLD),
        "entry": "threshold_count",
        "state_bytes": 8,
        "params": threshold.to_bytes(2, "little").hex(),
    }
    with Transceiver(cfg) as t:
        sensor = sensor_for(t, payload=1024)
        for n, samples in enumerate([1, 512, 4000, PAGE // 2 - 64]):
            frame = rng.integers(0, 2000, samples, dtype=np.uint16)
            sent = sensor.frame(n, frame.astype("<u2").tobytes())
            send(t, sent.packets)
            got = t.frames(timeout=10.0)
            assert len(got) == 1, t.stats()
            f = got[0]
            assert f.ok and f.data.tobytes() == sent.content
            want = (
                np.array([int((frame > threshold).sum()), frame.size], "<u4").tobytes()
                + np.array([n + 1], "<u8").tobytes()
            )
            assert (f.result, f.result_error) == (want, False), n
            f.release()
        wait_counters(t, frames=4, handler_errors=0)


def test_frames_without_a_statistic_have_no_result():
    with Transceiver(frames_config("cpu", metadata=False)) as t:
        sensor = sensor_for(t, payload=1024)
        send(t, sensor.frame(0, bytes(3000)).packets)
        (f,) = t.frames(timeout=10.0)
        assert (f.result, f.result_error) == (None, False)


# A handler that never returns, and one that faults: each run in a process of its own (a
# faulted CUDA context and a loop that never ends are that process's for good).
NEVER_RETURNS = """
#include "rt/handlers/custom.h"
RT_HD int handle(const rt::CustomCall& call) {
  volatile uint32_t spin = 1;
  while (spin) {
#if defined(__CUDA_ARCH__)
    __nanosleep(1000);  // a side effect the compiler keeps
#endif
  }
  return 0;
}
"""
FAULTS = """
#include "rt/handlers/custom.h"
RT_HD int handle(const rt::CustomCall& call) {
  *reinterpret_cast<volatile uint32_t*>(uintptr_t(8)) = call.request_len;
  return 0;
}
"""
SCRIPT = """
import os, sys, time
from roce_transceiver.transceiver import Transceiver, TransceiverError
cfg = {{"executor": "{executor}", "handler": "custom", "stop_timeout_s": 2,
        "custom": {{"source": {source!r}}}}}
t = Transceiver(cfg).start()
from engine_helpers import Peer
print("INJECTED", t.inject(Peer(t).next("SEND_ONLY", b"hello")))
deadline = time.monotonic() + 20
try:
    while time.monotonic() < deadline:
        t.stats()
        t._check()
        time.sleep(0.01)
    print("NO ERROR", {{k: v for k, v in t.stats().items() if k in ("rx_packets", "messages")}})
except TransceiverError as e:
    print("CHECK:", e)
try:
    t.stop()
    print("STOPPED")
except TransceiverError as e:
    print("STOP:", e)
sys.stdout.flush()
os._exit(0)  # no teardown: a loop that never ends, or a faulted context, is left as it is
"""


def _run(executor: str, source: str, tmp_path: Path) -> str:
    script = SCRIPT.format(executor=executor, source=source)
    tests = Path(__file__).resolve().parent
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(tests)},
        check=False,
    )
    return proc.stdout + proc.stderr


@pytest.mark.parametrize("executor", EXECUTORS)
def test_a_handler_that_never_returns_makes_stop_raise_naming_it(executor, tmp_path):
    out = _run(executor, NEVER_RETURNS, tmp_path)
    assert "NO ERROR" in out, out  # nothing faulted: the loop is only busy
    assert "STOP:" in out and "did not stop within 2" in out, out
    assert "user handler (custom.entry)" in out, out


@pytest.mark.gpu
def test_a_faulting_handler_surfaces_as_a_cuda_error(tmp_path):
    out = _run("cuda", FAULTS, tmp_path)
    assert "CHECK:" in out and "cuda" in out.lower(), out
    assert "illegal" in out.lower() or "CUDA_ERROR" in out or "cudaError" in out, out


def test_custom_source_on_the_frames_handler_needs_a_readable_file(tmp_path):
    cfg = frames_config("cpu")
    cfg["custom"] = {"source": str(tmp_path / "none.cu")}
    with pytest.raises(TransceiverError, match=r"custom\.source: cannot read"):
        Transceiver(cfg)


# -- Verbs mode -------------------------------------------------------------------------------


# The serve loop on the cpu executor (a thread) and on the cuda executor (the serve kernel the
# handler is linked into), the GPU's through each doorbell mode.
VERBS_SETUPS = [
    pytest.param(("cpu", "auto"), id="cpu"),
    *(
        pytest.param(("cuda", nic), id=f"cuda-{nic}", marks=pytest.mark.gpu)
        for nic in ("cpu_proxy", "gpu_sm_db", "gpu_sm_bf")
    ),
]


def _verbs_or_skip(executor: str, nic_handler: str) -> None:
    if executor == "cuda":
        gpu_verbs_or_skip(nic_handler)


@pytest.mark.parametrize("setup", VERBS_SETUPS)
def test_verbs_mode_runs_the_majority_vote_on_the_serve_loop(setup):
    from roce_transceiver.verbs_mode import VerbsLoopback

    executor, nic_handler = setup
    _verbs_or_skip(executor, nic_handler)
    distance = 9
    rng = np.random.default_rng(3)
    readings = [bytes(rng.integers(0, 256, 2, dtype=np.uint8)) for _ in range(200)]
    expected = [majority_correction(r, distance) for r in readings]
    custom = {"source": str(MAJORITY), "entry": "majority_vote", "params": [distance]}
    with VerbsLoopback("custom", executor=executor, custom=custom, nic_handler=nic_handler) as v:
        assert v.stats()["on_gpu"] == (executor == "cuda")
        r = v.roundtrip(payloads=readings, expected=expected, count=len(readings), timeout=30)
        assert (r.status, r.received, r.wrong) == ("done", len(readings), 0)
    assert v.stats()["server"]["handler_errors"] == 0


@pytest.mark.parametrize("executor", EXECUTORS)
def test_verbs_mode_keeps_a_handlers_state_and_its_errors(executor):
    # One thread serves, on either executor: the handler's team is one lane (lanes 1, sum 0).
    from roce_transceiver.verbs_mode import VerbsLoopback

    _verbs_or_skip(executor, "auto")
    n = 50
    expected = [(i + 1).to_bytes(4, "little") + bytes(4) for i in range(n)]
    with VerbsLoopback(
        "custom", executor=executor, custom={"source": COUNTER, "state_bytes": 64}
    ) as v:
        r = v.roundtrip(payloads=[b"x"] * n, expected=expected, count=n, timeout=30)
        assert (r.status, r.received, r.wrong) == ("done", n, 0)
    # Without state the handler refuses every request: answered with the handler's status.
    with VerbsLoopback("custom", executor=executor, custom={"source": COUNTER}) as v:
        r = v.roundtrip(payloads=[b"x"] * 5, count=5, timeout=30)
        assert r.received == 5
    assert v.stats()["server"]["handler_errors"] == 5


def test_verbs_mode_names_what_it_cannot_run():
    from roce_transceiver.verbs_mode import VerbsLoopback, VerbsModeError

    with pytest.raises(VerbsModeError, match="with handler 'custom' only"):
        VerbsLoopback("echo", executor="cpu", custom={"source": COUNTER})
    with pytest.raises(VerbsModeError, match=r"custom\.params"):
        VerbsLoopback("custom", executor="cpu", custom={"source": COUNTER, "params": [300]})


# -- sources that are not a handler's: a NUL byte (NVRTC stops reading at it and compiled what
# came before), bytes that are not UTF-8 (the host compiler's log quoted them and its strict
# decoding raised UnicodeDecodeError, naming neither file nor line) ----------------------------

GOOD_ECHO = ECHO.read_bytes()  # a handler that compiles: only what follows it is wrong
NUL_AT_END = GOOD_ECHO + b"\0 and what NVRTC never read\n"
# A byte of Latin-1 in a comment, on line 2.
NOT_UTF8 = GOOD_ECHO.replace(b"\nRT_HD", b"\n// caf\xe9 au lait\nRT_HD", 1)
NOT_UTF8_OFFSET = NOT_UTF8.index(b"\xe9")
NUL_LINE = GOOD_ECHO.count(b"\n") + 1
NOT_UTF8_LINE = NOT_UTF8[:NOT_UTF8_OFFSET].count(b"\n") + 1


@pytest.mark.parametrize("executor", EXECUTORS)
@pytest.mark.parametrize(
    ("text", "message"),
    [
        (b"\0", ":1: error: a NUL byte at byte offset 0: a handler's source is text"),
        (NUL_AT_END, f":{NUL_LINE}: error: a NUL byte at byte offset {len(GOOD_ECHO)}: "),
        (
            NOT_UTF8,
            f":{NOT_UTF8_LINE}: error: byte 0xe9 at byte offset {NOT_UTF8_OFFSET} is not UTF-8",
        ),
    ],
    ids=["only-nul", "nul-after-the-handler", "latin-1"],
)
def test_a_source_that_is_not_text_is_an_error_naming_file_line_and_offset(
    executor, tmp_path, text, message
):
    source = tmp_path / "h.cu"
    source.write_bytes(text)
    cfg = {"executor": executor, "handler": "custom", "custom": {"source": str(source)}}
    with pytest.raises(HandlerBuildError) as e:
        Transceiver(cfg)
    assert str(e.value).startswith(f"{source}{message}"), str(e.value)
    assert "\n" not in str(e.value) and e.value.file == str(source)
    assert e.value.line == int(message.split(":")[1])


def test_the_host_compilers_log_is_read_whatever_its_bytes(tmp_path):
    # A header beside the source (not checked: the compiler reads it) with a Latin-1 byte on
    # the line of an error, which the compiler quotes.
    (tmp_path / "helper.h").write_bytes(b"RT_HD inline int helper() { return caf\xe9; }\n")
    source = tmp_path / "h.cu"
    source.write_bytes(b'#include "helper.h"\n' + GOOD_ECHO)
    cfg = {"executor": "cpu", "handler": "custom", "custom": {"source": str(source)}}
    with pytest.raises(HandlerBuildError) as e:
        Transceiver(cfg)
    assert str(e.value).startswith(f"{tmp_path / 'helper.h'}:1: error: "), str(e.value)
    assert "\ufffd" in e.value.log, "the byte, replaced"
