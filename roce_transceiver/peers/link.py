"""The peer's side of the wire: whole Ethernet frames in and out, in either socket NIC mode.

A peer mirrors the transceiver's configuration: its own addresses are the config's ``peer``
section, the transceiver's are ``local``. ``packet`` mode sends and receives raw frames on an
interface (root); ``udp`` mode sends the frame from its BTH on through a UDP socket bound to
the peer's IP, port 4791, and rebuilds the headers of what it receives the way the socket
NIC does (docs/socket_nic.md), so ICRCs verify on both sides.
"""

from __future__ import annotations

import ipaddress
import socket
import struct
import time
from dataclasses import dataclass
from typing import Any

from roce_transceiver.protocol import Packet, build, parse

__all__ = ["Addresses", "Link", "LinkError", "open_link", "packet_bytes"]

ROCE_PORT = 4791
_IP_MTU_DISCOVER = getattr(socket, "IP_MTU_DISCOVER", 10)  # Linux's values
_IP_PMTUDISC_DO = getattr(socket, "IP_PMTUDISC_DO", 2)


class LinkError(RuntimeError):
    """The peer cannot open its side of the wire; the message says why."""


@dataclass(frozen=True)
class Addresses:
    """Both ends, seen from the peer."""

    own_mac: str
    own_ip: str
    own_port: int  # UDP source port of the peer's frames
    own_qpn: int
    their_mac: str
    their_ip: str
    their_qpn: int
    transport: str  # RC or UC

    @classmethod
    def mirror(cls, cfg: dict[str, Any], own_port: int = ROCE_PORT) -> Addresses:
        """The peer of a transceiver configured by ``cfg`` (a loaded config)."""
        return cls(
            own_mac=cfg["peer"]["mac"],
            own_ip=cfg["peer"]["ip"],
            own_port=own_port,
            own_qpn=cfg["qp"]["peer_qpn"],
            their_mac=cfg["local"]["mac"],
            their_ip=cfg["local"]["ip"],
            their_qpn=cfg["qp"]["qpn"],
            transport=cfg["qp"]["transport"],
        )

    def frame(self, op: str, payload: bytes, psn: int, **fields: Any) -> bytes:
        """A frame from the peer to the transceiver's QP."""
        fields.setdefault("dest_qp", self.their_qpn)
        return build(
            f"{self.transport}_{op}",
            payload,
            eth_src=self.own_mac,
            eth_dst=self.their_mac,
            ip_src=self.own_ip,
            ip_dst=self.their_ip,
            udp_sport=self.own_port,
            psn=psn,
            **fields,
        )


