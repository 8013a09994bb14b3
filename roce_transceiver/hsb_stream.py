"""An HSB data channel pointed at this transceiver: the registers, the checks before
streaming, and the session that programs the bridge and un-programs it however it ends
(docs/hsb.md).

A bridge's sensor streams into the host once its *virtual port* (vp) registers say where and
its data plane's *host interface* (hif) registers say how, and its bit is set in the hif's
VP_MASK. The registers (hololink's ``DataChannel::configure_roce``; the emulator's
``data_plane.hpp``):

- hif, at 0x02000300 + 0x10000 x data plane: PACKET_SIZE (+0x04, payload bytes / 128),
  PACKET_UDP_PORT (+0x08, the source port: 12288), VP_MASK (+0x0C, one bit per sensor).
- vp, at 0x1000 + 0x40 x sensor x SIFs per sensor: QP (+0x00), RKEY (+0x04), PAGE_LSB/MSB
  (+0x08/+0x0C, page 0's address), PAGE_INC (+0x10, page bytes / 128), MAX_BUFF (+0x14, first
  page << 16 | last page), BUFFER_LENGTH (+0x18, the frame's bytes), HOST_MAC_LOW/HIGH
  (+0x20/+0x24), HOST_IP (+0x28), HOST_UDP_PORT (+0x2C).

:func:`plan_for` turns the transceiver's own settings (its MAC, IP, QP, the frames handler's
rkey, page address, size and count, ``hsb.*``) into those values, :func:`check_plan` is every
check before streaming, each problem with its fix, and :class:`HsbStream` runs a session:
enumerate, check, refuse a sensor whose registers point at another host (unless
``hsb.take_over``), configure, start; then stop and un-configure, on errors and signals too,
but only a sensor whose registers are still this session's: one that another host took over
is left to it, and said so (:attr:`HsbStream.lost`).
"""

from __future__ import annotations

import fcntl
import ipaddress
import logging
import socket
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from roce_transceiver.hsb import DEFAULT_PAGE_BITS, METADATA_BYTES, PAGE_ALIGN, page_bits_for
from roce_transceiver.hsb_control import (
    DEFAULT_BOARD,
    SEQUENCE_CHECK_FAIL,
    Announcement,
    Ecb,
    EcbError,
    EcbPortUnreachable,
    EcbStatusError,
    EcbTimeout,
    EnumerationError,
    find_bridge,
)

__all__ = [
    "Channel",
    "DataChannel",
    "Holder",
    "HsbError",
    "HsbStream",
    "StreamPlan",
    "check_plan",
    "check_streams",
    "plan_for",
]

log = logging.getLogger(__name__)
_T = TypeVar("_T")

HSB_IP_VERSION = 0x80  # register: the IP's version, low 16 bits
MINIMUM_HSB_IP_VERSION = 0x2602  # the register map below is this version's (hololink's minimum)
HIF_BASE, HIF_STRIDE = 0x0200_0300, 0x1_0000
VP_BASE, VP_STRIDE = 0x1000, 0x40
# hif registers
PACKET_SIZE, PACKET_UDP_PORT, VP_MASK = 0x04, 0x08, 0x0C
# vp registers
QP, RKEY, PAGE_LSB, PAGE_MSB, PAGE_INC, MAX_BUFF = 0x00, 0x04, 0x08, 0x0C, 0x10, 0x14
BUFFER_LENGTH, HOST_MAC_LOW, HOST_MAC_HIGH, HOST_IP, HOST_UDP_PORT = 0x18, 0x20, 0x24, 0x28, 0x2C
VP_NAMES = {
    QP: "QP",
    RKEY: "RKEY",
    PAGE_LSB: "PAGE_LSB",
    PAGE_MSB: "PAGE_MSB",
    PAGE_INC: "PAGE_INC",
    MAX_BUFF: "MAX_BUFF",
    BUFFER_LENGTH: "BUFFER_LENGTH",
    HOST_MAC_LOW: "HOST_MAC_LOW",
    HOST_MAC_HIGH: "HOST_MAC_HIGH",
    HOST_IP: "HOST_IP",
    HOST_UDP_PORT: "HOST_UDP_PORT",
}
HIF_NAMES = {PACKET_SIZE: "PACKET_SIZE", PACKET_UDP_PORT: "PACKET_UDP_PORT", VP_MASK: "VP_MASK"}
ROCE_PORT = 4791
DATA_SOURCE_PORT = 12288  # the UDP port a bridge's data leaves from (hololink's choice)
UNIT = 128  # PACKET_SIZE and PAGE_INC count 128-byte units; pages start 128-aligned
# A bridge's packet beyond its payload: IPv4 20 + UDP 8 + BTH 12 + RETH 16 + ImmDt 4 + ICRC 4
# (the end-of-frame packet has them all), and Ethernet's 14 in front in a slot.
IP_OVERHEAD = 64
FRAME_OVERHEAD = IP_OVERHEAD + 14
# On the wire a packet also costs preamble 8, FCS 4 and the gap 12: the link budget counts them.
WIRE_OVERHEAD = FRAME_OVERHEAD + 24
MAX_PACKET_BYTES = 0xFFFF // UNIT * UNIT  # the bridge keeps the payload size in 16 bits


