"""What ``nic: doca`` needs, and why it cannot start where something is missing.

The DOCA GPUNetIO backend (a ConnectX driven by the persistent kernel) is not built yet; a
configuration that names it is still validated everywhere, so a deployment file can be checked
on a machine without the hardware. Starting it says, in one message, everything that is missing
here and which NICs do work.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["DEFAULT_SDK", "missing"]

DEFAULT_SDK = "/opt/mellanox/doca"
_LIBRARY = "libdoca_gpunetio.so"


def _sdk_problem() -> str | None:
    root = Path(os.environ.get("DOCA_PATH", DEFAULT_SDK))
    found = list(root.glob(f"lib*/**/{_LIBRARY}*")) if root.is_dir() else []
    if found:
        return None
    hint = "" if "DOCA_PATH" in os.environ else " (set DOCA_PATH to the SDK's prefix)"
    return f"no DOCA SDK found at {root}: no {_LIBRARY}{hint}"


def _device_problem(device: str) -> str | None:
    devices = sorted(p.name for p in Path("/sys/class/infiniband").glob("*"))
    if not devices:
        return "no RDMA device: /sys/class/infiniband is empty (what ibv_get_device_list reads)"
    if device not in devices:
        return f"RDMA device {device!r} not present (present: {', '.join(devices)})"
    return None


def missing(device: str) -> str:
    """Why ``nic: doca`` with ``doca.device`` = ``device`` cannot start on this machine."""
    problems = [p for p in (_sdk_problem(), _device_problem(device)) if p]
    problems.append("this build has no DOCA GPUNetIO backend (docs/deployment.md)")
    return (
        "nic 'doca' cannot start here: "
        + "; ".join(problems)
        + ". NICs that work here: loopback (in memory), socket (udp mode; packet mode as root)"
    )
