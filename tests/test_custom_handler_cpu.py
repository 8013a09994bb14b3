"""handler custom on the cpu executor: the user's own function, compiled by the host compiler.

Goal: both shipped examples (examples/handlers/) answer every request the existing far end sends
with what a Python oracle computes for it; the build is cached (a second start compiles nothing);
a handler that does not compile, has the wrong signature or returns more than its capacity gives
the documented error; the core is told which build its executor is missing.

Oracles: the repetition code's majority written out in Python (bit counts of the readings), and
numpy's count of samples above the threshold; the frame count is the request's place in the
schedule (window 1: in order).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from engine_helpers import TRANSPORTS, Peer, collect_n, receive_n, running, wait_counters

from roce_transceiver import _core
from roce_transceiver.config import core_config, load_config
from roce_transceiver.custom_handler import build_host_handler, cache_dir
from roce_transceiver.protocol import parse
from roce_transceiver.repetition import majority_correction
from roce_transceiver.schema import ConfigError
from roce_transceiver.transceiver import HandlerBuildError, Transceiver, TransceiverError

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "handlers"
MAJORITY = EXAMPLES / "majority_vote.cu"
THRESHOLD = EXAMPLES / "threshold_count.cu"


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    """Every test compiles into its own cache: none sees another's (or the user's) libraries."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("distance", [3, 11])
def test_majority_vote_corrections_equal_the_python_majority(transport, distance):
    rng = np.random.default_rng(distance)
    nbytes = (distance + 7) // 8
    # Readings: mostly agreeing copies with a few flips, and random ones.
    readings = [bytes(rng.integers(0, 256, nbytes, dtype=np.uint8)) for _ in range(300)]
    expected = [majority_correction(r, distance) for r in readings]
    custom = {"source": str(MAJORITY), "entry": "majority_vote", "params": [distance]}
    with running("cpu", transport, handler="custom", custom=custom) as t:
        r = t.roundtrip(payloads=readings, expected=expected, count=len(readings), timeout=30)
        assert (r.status, r.received, r.wrong) == ("done", len(readings), 0)
        wait_counters(t, messages=len(readings), replies=len(readings), handler_errors=0)


def test_threshold_count_counts_samples_above_and_frames_seen():
    # A message handler: handler frames is kept by the engine itself (engine/frames.h) and
    # calls no handler, so the statistic runs on each message (docs/handlers.md).
    threshold = 1000
    rng = np.random.default_rng(7)
    frames = [rng.integers(0, 2000, 64, dtype=np.uint16) for _ in range(200)]
    payloads = [f.astype("<u2").tobytes() for f in frames]
    expected = [
        np.array([int((f > threshold).sum()), f.size], "<u4").tobytes()
        + np.array([i + 1], "<u8").tobytes()
        for i, f in enumerate(frames)
    ]
    custom = {
        "source": str(THRESHOLD),
        "entry": "threshold_count",
        "state_bytes": 8,
        "params": threshold.to_bytes(2, "little").hex(),
    }
    with running("cpu", "RC", handler="custom", custom=custom) as t:
        r = t.roundtrip(payloads=payloads, expected=expected, count=len(payloads), timeout=30)
        assert (r.status, r.received, r.wrong) == ("done", len(payloads), 0)


INLINE_ECHO = """
RT_HD int echo(const rt::CustomCall& call) {
  if (call.request_len > call.reply_capacity) return rt::kHandlerError;
  for (uint32_t i = 0; i < call.request_len; ++i) call.reply[i] = call.request[i];
  return int(call.request_len);
}
"""


def test_second_start_finds_the_library_in_the_cache(tmp_path):
    custom = {"source": INLINE_ECHO, "entry": "echo"}
    first = build_host_handler(INLINE_ECHO, name="custom.source", entry="echo")
    assert not first.cached and first.library.parent == cache_dir()
    stamp = first.library.stat().st_mtime_ns
    again = build_host_handler(INLINE_ECHO, name="custom.source", entry="echo")
    assert again.cached and again.library == first.library
    assert first.library.stat().st_mtime_ns == stamp, "rebuilt, not taken from the cache"
    other = build_host_handler(INLINE_ECHO + "\n", name="custom.source", entry="echo")
    assert not other.cached and other.library != first.library, "another source, same key"
    # The Transceiver takes the same library, and its inline echo runs.
    with running("cpu", "RC", handler="custom", custom=custom) as t:
        r = t.roundtrip(count=50, size=40)
        assert (r.status, r.received, r.wrong) == ("done", 50, 0)
    assert sorted(p.name for p in cache_dir().glob("*.so")) == sorted(
        {first.library.name, other.library.name}
    )