class HsbError(RuntimeError):
    """The bridge cannot be pointed at this transceiver, or could not be un-configured; the
    message says what and how to fix it."""


class HsbBridgeLost(HsbError):
    """Programming failed because the bridge stopped answering, or forgot what was written to
    it: it may have restarted (a session waits for it and tries again: hsb_session.py)."""


@dataclass(frozen=True)
class Channel:
    """A sensor of a bridge's data plane: which registers are its."""

    data_plane: int = 0
    sensor: int = 0
    sifs_per_sensor: int = 2

    @property
    def hif_address(self) -> int:
        return HIF_BASE + HIF_STRIDE * self.data_plane

    @property
    def vp_index(self) -> int:
        return self.sensor * self.sifs_per_sensor

    @property
    def vp_address(self) -> int:
        return VP_BASE + VP_STRIDE * self.vp_index

    @property
    def vp_mask(self) -> int:
        return 1 << self.vp_index


@dataclass(frozen=True)
class StreamPlan:
    """What one stream writes to its bridge, and what its checks look at."""

    bridge: str
    control_port: int
    channel: Channel
    host_mac: bytes
    host_ip: str
    qpn: int
    rkey: int
    va: int
    page_bytes: int
    pages: int
    frame_bytes: int
    packet_bytes: int
    host_port: int = ROCE_PORT
    block_requests: bool = True
    # What the checks need to know of the host side.
    interface: str | None = None  # where the frames come in (None: unknown)
    slot_bytes: int = 2048
    path_mtu_limit: int | None = None  # the RoCE path MTU of nic doca
    frame_rate: float | None = None
    link_bps: float | None = None
    source: str = "the configuration"  # for messages: the file

    @property
    def hif(self) -> list[tuple[int, int, str]]:
        """(address, value, name) of the hif registers set, VP_MASK aside."""
        base = self.channel.hif_address
        return [
            (base + PACKET_SIZE, self.packet_bytes // UNIT, "PACKET_SIZE"),
            (base + PACKET_UDP_PORT, DATA_SOURCE_PORT, "PACKET_UDP_PORT"),
        ]

    @property
    def vp(self) -> list[tuple[int, int, str]]:
        """(address, value, name) of the vp registers, in the order written: where the pages
        are first, the destination last. HSB's emulator starts sending as soon as HOST_IP
        and HOST_UDP_PORT are non-zero, whatever VP_MASK says (docs/frames.md): written last,
        they never point it at us before the rest is in place."""
        mac = self.host_mac
        values = {
            QP: self.qpn,
            RKEY: self.rkey,
            PAGE_LSB: self.va & 0xFFFFFFFF,
            PAGE_MSB: self.va >> 32,
            PAGE_INC: self.page_bytes // UNIT,
            MAX_BUFF: self.pages - 1,  # first page 0 in bits 27:16, last page in 11:0
            BUFFER_LENGTH: self.frame_bytes,
            HOST_MAC_LOW: int.from_bytes(mac[2:6], "big"),
            HOST_MAC_HIGH: int.from_bytes(mac[0:2], "big"),
            HOST_IP: int(ipaddress.IPv4Address(self.host_ip)),
            HOST_UDP_PORT: self.host_port,
        }
        base = self.channel.vp_address
        return [(base + off, values[off], VP_NAMES[off]) for off in values]

    def as_dict(self) -> dict[str, Any]:
        return {
            "bridge": self.bridge,
            "data_plane": self.channel.data_plane,
            "sensor": self.channel.sensor,
            "qpn": self.qpn,
            "rkey": self.rkey,
            "va": self.va,
            "page_bytes": self.page_bytes,
            "pages": self.pages,
            "frame_bytes": self.frame_bytes,
            "packet_bytes": self.packet_bytes,
            "host_ip": self.host_ip,
            "host_mac": ":".join(f"{b:02x}" for b in self.host_mac),
            "host_port": self.host_port,
            "registers": {f"{a:#010x}": v for a, v, _ in [*self.hif, *self.vp]},
        }


# ----------------------------------------------------------------------------- host facts
_SIOCGIFADDR = 0x8915


_SIOCGIFNETMASK = 0x891B


def interface_of(ip: str) -> str | None:
    """The interface that holds ``ip`` (IPv4): the one whose address it is, else the one
    whose network holds it (127.0.0.0/8 on lo), or None."""
    want = ipaddress.IPv4Address(ip)
    within = None
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for _, name in socket.if_nameindex():
            req = struct.pack("256s", name.encode())
            try:
                addr = fcntl.ioctl(s.fileno(), _SIOCGIFADDR, req)[20:24]
                mask = fcntl.ioctl(s.fileno(), _SIOCGIFNETMASK, req)[20:24]
            except OSError:
                continue
            if addr == want.packed:
                return name
            net = ipaddress.IPv4Network(
                f"{ipaddress.IPv4Address(addr)}/{ipaddress.IPv4Address(mask)}", strict=False
            )
            if within is None and want in net:
                within = name
    return within


def _sys_int(interface: str, what: str) -> int | None:
    try:
        return int(Path(f"/sys/class/net/{interface}/{what}").read_text().strip())
    except (OSError, ValueError):
        return None


def interface_mtu(interface: str) -> int | None:
    return _sys_int(interface, "mtu")


def interface_bps(interface: str) -> float | None:
    """The link's speed (sysfs, Mb/s), None where the kernel has none (lo, veth: -1)."""
    speed = _sys_int(interface, "speed")
    return speed * 1e6 if speed and speed > 0 else None


def _mac(text: str) -> bytes:
    return bytes(int(p, 16) for p in text.replace("-", ":").split(":"))


def host_interface(cfg: dict[str, Any]) -> str | None:
    """Where the transceiver's frames come in: packet mode's interface, or (udp mode) the
    one that holds local.ip."""
    sock = cfg["socket"]
    if cfg["nic"] == "socket" and sock["mode"] == "packet":
        return sock["interface"]
    try:
        return interface_of(cfg["local"]["ip"])
    except ValueError:
        return None


def host_mac(cfg: dict[str, Any], interface: str | None) -> bytes:
    """The MAC the bridge must send to: the interface's own (udp mode: the kernel's; packet
    mode with local.mac auto), else local.mac."""
    from roce_transceiver.netinfo import NetInfoError, interface_mac

    mac = cfg["local"]["mac"]
    if interface and (mac == "auto" or cfg["nic"] != "socket" or cfg["socket"]["mode"] == "udp"):
        try:
            return _mac(interface_mac(interface))
        except NetInfoError:
            pass
    return _mac(mac if mac != "auto" else "00:00:00:00:00:00")


# ----------------------------------------------------------------------------- the plan
def largest_packet(slot_bytes: int, mtu: int | None, path_mtu_limit: int | None) -> int:
    """The largest payload, in 128-byte units, that an rx slot, the MTU and the RoCE path MTU
    all take."""
    most = min(slot_bytes - FRAME_OVERHEAD, MAX_PACKET_BYTES)
    if mtu:
        most = min(most, mtu - IP_OVERHEAD)
    if path_mtu_limit:
        most = min(most, path_mtu_limit)
    return max(most // UNIT * UNIT, 0)


def largest_frame(page_bytes: int) -> int:
    """The largest frame a page holds with the record at round_up(frame, 128)."""
    return max((page_bytes - METADATA_BYTES) // PAGE_ALIGN * PAGE_ALIGN, 0)


def plan_for(
    cfg: dict[str, Any],
    announcement: Announcement | None = None,
    *,
    mtu: int | None = None,
    source: str | None = None,
    queue: int = 0,
) -> StreamPlan:
    """The stream the transceiver configured by ``cfg`` (a loaded config with ``hsb.bridge``
    set) asks of its bridge for its queue ``queue`` (queues.count: a stream a queue, each on
    the queue's QP, qp.qpn + queue, and its share of the pages, from sensor hsb.sensor +
    queue). ``announcement``: what the bridge said of itself (data plane, board); ``mtu``:
    the path MTU to the bridge, when known."""
    h, fr = cfg["hsb"], cfg["frames"]
    if not h["bridge"]:
        raise HsbError("hsb.bridge is null: no bridge to program (listen --hsb IP sets it)")
    queues = cfg["queues"]["count"]
    if not 0 <= queue < queues:
        raise HsbError(f"queue {queue}: the transceiver has {queues} (queues.count)")
    pages = fr["pages"] // queues  # the queue's share (config.py: a multiple of count)
    board = announcement.board if announcement else DEFAULT_BOARD
    data_plane = h["data_plane"]
    if data_plane is None:
        data_plane = announcement.data_plane if announcement else 0
    sifs = h["sifs_per_sensor"] or board[2]
    interface = host_interface(cfg)
    if_mtu = interface_mtu(interface) if interface else None
    mtus = [m for m in (mtu, if_mtu) if m]
    limit = cfg["doca"]["mtu"] if cfg["nic"] == "doca" else None
    packet = h["packet_bytes"] or largest_packet(
        cfg["queues"]["slot_bytes"], min(mtus) if mtus else None, limit
    )
    link = h["link_gbps"] * 1e9 if h["link_gbps"] else None
    if link is None and interface:
        link = interface_bps(interface)
    return StreamPlan(
        bridge=h["bridge"],
        control_port=h["control_port"],
        channel=Channel(data_plane, h["sensor"] + queue, sifs),
        host_mac=host_mac(cfg, interface),
        host_ip=cfg["local"]["ip"],
        qpn=cfg["qp"]["qpn"] + (queue if cfg["queues"]["steer"] == "qp" else 0),
        rkey=fr["rkey"],
        va=fr["va"] + queue * pages * fr["page_bytes"],
        page_bytes=fr["page_bytes"],
        pages=pages,
        frame_bytes=h["frame_bytes"] or largest_frame(fr["page_bytes"]),
        packet_bytes=packet,
        block_requests=board[3],
        interface=interface,
        slot_bytes=cfg["queues"]["slot_bytes"],
        path_mtu_limit=limit,
        frame_rate=h["frame_rate"],
        link_bps=link,
        source=source or "the configuration",
    )


def check_plan(cfg: dict[str, Any], plan: StreamPlan, *, path_mtu: int | None = None) -> list[str]:
    """Every reason the bridge would stream nothing, or something the transceiver drops; each
    line says what to change. Empty: go."""
    out: list[str] = []
    fr, h = cfg["frames"], cfg["hsb"]
    if cfg["handler"] != "frames":
        out.append(f"handler is {cfg['handler']!r}: a bridge's frames need handler: frames")
    if cfg["qp"]["transport"] != "UC":
        out.append("qp.transport is RC: a bridge sends UC RDMA WRITEs; set qp.transport: UC")
    if cfg["queues"]["count"] > 1 and cfg["queues"]["steer"] != "qp":
        out.append(
            "queues.steer is udp_sport: a bridge sends every sensor's stream from one UDP "
            "port, so they would all land in one queue; set queues.steer: qp (a QP a sensor)"
        )
    try:
        v4 = ipaddress.ip_address(cfg["local"]["ip"]).version == 4
    except ValueError:
        v4 = False
    if not v4:
        out.append(
            f"local.ip {cfg['local']['ip']} is not IPv4: the bridge's HOST_IP register holds an "
            "IPv4 address; use the IPv4 address of the interface facing the bridge"
        )
    if not fr["metadata"]:
        out.append(
            "frames.metadata is false: a bridge ends every frame with its 128-byte metadata "
            "record; set frames.metadata: true"
        )
    if fr["va"] % UNIT:
        out.append(
            f"frames.va {fr['va']:#x} is not 128-aligned: the bridge writes pages from a "
            f"128-byte boundary; use {fr['va'] // UNIT * UNIT:#x}"
        )
    if fr["page_bytes"] % UNIT:
        up = -(-fr["page_bytes"] // UNIT) * UNIT
        out.append(
            f"frames.page_bytes {fr['page_bytes']} is not a multiple of 128 (the bridge's "
            f"PAGE_INC counts 128-byte units): use {up}"
        )
    if (fr["va"] + fr["pages"] * fr["page_bytes"]) >> 7 > 0xFFFFFFFF:
        out.append("frames.va: the pages end past 2^39, beyond the bridge's page addressing")
    # The frame against the page: the record lands at round_up(frame, 128).
    need = -(-plan.frame_bytes // PAGE_ALIGN) * PAGE_ALIGN + METADATA_BYTES
    if plan.frame_bytes < 1:
        out.append("hsb.frame_bytes: the frame must be at least 1 byte")
    elif need > fr["page_bytes"]:
        out.append(
            f"hsb.frame_bytes {plan.frame_bytes}: with its record at round_up(frame, 128) "
            f"a frame needs {need} bytes of page, frames.page_bytes is {fr['page_bytes']}: "
            f"raise frames.page_bytes to {need} or lower hsb.frame_bytes to "
            f"{largest_frame(fr['page_bytes'])}"
        )
    # The packet against the slot, the interface MTU and the path MTU.
    p = plan.packet_bytes
    if p < UNIT or p % UNIT:
        out.append(
            f"hsb.packet_bytes {p}: the bridge's PACKET_SIZE counts 128-byte units; use a "
            f"multiple of 128 (at least 128), e.g. {max(p // UNIT, 1) * UNIT}"
        )
    if p + FRAME_OVERHEAD + (4 if cfg["vlan"] is not None else 0) > plan.slot_bytes:
        out.append(
            f"hsb.packet_bytes {p}: the bridge's packets would be {p + FRAME_OVERHEAD} bytes, "
            f"more than queues.slot_bytes {plan.slot_bytes} (the NIC would drop every one): "
            f"raise queues.slot_bytes to {-(-(p + FRAME_OVERHEAD) // 64) * 64} or lower "
            f"hsb.packet_bytes to {largest_packet(plan.slot_bytes, None, None)}"
        )
    if_mtu = interface_mtu(plan.interface) if plan.interface else None
    if if_mtu and p + IP_OVERHEAD > if_mtu:
        out.append(
            f"hsb.packet_bytes {p}: the bridge's packets would be {p + IP_OVERHEAD} bytes of "
            f"IP, more than the MTU {if_mtu} of {plan.interface}: lower hsb.packet_bytes to "
            f"{largest_packet(1 << 16, if_mtu, None)} or raise the MTU "
            f"(ip link set {plan.interface} mtu {p + IP_OVERHEAD}; the bridge's link too)"
        )
    if path_mtu and p + IP_OVERHEAD > path_mtu:
        out.append(
            f"hsb.packet_bytes {p}: the path to {plan.bridge} has MTU {path_mtu}, the "
            f"bridge's packets would be {p + IP_OVERHEAD} bytes of IP: lower hsb.packet_bytes "
            f"to {largest_packet(1 << 16, path_mtu, None)}"
        )
    if plan.path_mtu_limit and p > plan.path_mtu_limit:
        out.append(
            f"hsb.packet_bytes {p}: more than the RoCE path MTU doca.mtu {plan.path_mtu_limit}: "
            f"lower hsb.packet_bytes to {plan.path_mtu_limit}"
        )
    # The link budget.
    if plan.frame_rate and plan.packet_bytes >= UNIT:
        packets = -(-(plan.frame_bytes + METADATA_BYTES) // plan.packet_bytes)
        bits = (plan.frame_bytes + METADATA_BYTES + packets * WIRE_OVERHEAD) * 8
        need_bps = bits * plan.frame_rate
        if plan.link_bps is None:
            if h["link_gbps"] is None and plan.interface:
                log.info("no link speed for %s: the link budget is not checked", plan.interface)
        elif need_bps > plan.link_bps:
            most = plan.link_bps / bits
            out.append(
                f"hsb.frame_rate {plan.frame_rate:g}: {plan.frame_bytes}-byte frames at that "
                f"rate need {need_bps / 1e9:.3g} Gb/s with their headers, the link carries "
                f"{plan.link_bps / 1e9:.3g} Gb/s: lower the rate to {most:.4g} frames/s or "
                "the frame size"
            )
    return out


def check_streams(plans: list[StreamPlan]) -> list[str]:
    """Streams that would mix into one another: a QP on one host used by two, pages of one
    rkey two write into, or one sensor of a bridge programmed by two."""
    out: list[str] = []
    seen_qp: dict[tuple[str, int], int] = {}
    seen_pages: dict[tuple[str, int], list[tuple[int, int, int]]] = {}
    seen_vp: dict[tuple[str, int, int], int] = {}
    for i, p in enumerate(plans):
        name = f"stream {i} ({p.bridge} sensor {p.channel.sensor})"
        qp = (p.host_ip, p.qpn)
        if qp in seen_qp:
            out.append(
                f"{name}: qp.qpn {p.qpn:#x} on {p.host_ip} is stream {seen_qp[qp]}'s too: the "
                "bridge would write both streams into one QP's pages; give each stream its own "
                "QP (or its own queue: queues.count)"
            )
        else:
            seen_qp[qp] = i
        lo, hi = p.va, p.va + p.pages * p.page_bytes
        others = seen_pages.setdefault((p.host_ip, p.rkey), [])
        clash = next((j for a, b, j in others if lo < b and a < hi), None)
        if clash is not None:
            out.append(
                f"{name}: its pages under frames.rkey {p.rkey:#x} on {p.host_ip} overlap stream "
                f"{clash}'s: the bridge would write both streams into the same pages; give each "
                "stream's pages their own rkey (or each stream its own queue: queues.count)"
            )
        others.append((lo, hi, i))
        vp = (p.bridge, p.channel.data_plane, p.channel.vp_index)
        if vp in seen_vp:
            out.append(
                f"{name}: that sensor's registers are stream {seen_vp[vp]}'s too: the later "
                "configuration would overwrite the earlier; pick another hsb.sensor"
            )
        else:
            seen_vp[vp] = i
    return out


# ----------------------------------------------------------------------------- the channel
@dataclass(frozen=True)
class Holder:
    """The host a sensor's registers send to (HOST_IP, HOST_MAC, HOST_UDP_PORT, QP), and
    whether its VP_MASK bit is set."""

    ip: str
    mac: str
    port: int
    qpn: int
    streaming: bool

    def __str__(self) -> str:
        state = "streaming" if self.streaming else "its VP_MASK bit clear"
        return f"{self.ip} (MAC {self.mac}, UDP port {self.port}, QP {self.qpn:#x}; {state})"

    def as_dict(self) -> dict[str, Any]:
        return {
            "ip": self.ip,
            "mac": self.mac,
            "port": self.port,
            "qpn": self.qpn,
            "streaming": self.streaming,
        }


@dataclass
class DataChannel:
    """One sensor's registers at a bridge, through an :class:`Ecb` client. ``configured``:
    its registers are this session's to clear; ``lost``: why they no longer are (another
    host took the sensor over), once that was seen."""

    ecb: Ecb
    plan: StreamPlan
    configured: bool = field(default=False, init=False)
    lost: str | None = field(default=None, init=False)

    @property
    def name(self) -> str:
        return f"bridge {self.plan.bridge} sensor {self.plan.channel.sensor}"

    def version(self) -> int:
        return self.ecb.read(HSB_IP_VERSION) & 0xFFFF

    def _read(self, addresses: list[int]) -> list[int]:
        if self.plan.block_requests:
            return self.ecb.read_block(addresses)
        return [self.ecb.read(a) for a in addresses]

    def registers(self) -> tuple[dict[int, int], Holder | None]:
        """The vp registers now (by offset), and whom they send to: None when the
        destination (HOST_IP, HOST_UDP_PORT) is clear, nobody's."""
        base = self.plan.channel.vp_address
        mask_at = self.plan.channel.hif_address + VP_MASK
        *values, mask = self._read([base + off for off in VP_NAMES] + [mask_at])
        reg = dict(zip(VP_NAMES, values, strict=True))
        if not reg[HOST_IP] and not reg[HOST_UDP_PORT]:
            return reg, None
        high, low = reg[HOST_MAC_HIGH] & 0xFFFF, reg[HOST_MAC_LOW]
        mac = high.to_bytes(2, "big") + low.to_bytes(4, "big")
        return reg, Holder(
            ip=str(ipaddress.IPv4Address(reg[HOST_IP])),
            mac=":".join(f"{b:02x}" for b in mac),
            port=reg[HOST_UDP_PORT],
            qpn=reg[QP],
            streaming=bool(mask & self.plan.channel.vp_mask),
        )

    def is_ours(self, holder: Holder) -> bool:
        """Does ``holder`` name this stream's destination (a session of this host on this
        QP that ended without clearing it, or this one)?"""
        p = self.plan
        mac = ":".join(f"{b:02x}" for b in p.host_mac)
        return (holder.ip, holder.mac, holder.port, holder.qpn) == (
            p.host_ip,
            mac,
            p.host_port,
            p.qpn,
        )

    def state(self) -> tuple[str, Holder | None, list[str]]:
        """What the sensor's vp registers say now, and whom they send to: ``ours`` (what
        this session wrote), ``cleared`` (no destination: a restarted board forgets them, or
        someone cleared them), ``taken`` (another host's destination) or ``changed`` (this
        stream's destination, other values); and the registers that differ."""
        reg, holder = self.registers()
        base = self.plan.channel.vp_address
        changed = [name for a, v, name in self.plan.vp if reg[a - base] != v]
        if not changed:
            return "ours", holder, []
        if holder is None:
            return "cleared", None, changed
        return ("changed" if self.is_ours(holder) else "taken"), holder, changed

    def still_ours(self) -> bool:
        """Are the sensor's vp registers still what this session wrote? If not, the
        sensor is marked ``lost`` (with who has it now) and no longer ``configured``: what is
        there is someone else's to clear."""
        if self.lost is not None:
            return False
        state, holder, changed = self.state()
        if state == "ours":
            return True
        if state == "cleared":
            self.lost = (
                f"{self.name}: its registers were cleared by someone else (another host, or "
                "hsb write)"
            )
        elif state == "taken":
            self.lost = f"{self.name} was taken over: its registers now send to {holder}"
        else:
            self.lost = (
                f"{self.name}: its registers were changed by someone else ({', '.join(changed)})"
            )
        self.configured = False
        return False

    def _vp_mask(self, on: bool) -> None:
        address = self.plan.channel.hif_address + VP_MASK
        mask = self.ecb.read(address)
        bit = self.plan.channel.vp_mask
        self.ecb.write(address, mask | bit if on else mask & ~bit)

    def _write(self, regs: list[tuple[int, int, str]]) -> None:
        if self.plan.block_requests:
            self.ecb.write_block([(a, v) for a, v, _ in regs])
        else:
            for a, v, _ in regs:
                self.ecb.write(a, v)

    def configure(self) -> None:
        """Stop the sensor, write its registers, read them back."""
        self._vp_mask(False)
        self.configured = True  # from here on, un-configure on the way out
        regs = [*self.plan.hif, *self.plan.vp]
        self._write(regs)
        got = (
            self.ecb.read_block([a for a, _, _ in regs])
            if self.plan.block_requests
            else [self.ecb.read(a) for a, _, _ in regs]
        )
        wrong = [
            f"{name} ({a:#x}) reads {g:#x}, {v:#x} written"
            for (a, v, name), g in zip(regs, got, strict=True)
            if g != v
        ]
        if wrong:
            raise HsbBridgeLost(
                f"bridge {self.plan.bridge}: registers did not take what was written: "
                f"{'; '.join(wrong)} (another host programming it?)"
            )

    def start(self) -> None:
        self._vp_mask(True)

    def stop(self) -> None:
        self._vp_mask(False)

    def unconfigure(self) -> None:
        """Stop the sensor and clear its vp registers, the destination first (so that the
        emulator, which goes by HOST_IP and HOST_UDP_PORT, stops too)."""
        self.stop()
        zero = [(a, 0, n) for a, _, n in reversed(self.plan.vp)]
        self._write(zero)
        self.configured = False

    def relatched(self, step: Callable[[], _T]) -> _T:
        """``step()``, sent again once with a fresh, unchecked sequence if the bridge
        refused it for its sequence: another host spoke to the bridge since (two hosts on two
        sensors, or one that took this sensor over), and the refused request was not
        executed. Used on the way out and by the session's looks (states), never while
        programming."""
        try:
            return step()
        except EcbStatusError as e:
            if e.status != SEQUENCE_CHECK_FAIL:
                raise
            log.info("%s: %s; sent again with a fresh sequence", self.name, e)
            self.ecb.relatch()
            return step()

    def release(self, stop_only: bool = False) -> None:
        """Stop (``stop_only``) or un-configure the sensor if its registers are still this
        session's; one that another host took over is left as it is (``lost`` says so)."""

        def step() -> None:
            if not self.still_ours():
                return
            if stop_only:
                self.stop()
            else:
                self.unconfigure()

        self.relatched(step)


class HsbStream:
    """A session with one bridge for a transceiver configured by ``cfg``: ``open()`` finds
    the bridge (``hsb.enumerate``), checks the streams, configures and starts them (a sensor
    a queue: queues.count > 1 streams sensors hsb.sensor, hsb.sensor + 1, ... into the queues,
    plan_for); ``close()`` stops and un-configures them, and raises HsbError if the bridge
    could not be reached to do so (it may still be streaming at this host). A sensor whose
    registers send to another host is refused before anything is written, naming the host,
    unless ``hsb.take_over``; one taken over while streaming is left to its new host, and
    ``lost`` says so (:meth:`states` looks; hsb_session.py). A context manager: closes on any
    exit."""

    def __init__(self, cfg: dict[str, Any], *, source: str | None = None) -> None:
        self.cfg = cfg
        self.source = source
        self.announcement: Announcement | None = None
        self.plans: list[StreamPlan] = []
        self.channels: list[DataChannel] = []
        self.taken_from: list[Holder] = []  # whom hsb.take_over took a sensor from
        self._lost: list[str] = []
        self._ecb: Ecb | None = None

    @property
    def lost(self) -> list[str]:
        """One line per sensor that another host took over (or cleared) while this session
        had it, as far as it has looked (the session's looks, ``stop()``, ``close()``)."""
        return self._lost + [ch.lost for ch in self.channels if ch.lost is not None]

    @property
    def plan(self) -> StreamPlan | None:
        """Queue 0's stream (the only one with one queue)."""
        return self.plans[0] if self.plans else None

    @staticmethod
    def find(cfg: dict[str, Any]) -> Announcement | None:
        """The bridge's announcement, when ``hsb.enumerate`` is on."""
        h = cfg["hsb"]
        if not h["enumerate"]:
            return None
        return find_bridge(h["bridge"], h["enumeration_timeout_s"], port=h["enumeration_port"])

    def open(self, announcement: Announcement | None = None) -> StreamPlan:
        """Queue 0's plan; ``plans`` has every queue's."""
        h = self.cfg["hsb"]
        if not h["bridge"]:
            raise HsbError("hsb.bridge is null: no bridge to program (listen --hsb IP sets it)")
        try:
            self.announcement = announcement or self.find(self.cfg)
        except EnumerationError as e:
            raise HsbError(str(e)) from None
        ecb = Ecb.shared(
            h["bridge"],
            h["control_port"],
            timeout=h["timeout_s"],
            retries=h["retries"],
            sequence_check=h["sequence_check"],
        )
        self._ecb = ecb
        try:
            mtu = ecb.path_mtu()
            plans = [
                plan_for(self.cfg, self.announcement, mtu=mtu, source=self.source, queue=q)
                for q in range(self.cfg["queues"]["count"])
            ]
            problems = [p for plan in plans for p in check_plan(self.cfg, plan, path_mtu=mtu)]
            problems += check_streams(plans)
            if problems:  # the same check fails for every queue's plan alike: said once
                raise HsbError(
                    f"bridge {plans[0].bridge} not programmed: "
                    + "; ".join(dict.fromkeys(problems))
                )
            self.plans = plans
            self.channels = [DataChannel(ecb, plan) for plan in plans]
            version = self.channels[0].version()
            if version < MINIMUM_HSB_IP_VERSION:
                raise HsbError(
                    f"bridge {plans[0].bridge}: HSB IP version {version:#06x}, the registers "
                    f"written here are {MINIMUM_HSB_IP_VERSION:#06x}'s and later's: update "
                    "the bridge's FPGA image"
                )
            bits, want = h["page_bits"] or DEFAULT_PAGE_BITS, page_bits_for(version)
            if bits != want:  # its frames' pages would be read wrong: refused before it streams
                raise HsbError(
                    f"bridge {plans[0].bridge}: HSB IP version {version:#06x} names the page in "
                    f"the end-of-frame immediate's low {want} bits, this transceiver reads "
                    f"{bits} (hsb.page_bits: {h['page_bits']}): set hsb.page_bits: {want}"
                )
            self._claim(self.channels, h["take_over"])
            for ch in self.channels:
                ch.configure()
            for ch in self.channels:
                ch.start()
        except EcbTimeout as e:
            self._abandon()
            lost = not isinstance(e, EcbPortUnreachable)  # silent: it may be restarting
            raise (HsbBridgeLost if lost else HsbError)(f"bridge {h['bridge']}: {e}") from None
        except EcbError as e:
            self._abandon()
            raise HsbError(f"bridge {h['bridge']}: {e}") from None
        except BaseException:
            self._abandon()
            raise
        return plans[0]

    def _claim(self, channels: list[DataChannel], take_over: bool) -> None:
        """Refuse, before anything is written, sensors whose registers send to another
        host: programming them would end that host's stream without a word to it."""
        taken: list[str] = []
        for ch in channels:
            _, holder = ch.registers()
            if holder is None or ch.is_ours(holder):
                continue
            if take_over:
                log.warning("%s: taken over from %s (hsb.take_over)", ch.name, holder)
                self.taken_from.append(holder)
            else:
                taken.append(f"{ch.name} is another host's: its registers send to {holder}")
        if taken:
            raise HsbError(
                f"{'; '.join(taken)}; not programmed, to leave that stream alone (stop it "
                "there, or take the sensor over: listen --take-over, hsb.take_over: true)"
            )

    def states(self) -> list[tuple[DataChannel, str, Holder | None]]:
        """Every sensor's registers as they are now (DataChannel.state: ours, cleared, taken,
        changed), marking nothing; HsbError if the bridge does not answer."""
        out = []
        for ch in self.channels:
            try:
                state, holder, _ = ch.relatched(ch.state)
            except EcbError as e:
                raise HsbError(f"{ch.name}: could not read its registers: {e}") from None
            out.append((ch, state, holder))
        return out

    def reopen(self, announcement: Announcement | None = None) -> StreamPlan:
        """Program the bridge again after it restarted: its registers were cleared, so
        nothing of the session before is there to undo (the old channels are dropped, and
        what a clean-up found cleared before was the restart, not another host)."""
        for ch in self.channels:
            ch.configured = False
        self.channels = []
        self._lost = []
        return self.open(announcement)

    def _abandon(self) -> None:
        """After a failed open: un-configure what was written, say so if that fails too."""
        try:
            self.close()
        except HsbError as e:
            log.error("%s", e)

    def stop(self) -> None:
        """Stop the sensors (their VP_MASK bits), leaving them configured: what is in flight
        still lands. HsbError if the bridge does not answer (``close()`` tries again)."""
        for ch in self.channels:
            if ch.configured:
                try:
                    ch.release(stop_only=True)
                except EcbError as e:
                    raise HsbError(f"bridge {ch.plan.bridge}: could not stop: {e}") from None

    def close(self) -> None:
        """Un-configure every sensor, each tried even when one fails; the failures raised
        together, each with the command that clears it by hand."""
        channels, self.channels = self.channels, []
        ecb, self._ecb = self._ecb, None
        failures: list[str] = []
        try:
            for ch in channels:
                if not ch.configured:
                    continue
                try:
                    ch.release()
                except EcbError as e:
                    failures.append(
                        f"bridge {ch.plan.bridge}: could not un-configure sensor "
                        f"{ch.plan.channel.sensor} ({e}); it may still be streaming at "
                        f"{ch.plan.host_ip}: run roce-transceiver hsb write --bridge "
                        f"{ch.plan.bridge} {ch.plan.channel.hif_address + VP_MASK:#x} 0 "
                        "once it answers"
                    )
            if failures:
                raise HsbError("; ".join(failures))
        finally:
            self._lost += [ch.lost for ch in channels if ch.lost is not None]
            if ecb is not None:
                ecb.close()

    def __enter__(self) -> HsbStream:
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def bridge_overrides(cfg: dict[str, Any], announcement: Announcement | None) -> dict[str, Any]:
    """What a transceiver streamed into by the bridge of ``cfg`` (its ``hsb`` section) takes
    from its announcement, as dotted keys: its MAC for ``peer.mac: auto`` (the neighbour
    table may not have it yet) and, for ``hsb.page_bits: null``, the page bits of its HSB IP
    version (hsb.page_bits_for). Nothing when it was not heard (``hsb.enumerate: false``)."""
    out: dict[str, Any] = {}
    if announcement is not None:
        if cfg["peer"]["mac"] == "auto":
            out["peer.mac"] = announcement.mac.lower()
        if cfg["hsb"]["page_bits"] is None:
            out["hsb.page_bits"] = page_bits_for(announcement.hsb_ip_version)
    return out
