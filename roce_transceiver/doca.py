"""What ``nic: doca`` needs, and why it cannot start where something is missing.

The DOCA GPUNetIO backend (a ConnectX driven by the persistent kernel) loads the DOCA SDK's host
libraries at run time and finds RDMA devices through libibverbs; its host set-up is not built
yet. A configuration that names it is still validated everywhere, so a deployment file can be
checked on a machine without the hardware, and starting it says, in one message, everything
that is missing here (found the way the backend will look: ``_core.doca_probe``) and which NICs
do work. The refusal is the core's (its DocaNic, rt/host/doca_nic.h); this module says the
same without making a Transceiver (doctor, the apps before their graph).
"""

from __future__ import annotations

import os
from typing import Any

from roce_transceiver import _core

__all__ = ["DEFAULT_SDK", "missing", "sdk_path", "sdk_problem"]

DEFAULT_SDK = "/opt/mellanox/doca"


def sdk_path() -> str:
    """The DOCA SDK prefix: ``DOCA_PATH``, else the usual install prefix."""
    return os.environ.get("DOCA_PATH", DEFAULT_SDK)


def sdk_problem(probe: dict[str, Any], doca_path_set: bool) -> str | None:
    """What ``_core.doca_probe``'s result says the SDK lacks (None: nothing); without
    ``doca_path_set``, the message says how to point at another prefix."""
    return _core.doca_sdk_problem(probe, not doca_path_set) or None


def missing(device: str) -> str:
    """Why ``nic: doca`` with ``doca.device`` = ``device`` cannot start on this machine: the
    message its NIC refuses with (rt/host/doca_nic.h)."""
    return str(_core.doca_refusal(sdk_path(), device, "DOCA_PATH" not in os.environ))