def test_compile_error_names_the_file_and_line(tmp_path):
    bad = tmp_path / "bad.cu"
    bad.write_text(
        '#include "rt/handlers/custom.h"\n\n'
        "RT_HD int handle(const rt::CustomCall& call) {\n"
        "  return call.no_such_member;\n"
        "}\n"
    )
    with pytest.raises(HandlerBuildError) as e:
        Transceiver({"handler": "custom", "executor": "cpu", "custom": {"source": str(bad)}})
    assert str(e.value).startswith(f"{bad}:4: error: "), str(e.value)
    assert "\n" not in str(e.value)
    assert e.value.file == str(bad) and e.value.line == 4
    assert "no_such_member" in e.value.log


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("RT_HD int handle(int x) { return x; }\n", "entry 'handle' has the wrong signature"),
        ("RT_HD int other(const rt::CustomCall&) { return 0; }\n", "no entry 'handle'"),
    ],
    ids=["wrong-signature", "no-entry"],
)
def test_wrong_entry_is_named(source, message):
    with pytest.raises(HandlerBuildError) as e:
        Transceiver({"handler": "custom", "executor": "cpu", "custom": {"source": source}})
    assert str(e.value).startswith(f"custom.source: {message}"), str(e.value)
    assert "want: RT_HD int handle(const rt::CustomCall& call)" in str(e.value)


OVERLONG = """
RT_HD int handle(const rt::CustomCall& call) {
  // An odd first byte: claim one byte more than there is room for.
  if (call.request_len && call.request[0] % 2) return int(call.reply_capacity) + 1;
  if (call.request_len && call.request[0] == 2) return -7;  // neither kNoReply nor an error
  if (call.request_len && call.request[0] == 4) return rt::kNoReply;
  call.reply[0] = call.request[0];
  return 1;
}
"""


def test_overlong_reply_is_a_handler_error_and_the_loop_goes_on():
    with running("cpu", "RC", handler="custom", custom={"source": OVERLONG}) as t:
        peer = Peer(t)
        for first in (1, 2, 4, 6):
            assert t.inject(peer.next("SEND_ONLY", bytes([first]) + b"rest"))
        replies = [p for p in map(parse, collect_n(t, 1)) if p.opcode & 0x1F == 0x04]
        assert [p.payload for p in replies] == [b"\x06"]
        recs = receive_n(t, 4)
        assert [c.handler_error for c in recs] == [True, True, False, False]
        wait_counters(t, handler_errors=2, messages=4, replies=1)


def test_params_and_source_errors_name_the_key(tmp_path):
    with pytest.raises(ConfigError, match=r"custom\.params: .*entry 1: 300 is not a byte"):
        load_config({"handler": "custom", "custom": {"source": "x.cu", "params": [1, 300]}})
    with pytest.raises(ConfigError, match=r"custom\.params: .*not hex digits"):
        load_config({"handler": "custom", "custom": {"source": "x.cu", "params": "zz"}})
    with pytest.raises(ConfigError, match=r"custom\.source: handler 'custom' needs its source"):
        load_config({"handler": "custom"})
    yaml = tmp_path / "c.yaml"
    yaml.write_text("handler: custom\ncustom:\n  source: a.cu\n  entry: 'not a name'\n")
    with pytest.raises(ConfigError, match=rf"{yaml}:4: custom\.entry: .*not a C\+\+ function"):
        load_config(yaml)
    missing = tmp_path / "missing.cu"
    with pytest.raises(TransceiverError, match=rf"custom\.source: cannot read '{missing}'"):
        Transceiver({"handler": "custom", "executor": "cpu", "custom": {"source": str(missing)}})