class Link:
    """Frames to and from the transceiver; ``receive`` returns those for our QP, decoded."""

    def __init__(
        self,
        sock: socket.socket,
        addresses: Addresses,
        udp: bool,
        rx_sock: socket.socket | None = None,
    ) -> None:
        self.sock = sock
        self.rx_sock = rx_sock or sock  # udp mode from a port other than 4791: answers come to 4791
        self.addresses = addresses
        self.udp = udp
        self.family = socket.AF_INET6 if ":" in addresses.own_ip else socket.AF_INET

    def close(self) -> None:
        if self.rx_sock is not self.sock:
            self.rx_sock.close()
        self.sock.close()

    def __enter__(self) -> Link:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send(self, frame: bytes) -> None:
        if self.udp:
            start = parse_offsets(frame)
            self.sock.sendto(frame[start:], (self.addresses.their_ip, ROCE_PORT))
        else:
            self.sock.send(frame)

    def receive(self, timeout: float) -> Packet | None:
        """The next frame addressed to our QP within ``timeout`` s, or None."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            self.rx_sock.settimeout(left)
            try:
                data, src = self.rx_sock.recvfrom(65536)
            except TimeoutError:
                return None
            frame = self._rebuild(data, src) if self.udp else data
            try:
                p = parse(frame)
            except ValueError:
                continue  # not RoCEv2: not for us
            if p.dest_qp == self.addresses.own_qpn:
                return p

    def _rebuild(self, datagram: bytes, src: tuple[Any, ...]) -> bytes:
        """Ethernet, IP and UDP headers as the wire had them (IPv4 ID 0, DF; TTL masked)."""
        a = self.addresses
        head = bytearray(
            build(
                f"{a.transport}_SEND_ONLY",
                b"",
                eth_src=a.their_mac,
                eth_dst=a.own_mac,
                ip_src=src[0],
                ip_dst=a.own_ip,
                udp_sport=src[1],
            )[: parse_offsets_for(self.family)]
        )
        ip_at, udp_at = 14, parse_offsets_for(self.family) - 8
        if self.family == socket.AF_INET:
            struct.pack_into(">H", head, ip_at + 2, 20 + 8 + len(datagram))
        else:
            struct.pack_into(">H", head, ip_at + 4, 8 + len(datagram))
        struct.pack_into(">H", head, udp_at + 4, 8 + len(datagram))
        return bytes(head) + datagram


def packet_bytes(cfg: dict[str, Any], op: str, payload: int) -> int:
    """Bytes of a packet of ``op`` (e.g. ``SEND_ONLY``, ``RDMA_WRITE_ONLY``) with ``payload``
    bytes, as a peer of the transceiver configured by ``cfg`` builds it (its addresses, IP
    version and the op's extension headers): what must fit an rx slot (``queues.slot_bytes``)
    for the socket NIC to take it."""
    from roce_transceiver.protocol import opcode_row

    headers = opcode_row(f"{cfg['qp']['transport']}_{op}").headers
    fields = {"va": 0, "rkey": 0} if "RETH" in headers else {}
    if "ImmDt" in headers:
        fields["imm"] = 0
    return len(Addresses.mirror(cfg).frame(op, bytes(payload), psn=0, **fields))


def parse_offsets_for(family: int) -> int:
    """Bytes of Ethernet + IP + UDP for an untagged frame of ``family``."""
    return 14 + (20 if family == socket.AF_INET else 40) + 8


def parse_offsets(frame: bytes) -> int:
    """Where the BTH starts in ``frame``."""
    ethertype = struct.unpack_from(">H", frame, 12)[0]
    off = 14
    if ethertype == 0x8100:
        ethertype = struct.unpack_from(">H", frame, 16)[0]
        off = 18
    return off + ((frame[off] & 0x0F) * 4 if ethertype == 0x0800 else 40) + 8


def open_link(
    cfg: dict[str, Any], mode: str, interface: str | None = None, own_port: int = ROCE_PORT
) -> Link:
    """The peer's link to the transceiver configured by ``cfg``, in ``mode`` (udp|packet)."""
    addresses = Addresses.mirror(cfg, own_port)
    if mode == "udp":
        family = (
            socket.AF_INET6
            if ipaddress.ip_address(addresses.own_ip).version == 6
            else (socket.AF_INET)
        )
        s = socket.socket(family, socket.SOCK_DGRAM)
        if family == socket.AF_INET:
            s.setsockopt(socket.IPPROTO_IP, _IP_MTU_DISCOVER, _IP_PMTUDISC_DO)  # DF: IP ID 0
        # The source port is covered by the ICRC: the datagrams must leave from the one in
        # the frames; what the transceiver sends comes to 4791, so a peer sending from
        # another port (a sensor: 12288) listens there with a second socket.
        socks = [s]
        try:
            s.bind((addresses.own_ip, own_port))
            if own_port != ROCE_PORT:
                socks.append(socket.socket(family, socket.SOCK_DGRAM))
                socks[1].bind((addresses.own_ip, ROCE_PORT))
        except OSError as e:
            for x in socks:
                x.close()
            raise LinkError(f"udp: bind on {addresses.own_ip}: {e.strerror}") from None
        return Link(s, addresses, udp=True, rx_sock=socks[-1])
    if mode != "packet":
        raise LinkError(f"mode {mode!r}: must be 'udp' or 'packet'")
    if not interface:
        raise LinkError("packet mode needs an interface")
    try:
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0003))
    except PermissionError:
        raise LinkError("packet mode needs root or CAP_NET_RAW (AF_PACKET)") from None
    try:
        s.bind((interface, 0))
    except OSError as e:
        s.close()
        raise LinkError(f"packet: interface {interface!r}: {e.strerror}") from None
    return Link(s, addresses, udp=False)
