"""What the kernel knows about interfaces and neighbours: MAC addresses for ``auto``.

``local.mac: auto`` takes the socket NIC's interface's own address (sysfs);
``peer.mac: auto`` looks the peer's IP up in the kernel's neighbour table
(``/proc/net/arp`` for IPv4). Errors say what to do instead.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

__all__ = ["NetInfoError", "interface_mac", "neighbour_mac", "with_resolved_macs"]

SYS_NET = Path("/sys/class/net")
PROC_ARP = Path("/proc/net/arp")


class NetInfoError(ValueError):
    """A MAC address that cannot be found; ``side`` is the configuration's (``local`` or
    ``peer``) when a configuration asked for it."""

    def __init__(self, message: str, side: str = "") -> None:
        super().__init__(message)
        self.side = side


def interface_mac(interface: str, sys_net: Path = SYS_NET) -> str:
    """The MAC address of ``interface``."""
    path = sys_net / interface / "address"
    try:
        return path.read_text().strip()
    except OSError:
        raise NetInfoError(f"interface {interface!r} not found ({path} is not readable)") from None


def neighbour_mac(ip: str, interface: str, arp: Path = PROC_ARP) -> str:
    """The MAC address the kernel resolved for IPv4 ``ip`` on ``interface``."""
    try:
        lines = arp.read_text().splitlines()[1:]
    except OSError:
        raise NetInfoError(f"cannot read the neighbour table {arp}") from None
    for line in lines:
        fields = line.split()
        # IP address, HW type, Flags, HW address, Mask, Device; flags 0x0: incomplete.
        if len(fields) >= 6 and fields[0] == ip and fields[5] == interface and fields[2] != "0x0":
            return fields[3]
    raise NetInfoError(
        f"no neighbour entry for {ip} on {interface}: reach it once (ping) or set peer.mac"
    )


def with_resolved_macs(cfg: dict[str, Any]) -> dict[str, Any]:
    """A validated configuration with ``local.mac`` and ``peer.mac`` looked up where they are
    ``auto`` (a copy; ``cfg`` is left as it is). The lookups read the kernel's tables: done
    once, before the configuration is translated for the core, so that the translation reads
    nothing but the configuration. NetInfoError's ``side`` says which one failed."""
    if "auto" not in (cfg["local"]["mac"], cfg["peer"]["mac"]):
        return cfg
    out = copy.deepcopy(cfg)
    interface = cfg["socket"]["interface"]
    for side in ("local", "peer"):
        if cfg[side]["mac"] != "auto":
            continue
        try:
            if side == "local":
                out[side]["mac"] = interface_mac(interface)
            else:
                out[side]["mac"] = neighbour_mac(cfg["peer"]["ip"], interface)
        except NetInfoError as e:
            raise NetInfoError(str(e), side) from None
    return out
