"""Holoscan operators over roce_transceiver (``roce_transceiver.operators``, built from the
repository's ``operators/``): the transceiver, its peers, and the sinks and checkers the apps
use. The operators import Holoscan (4.x) when first used; ``roce_transceiver.operators.app_config``
(the apps' schema) does not need it."""

from __future__ import annotations

from importlib import import_module
from typing import Any

_WHERE = {
    "EchoCheckerOp": "message_checkers",
    "QecCheckerOp": "message_checkers",
    "FrameCheckerOp": "frame_ops",
    "FramePackOp": "frame_ops",
    "FrameStatisticOp": "frame_ops",
    "FrameUnpackOp": "frame_ops",
    "LatencyStatsOp": "latency_stats",
    "MajorityVoteCheckerOp": "message_checkers",
    "MessagePool": "peer_ops",
    "RoceTransceiverOp": "transceiver_op",
    "RoundTripPeerOp": "peer_ops",
    "RoundTripStep": "peer_ops",
    "SensorPeerOp": "peer_ops",
    "StatsSinkOp": "stats_sink",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f"{__name__}.{_WHERE[name]}"), name)