def test_the_core_wants_the_build_its_executor_runs():
    # Transceiver builds a shared object for the cpu executor and the engine's kernel for the
    # cuda executor; a caller that bypasses it is told which one is missing, before any GPU is
    # asked for.
    custom = {"source": INLINE_ECHO, "entry": "echo"}
    cfg = load_config({"handler": "custom", "custom": custom})
    with pytest.raises(ValueError, match=r"executor 'cpu' needs its compiled handler"):
        _core.Transceiver(core_config(cfg, "cpu", None))
    with pytest.raises(ValueError, match=r"executor 'cuda' needs the engine's kernels"):
        _core.Transceiver(core_config(cfg, "cuda", None))


# The loop is abandoned by stop() (it never returns); the process then exits as any does, with
# its atexit handlers, collection and the loader's clean-up: the handler's code must still be
# there for the thread that runs in it until the last moment.
# Host code (the cpu executor's build): it says it has been called by creating a file in the
# working directory, then never returns.
ENTERS_AND_SPINS = """#include <cstdio>
RT_HD int handle(const rt::CustomCall&) {
  std::fclose(std::fopen("entered", "w"));
  volatile int x = 1;
  while (x) {
  }
  return 0;
}
"""
ABANDONED = """
import sys, time
from pathlib import Path
from engine_helpers import Peer
from roce_transceiver.transceiver import Transceiver, TransceiverError
source = {source!r}
cfg = {{"executor": "cpu", "handler": "custom", "stop_timeout_s": 1,
       "custom": {{"source": source}}}}
t = Transceiver(cfg).start()
assert t.inject(Peer(t).next("SEND_ONLY", b"hello"))
deadline = time.monotonic() + 10
while not Path("entered").exists():  # the loop is in the handler now
    assert time.monotonic() < deadline, "the handler was not called within 10 s"
    time.sleep(0.001)
try:
    t.stop()
    print("STOPPED")
except TransceiverError as e:
    print("STOP:", e)
del t
sys.exit(0)
"""


def test_a_process_that_abandoned_a_never_returning_handler_exits_cleanly(tmp_path):
    tests = Path(__file__).resolve().parent
    proc = subprocess.run(
        [sys.executable, "-c", ABANDONED.format(source=ENTERS_AND_SPINS)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(tests)},
        check=False,
    )
    out = proc.stdout + proc.stderr
    assert "STOP:" in out and "did not stop within 1" in out, out
    # A negative status is the signal that ended it: SIGSEGV when the handler's shared object
    # was unmapped under the abandoned thread.
    assert proc.returncode == 0, f"exit status {proc.returncode}: {out}"


def test_an_overlong_reply_after_a_normal_one_is_a_handler_error_and_sends_nothing():
    # Normal, one byte past the capacity, normal, past it again: each overlong reply is caught
    # on its own (not only a queue's first), and sends neither its bytes nor the last reply's.
    with running("cpu", "RC", handler="custom", custom={"source": OVERLONG}) as t:
        peer = Peer(t)
        for first in (6, 1, 8, 3):
            assert t.inject(peer.next("SEND_ONLY", bytes([first]) + b"rest"))
        recs = receive_n(t, 4)
        assert [c.handler_error for c in recs] == [False, True, False, True]
        wait_counters(t, handler_errors=2, messages=4, replies=2)
        frames = [parse(f) for f in collect_n(t, 2)]
        assert [p.payload for p in frames if p.opcode & 0x1F == 0x04] == [b"\x06", b"\x08"]


def test_bench_roundtrip_reports_a_new_handlers_start_next_to_a_cached_one(tmp_path, capsys):
    """`bench roundtrip --handler custom`: the start with a handler cache of its own, empty (the
    handler is built), and the start after it (from that cache), with the loops' p50s."""
    import json

    from roce_transceiver.cli import main as cli_main

    out = tmp_path / "rt.json"
    argv = ["bench", "roundtrip", "--executor", "cpu", "--handler", "custom", "--count", "300"]
    status = cli_main([*argv, "--repeats", "1", "--floor-iterations", "200", "--json", str(out)])
    text = capsys.readouterr().out
    assert status == 0, text
    custom = json.loads(out.read_text())["custom"]
    assert custom["cold_start_s"] > 0 and custom["cached_start_s"] > 0, custom
    assert custom["cold_start_target_s"] == 3.0
    assert "custom handler start: " in text and "from the cache" in text
    assert not os.environ.get("XDG_CACHE_HOME", "").startswith("/tmp/rt-bench-cache-")
