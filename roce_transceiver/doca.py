"""What ``nic: doca`` needs, and why it cannot start where something is missing.

The DOCA GPUNetIO backend (a ConnectX driven by the persistent kernel) loads the DOCA SDK's host
libraries at run time and finds RDMA devices through libibverbs; its host set-up is not built
yet. A configuration that names it is still validated everywhere, so a deployment file can be
checked on a machine without the hardware, and starting it says, in one message, everything
that is missing here (found the way the backend will look: ``_core.doca_probe``) and which NICs
do work.
"""

from __future__ import annotations

import os
from typing import Any

from roce_transceiver import _core

__all__ = ["DEFAULT_SDK", "missing", "sdk_path"]

DEFAULT_SDK = "/opt/mellanox/doca"


def sdk_path() -> str:
    """The DOCA SDK prefix: ``DOCA_PATH``, else the usual install prefix."""
    return os.environ.get("DOCA_PATH", DEFAULT_SDK)


def _sdk_problem(p: dict[str, Any]) -> str | None:
    path, missing_libs = p["sdk_path"], p["libraries_missing"]
    hint = "" if "DOCA_PATH" in os.environ else " (set DOCA_PATH to the SDK's prefix)"
    if not p["libraries_found"]:
        return f"no DOCA SDK found at {path}: none of {', '.join(missing_libs)}{hint}"
    if missing_libs:
        return f"the DOCA SDK at {path} lacks {', '.join(missing_libs)}"
    if p["symbols_missing"]:
        names = p["symbols_missing"]
        more = f" and {len(names) - 4} more" if len(names) > 4 else ""
        return (
            f"the DOCA SDK at {path} does not export {len(names)} entry points the backend "
            f"calls: {', '.join(names[:4])}{more}"
        )
    return None


def _device_problem(p: dict[str, Any], device: str) -> str | None:
    if not p["ibverbs_loaded"]:
        return (
            f"libibverbs did not load ({p['ibverbs_error']}; apt-get install libibverbs1 "
            "ibverbs-providers)"
        )
    if not p["rdma_devices"]:
        return "ibv_get_device_list found no device"
    if device not in p["rdma_devices"]:
        return f"RDMA device {device!r} not present (present: {', '.join(p['rdma_devices'])})"
    return None


def missing(device: str) -> str:
    """Why ``nic: doca`` with ``doca.device`` = ``device`` cannot start on this machine."""
    probe = dict(_core.doca_probe(sdk_path()))
    problems = [x for x in (_sdk_problem(probe), _device_problem(probe, device)) if x]
    problems.append("this build has no DOCA GPUNetIO backend host set-up yet (docs/deployment.md)")
    return (
        "nic 'doca' cannot start here: "
        + "; ".join(problems)
        + ". NICs that work here: loopback (in memory), socket (udp mode; packet mode as root)"
    )
