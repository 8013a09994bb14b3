"""A frame outlived by its transceiver: its bytes stay readable, never a crash.

Goal: ``Transceiver.stop()`` frees the loop's memory, but a frame the host still holds, and
any array taken from it, keep a share of the memory of their page (roce_transceiver/frames.py).
After stop() (and after the Transceiver object is gone): ``Frame.data``, ``Frame.array()`` and
an array taken before stop() all give the bytes the sensor sent; ``release()`` does nothing,
twice. The pages are 1 MiB each, so the allocator maps the region on its own and a read of
freed memory faults rather than reading stale bytes: the checks run in a child process, so a
crash fails the test instead of killing pytest.

Oracle: the sensor's own content for each frame.
"""

from __future__ import annotations

import gc
import json
import subprocess
import sys

import pytest
from engine_helpers import EXECUTORS

PAGE = 1 << 20
SIZES = (5000, 300_000, PAGE - 128)


def _host(a: object) -> bytes:
    """Bytes of a numpy or cupy array."""
    return (a.get() if hasattr(a, "get") else a).tobytes()  # type: ignore[attr-defined]


def child(executor: str) -> dict[str, object]:
    """Frames taken, the transceiver stopped and dropped, then everything read: what matched."""
    from roce_transceiver.peers.sensor import Sensor
    from roce_transceiver.transceiver import Transceiver

    cfg = {
        "executor": executor,
        "handler": "frames",
        "qp": {"transport": "UC", "rx_psn": 0},
        "frames": {"pages": 16, "page_bytes": PAGE, "metadata": True},
        "queues": {"rx_depth": 1024},
    }
    t = Transceiver(cfg).start()
    sensor = Sensor.for_config(t.config, payload=1024)
    contents = [bytes((n * 31 + i * 7) & 0xFF for i in range(size)) for n, size in enumerate(SIZES)]
    frames = []
    for n, content in enumerate(contents):
        for p in sensor.frame(n, content).packets:
            assert t.inject(p, wait=5.0), "the engine's rx ring stayed full"
        frames += t.frames(timeout=10.0)
    assert len(frames) == len(SIZES), f"{len(frames)} frames; counters {t.stats()}"
    before_data = frames[0].data  # arrays taken while the transceiver runs
    before_array = frames[1].array()
    t.stop()
    del t
    gc.collect()
    return {
        "data": [f.data.tobytes() == c for f, c in zip(frames, contents, strict=True)],
        "array": [_host(f.array()) == c for f, c in zip(frames, contents, strict=True)],
        "before_data": before_data.tobytes() == contents[0],
        "before_array": _host(before_array) == contents[1],
        "released": [(f.release(), f.release(), f.released)[2] for f in frames],
        "after_release": _host(before_array) == contents[1],
    }


@pytest.mark.parametrize("executor", EXECUTORS)
def test_frames_and_their_arrays_stay_readable_after_stop(executor: str) -> None:
    proc = subprocess.run(
        [sys.executable, __file__, executor],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, f"child exited {proc.returncode}: {proc.stderr[-2000:]}"
    got = json.loads(proc.stdout.splitlines()[-1])
    assert got == {
        "data": [True] * len(SIZES),
        "array": [True] * len(SIZES),
        "before_data": True,
        "before_array": True,
        "released": [True] * len(SIZES),
        "after_release": True,
    }


if __name__ == "__main__":
    print(json.dumps(child(sys.argv[1])))
