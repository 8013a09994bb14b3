"""Shared helpers for the HSB control-plane tests (test_hsb_*.py).

A transceiver configured the way a host talking to a Holoscan Sensor Bridge is: the frames
handler behind the socket NIC in udp mode, UC, its peer the bridge, and an ``hsb:`` section.
"""

from __future__ import annotations

from typing import Any


def bridge_host_config(
    host_ip: str, bridge_ip: str, rx_depth: int | None = 1024, **hsb: Any
) -> dict:
    """The transceiver's configuration at ``host_ip`` for the bridge at ``bridge_ip``; ``hsb``
    is its ``hsb:`` section; ``rx_depth`` None leaves the queues at their defaults."""
    cfg: dict[str, Any] = {
        "executor": "cpu",
        "nic": "socket",
        "socket": {"mode": "udp"},
        "local": {"ip": host_ip},
        "peer": {"ip": bridge_ip},
        "qp": {"transport": "UC"},
        "handler": "frames",
        "frames": {"pages": 4, "page_bytes": 65536},
        "hsb": hsb,
    }
    if rx_depth is not None:
        cfg["queues"] = {"rx_depth": rx_depth}
    return cfg
