"""A frame's record reaches the host while the epoch that placed it still runs (issue 26).

The cuda executor returns and is relaunched every ``cuda.epoch_us``; what it publishes at an
epoch's end (held rx slots, counters) must not be what a frame waits for. With one epoch of
10 s, each frame of a stream is injected, then awaited before the next goes: every one must
arrive with the epoch count still 1, and with ``epoch_us: 0`` (one launch) every one arrives.
"""

from __future__ import annotations

import pytest
from frames_helpers import frames_config, send, sensor_for

from roce_transceiver.transceiver import Transceiver

pytestmark = pytest.mark.gpu

FRAMES = 12
LONG_EPOCH_US = 10_000_000  # the longest allowed: far beyond this test's frames


@pytest.mark.parametrize("epoch_us", [LONG_EPOCH_US, 0])
def test_each_frame_arrives_inside_the_epoch_that_placed_it(epoch_us: int) -> None:
    cfg = {**frames_config("cuda"), "cuda": {"epoch_us": epoch_us}}
    t = Transceiver(cfg)
    sensor = sensor_for(t, payload=1024)
    with t:
        for sent in sensor.frames(FRAMES, 16384):
            send(t, sent.packets)
            got = t.frames(timeout=5.0)  # a bound, not a measure: an epoch's end is 10 s away
            assert [f.frame_number for f in got] == [sent.frame_number], t.stats()
            assert got[0].ok and got[0].crc32 == sent.crc32
            got[0].release()
            if epoch_us:
                assert t.epoch_stats()["epochs"] == 1, t.epoch_stats()
