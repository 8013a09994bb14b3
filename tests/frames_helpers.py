"""Shared helpers for the frames handler tests (test_frames*.py).

A transceiver with the frames handler on the loopback wire, an HSB-style sensor peer
addressed at it (roce_transceiver.peers.sensor: packets built with protocol.build), and
waits that fail with what is still outstanding.
"""

from __future__ import annotations

from engine_helpers import WAIT_S

from roce_transceiver.frames import Frame
from roce_transceiver.peers.sensor import Sensor
from roce_transceiver.transceiver import Transceiver

PAGE = 65536


def frames_config(
    executor: str, metadata: bool = True, pages: int = 4, rx_psn: int = 0, **frames: object
) -> dict:
    """The frames handler on ``executor``; ``frames`` are more keys of its section."""
    return {
        "executor": executor,
        "handler": "frames",
        "qp": {"transport": "UC", "rx_psn": rx_psn},
        "frames": {"pages": pages, "page_bytes": PAGE, "metadata": metadata, **frames},
        "queues": {"rx_depth": 256},
    }


def sensor_for(t: Transceiver, **kw: object) -> Sensor:
    return Sensor.for_config(t.config, **kw)


def send(t: Transceiver, packets: list[bytes]) -> None:
    """Inject in order, waiting (bounded) for room in the rx ring as a lossless link would."""
    for p in packets:
        assert t.inject(p, wait=WAIT_S), f"the engine's rx ring stayed full for {WAIT_S} s"


def one_frame(t: Transceiver) -> Frame:
    got = t.frames(timeout=5.0)
    assert len(got) == 1, f"{len(got)} frames; counters {t.stats()}"
    return got[0]
