"""How the socket NIC receives (socket.rx_path, docs/socket_nic.md): the policy that resolves
``auto`` for a configuration, and says why. The configuration's translation for the core reads
it; so does ``doctor``.
"""

from __future__ import annotations

from typing import Any

__all__ = ["rx_path"]

# Handlers that only take: on UC nothing is sent back, so no one waits on a frame's delivery.
_ONE_WAY_HANDLERS = ("frames", "sink")


def rx_path(cfg: dict[str, Any]) -> tuple[str, str]:
    """socket.rx_path as the socket NIC takes it (auto: the ring, else recvmmsg; mmap;
    recvmmsg), and why. The ring (TPACKET_V3) hands frames over a block at a time: once the
    block is full, or when the kernel's 1 ms block timer next fires; a request, or a packet
    whose ACK the sender's window waits for, would wait up to that long, so auto keeps the
    ring for streams that nothing answers."""
    sock, handler, transport = cfg["socket"], cfg["handler"], cfg["qp"]["transport"]
    asked = sock["rx_path"]
    if asked != "auto":
        return asked, f"socket.rx_path: {asked}"
    if sock["mode"] != "packet":
        return "recvmmsg", "udp mode receives with recvmmsg"
    if handler in _ONE_WAY_HANDLERS and transport == "UC":
        return "auto", f"auto: a one-way stream (handler {handler}, UC): the ring"
    why = (
        f"the {handler} handler answers each message"
        if handler not in _ONE_WAY_HANDLERS
        else "RC acknowledges what arrives, and the sender's window waits for it"
    )
    return "recvmmsg", f"auto: {why}; the ring would hold a lone frame up to 1 ms: recvmmsg"
