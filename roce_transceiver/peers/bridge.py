"""A software Holoscan Sensor Bridge: the ``sensor`` peer behind a bridge's control plane, for
CI and for trying the control plane without a board (docs/hsb.md).

It does what a bridge does, as far as a host can see:
- announces each data plane on the enumeration port (hsb_control.announcement_bytes);
- answers the Ethernet Control Bus on its control port: WRITE/READ DWORD and BLOCK, the
  acknowledgement and sequence-check flags, and a status for every request it refuses
  (unknown address 0x03, command 0x04, length 0x05, flags 0x06, block size 0x08, sequence
  0x0B). Its registers: HSB_IP_VERSION (0x80) and FPGA_DATE (0x84), read only; each data
  plane's hif block (0x02000300 + 0x10000 x plane: PACKET_SIZE, PACKET_UDP_PORT, VP_MASK);
  each sensor interface's vp block (0x1000 + 0x40 x index: QP .. HOST_UDP_PORT);
- streams a sensor only while its VP_MASK bit is set and its registers say where, and only
  there: the destination MAC, IP and UDP port, the QP, rkey, page address, increment and
  count, the frame size and packet size are the registers' (a
  :class:`~roce_transceiver.peers.sensor.Sensor` built from them, records placed as HSB's
  IP does). A frame it cannot send as programmed (no destination, a frame larger than a page)
  is counted in ``refused`` with the reason, not sent.

Faults for the tests (:class:`BridgeFaults`): requests lost on the way in, replies lost on the
way out (the request executed), replies held back past the host's timeout (sent just before a
later request's reply), replies cut short, a status answered for requests touching an address
(or only for its reads, or only for its writes), a bridge that stops answering after some
requests (a hang, a power cut) while it keeps streaming what it was programmed to, as a real
one would, and a reset (:meth:`SoftwareBridge.reset`, or after some frames or requests): the
bridge forgets its registers, stops streaming, is silent for a while (no announcement, no
reply), then announces itself again with its uptime from 0, and its sensors count frames and
PSNs from 0 once programmed again, as a board that restarted does.
"""

from __future__ import annotations

import random
import select
import socket
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

from roce_transceiver.hsb import page_bits_for
from roce_transceiver.hsb_control import (
    ANNOUNCE_SOURCE_PORT,
    CONTROL_PORT,
    FLAG_ACK,
    FLAG_SEQUENCE_CHECK,
    HEADER_BYTES,
    MAX_BLOCK,
    READ_BLOCK,
    READ_DWORD,
    REPLY,
    WRITE_BLOCK,
    WRITE_DWORD,
    announcement_bytes,
)
from roce_transceiver.hsb_stream import (
    BUFFER_LENGTH,
    DATA_SOURCE_PORT,
    HIF_BASE,
    HIF_STRIDE,
    HOST_IP,
    HOST_MAC_HIGH,
    HOST_MAC_LOW,
    HOST_UDP_PORT,
    HSB_IP_VERSION,
    MAX_BUFF,
    PACKET_SIZE,
    PACKET_UDP_PORT,
    PAGE_INC,
    PAGE_LSB,
    PAGE_MSB,
    QP,
    RKEY,
    UNIT,
    VP_BASE,
    VP_MASK,
    VP_STRIDE,
)
from roce_transceiver.peers.link import ROCE_PORT, Addresses, Link, parse_offsets
from roce_transceiver.peers.rc_responder import RcFaults, RcResponder
from roce_transceiver.peers.sensor import Sensor, SentFrame

__all__ = [
    "BRIDGE_UUID",
    "BridgeFaults",
    "HostMessages",
    "Request",
    "SoftwareBridge",
    "StreamedFrame",
]

BRIDGE_UUID = "52545842-7269-6467-6500-000000000001"  # ours, in no board table: defaults apply
FPGA_DATE = 0x84
INVALID_ADDR, INVALID_CMD, INVALID_PKT_LENGTH = 0x03, 0x04, 0x05
INVALID_FLAGS, INVALID_BLOCK_SIZE, SEQUENCE_CHECK_FAIL = 0x06, 0x08, 0x0B
VP_REGISTERS = 12  # QP (0x00) .. HOST_UDP_PORT (0x2C)
HIF_REGISTERS = 4


@dataclass
class BridgeFaults:
    drop_requests: float = 0.0  # rate of requests lost on the way in
    drop_replies: float = 0.0  # rate of replies lost (the request was executed)
    status: dict[int, int] = field(default_factory=dict)  # address -> status to answer
    # address -> status answered to reads (writes) touching it; writes (reads) go through
    read_status: dict[int, int] = field(default_factory=dict)
    write_status: dict[int, int] = field(default_factory=dict)
    mute_after: int | None = None  # requests answered before it answers none
    # Datagram i (0 first, counted as they come in) -> j > i: i's reply is held back and
    # sent just before j's, past the host's timeout for i, while it waits for j's.
    late: dict[int, int] = field(default_factory=dict)
    truncate: int | None = None  # replies cut to this many bytes (a bridge answering short)
    # Resets (each once): after sensor 0 sent this many frames (mid-stream), after this many
    # requests answered (mid-configuration); silent this long after each.
    reset_after_frames: int | None = None
    reset_after_requests: int | None = None
    reset_down_s: float = 0.3
    # False: its announced uptime runs on across a reset (no evidence of it, as with HSB's
    # emulator, whose uptime field is little-endian where hosts read it big-endian).
    reset_restarts_uptime: bool = True


@dataclass(frozen=True)
class HostMessages:
    """The bridge's receive side for messages from the host, an RC responder as HSB 2.7's
    FPGA is for host-to-bridge traffic (peers/rc_responder.py: in-order ACKs, duplicates
    acknowledged again and not taken twice, a packet past a gap dropped, RNR NAKs when not
    ready): RC SENDs to queue pair ``qpn`` on the bridge's address, UDP port 4791, from the
    host at ``host_ip`` whose queue pair ``host_qpn`` gets the answers (a host transceiver's
    ``qp.peer_qpn``, ``peer.ip`` and ``qp.qpn``); its first PSN ``first_psn`` (``qp.tx_psn``).
    """

    qpn: int
    host_qpn: int
    host_ip: str
    first_psn: int = 0
    faults: RcFaults = field(default_factory=RcFaults)


class Request(NamedTuple):
    """A request the bridge took, as its log has it."""

    command: int
    address: int  # the first pair's, -1 without one
    status: int  # what it answered
    flags: int
    sequence: int


@dataclass(frozen=True)
class StreamedFrame:
    """A frame the bridge sent, as the host should find it."""

    sensor: int  # vp index
    frame_number: int
    page: int
    bytes: int
    crc32: int
    qpn: int
    host_ip: str
    lost: int
    resets: int = 0  # the bridge's resets before it: frame numbers restart at each


class SoftwareBridge:
    """A bridge at ``ip`` (an address of this host or namespace). ``link``: ``udp`` sends its
    packets from a UDP socket (BTH onward; the kernel adds the rest), ``packet`` whole frames
    on ``interface`` (root). ``frames``: how many frames each sensor sends at most;
    ``rate``: frames per second per sensor (None: as fast as it can); ``uptime``: seconds it
    announces it has been up at its start (a board that ran a while: a restart then shows)."""

    def __init__(
        self,
        ip: str,
        *,
        mac: str = "02:48:53:42:00:01",
        control_port: int = CONTROL_PORT,
        data_planes: int = 1,
        sensors: int = 2,
        sifs_per_sensor: int = 2,
        announce_to: tuple[str, int] | None = None,
        announce_interval: float = 1.0,
        link: str = "udp",
        interface: str | None = None,
        frames: int | None = None,
        rate: float | None = None,
        hsb_ip_version: int = 0x2603,
        faults: BridgeFaults | None = None,
        seed: int = 1,
        on_frame: Callable[[StreamedFrame], None] | None = None,
        uptime: float = 0.0,
        host_messages: HostMessages | None = None,
    ) -> None:
        if link not in ("udp", "packet"):
            raise ValueError(f"link {link!r}: 'udp' or 'packet'")
        if link == "packet" and not interface:
            raise ValueError("link 'packet' needs an interface")
        if host_messages is not None and link != "udp":
            raise ValueError("host_messages: the bridge takes them over its udp link only")
        self.host_messages = host_messages
        self.taken: list[bytes] = []  # the host's messages, each once, in order
        self.rc: RcResponder | None = None  # their responder, once started
        self.ip, self.mac = ip, mac
        self.control_port = control_port
        self.data_planes = data_planes
        self.vps = sensors * sifs_per_sensor
        self.sifs_per_sensor = sifs_per_sensor
        self.announce_to = announce_to
        self.announce_interval = announce_interval
        self.link, self.interface = link, interface
        self.frames, self.rate = frames, rate
        self.hsb_ip_version = hsb_ip_version
        self.faults = faults or BridgeFaults()
        self.on_frame = on_frame
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._regs: dict[int, int] = {HSB_IP_VERSION: hsb_ip_version, FPGA_DATE: 0x20261201}
        for dp in range(data_planes):
            for i in range(HIF_REGISTERS):
                self._regs[HIF_BASE + HIF_STRIDE * dp + 4 * i] = 0
        for vp in range(self.vps):
            for i in range(VP_REGISTERS):
                self._regs[VP_BASE + VP_STRIDE * vp + 4 * i] = 0
        self._read_only = {HSB_IP_VERSION, FPGA_DATE}
        self._latched: int | None = None
        self.answered = 0  # requests answered
        self.received = 0  # datagrams on the control port (the index BridgeFaults.late counts)
        self.lost_requests = 0  # lost on the way in (BridgeFaults.drop_requests)
        self.lost_replies = 0  # executed, their reply lost (BridgeFaults.drop_replies)
        self.requests: list[Request] = []  # every request that reached the bridge
        self._held: dict[int, list[tuple[bytes, tuple[str, int]]]] = {}  # BridgeFaults.late
        self.sent: dict[int, list[StreamedFrame]] = {vp: [] for vp in range(self.vps)}
        self.refused: dict[int, list[str]] = {vp: [] for vp in range(self.vps)}
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._socks: list[socket.socket] = []
        self.errors: list[str] = []  # what went wrong in a thread
        self._started = time.monotonic() - uptime  # its announcements count from here
        self.resets = 0  # resets so far (reset(), BridgeFaults.reset_after_*)
        self._down_until = 0.0  # a reset bridge is silent until then

    # -- life cycle --------------------------------------------------------------
    def start(self) -> SoftwareBridge:
        control = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            control.bind((self.ip, self.control_port))
        except OSError as e:
            control.close()
            raise OSError(
                e.errno, f"bridge control port {self.ip}:{self.control_port}: {e.strerror}"
            ) from None
        self.control_port = control.getsockname()[1]
        self._socks.append(control)
        self._control = control
        self._data = self._open_data()
        self._socks.append(self._data)
        if self.host_messages is not None:
            self._spawn(self._take_messages(), "messages")
        self._spawn(self._serve, "control")
        if self.announce_to:
            self._spawn(self._announce, "announce")
        for vp in range(self.vps):
            self._spawn(lambda vp=vp: self._stream(vp), f"stream{vp}")
        return self

    def _open_data(self) -> socket.socket:
        if self.link == "packet":
            s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0003))
            s.bind((self.interface, 0))
            return s
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.setsockopt(socket.IPPROTO_IP, getattr(socket, "IP_MTU_DISCOVER", 10), 2)  # DF
        s.bind((self.ip, DATA_SOURCE_PORT))
        return s

    def _take_messages(self) -> Callable[[], None]:
        """The host's messages' socket (bound now: a failure fails start()) and its loop."""
        hm = self.host_messages
        assert hm is not None
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            s.bind((self.ip, ROCE_PORT))
        except OSError as e:
            s.close()
            raise OSError(e.errno, f"bridge {self.ip}:{ROCE_PORT}: {e.strerror}") from None
        self._socks.append(s)
        own = Addresses(
            self.mac, self.ip, ROCE_PORT, hm.qpn, "00:00:00:00:00:00", hm.host_ip, hm.host_qpn, "RC"
        )
        link = Link(s, own, udp=True)
        self.rc = rc = RcResponder(own, expected_psn=hm.first_psn, faults=hm.faults)

        def loop() -> None:
            while not self._stop.is_set():
                p = link.receive(0.05)  # the stop flag's period
                if p is None or self._down():
                    continue
                got, answers = rc.receive(p)
                self.taken.extend(got)
                for a in answers:
                    link.send(a)

        return loop

    def _spawn(self, target: Callable[[], None], name: str) -> None:
        def run() -> None:
            try:
                target()
            except Exception as e:  # a thread's failure is reported, not lost
                if not self._stop.is_set():
                    self.errors.append(f"{name}: {type(e).__name__}: {e}")

        t = threading.Thread(target=run, name=f"bridge-{name}", daemon=True)
        t.start()
        self._threads.append(t)

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout)
        for s in self._socks:
            s.close()
        self._threads, self._socks = [], []

    def __enter__(self) -> SoftwareBridge:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def reset(self, down_s: float = 0.3) -> None:
        """Restart as a board does: every hif and vp register 0 (nothing streams), the
        sequence unlatched, silent for ``down_s`` (no announcement, no reply, no frame), then
        announcing again with its uptime from 0; its sensors count frames and PSNs from 0."""
        with self._lock:
            for address in self._regs:
                if address not in self._read_only:
                    self._regs[address] = 0
            self._latched = None
            self._down_until = time.monotonic() + down_s
            if self.faults.reset_restarts_uptime:
                self._started = self._down_until
            self.resets += 1

    def _down(self) -> bool:
        return time.monotonic() < self._down_until

    # -- registers ---------------------------------------------------------------
    def register(self, address: int) -> int:
        with self._lock:
            return self._regs[address]

    def vp_address(self, vp: int) -> int:
        return VP_BASE + VP_STRIDE * vp

    def streaming(self, vp: int) -> bool:
        """Is ``vp``'s bit set in a data plane's VP_MASK?"""
        with self._lock:
            return self._enabled(vp) is not None

    def _enabled(self, vp: int) -> int | None:
        for dp in range(self.data_planes):
            if self._regs[HIF_BASE + HIF_STRIDE * dp + VP_MASK] >> vp & 1:
                return dp
        return None

    # -- the control plane -------------------------------------------------------
    def _serve(self) -> None:
        while not self._stop.is_set():
            ready, _, _ = select.select([self._control], [], [], 0.05)
            if not ready:
                continue
            data, host = self._control.recvfrom(65536)
            index, self.received = self.received, self.received + 1
            f = self.faults
            if self._down() or (f.mute_after is not None and self.answered >= f.mute_after):
                continue
            if f.drop_requests and self._rng.random() < f.drop_requests:
                self.lost_requests += 1
                continue
            reply = self._handle(data)
            if reply is None:
                continue
            if f.drop_replies and self._rng.random() < f.drop_replies:
                self.lost_replies += 1
                continue
            if f.truncate is not None:
                reply = reply[: f.truncate]
            if index in f.late:
                self._held.setdefault(f.late[index], []).append((reply, host))
                continue
            for late, to in self._held.pop(index, []):
                self.answered += 1
                self._control.sendto(late, to)
            self.answered += 1
            self._control.sendto(reply, host)
            if f.reset_after_requests is not None and self.answered == f.reset_after_requests:
                self.reset(f.reset_down_s)

    def _handle(self, data: bytes) -> bytes | None:
        if len(data) < HEADER_BYTES:
            return None  # not even a header: nothing to answer to
        command, flags, sequence = data[0], data[1], struct.unpack_from(">H", data, 2)[0]
        body = data[HEADER_BYTES:]
        pairs: list[tuple[int, int]] = []
        status = self._check(command, flags, sequence, body)
        if status == 0:
            if command == READ_DWORD and len(body) == 4:
                body += bytes(4)  # a DWORD read may send the address alone
            pairs = [struct.unpack_from(">II", body, 8 * m) for m in range(len(body) // 8)]
            status = self._execute(command, pairs)
        self.requests.append(
            Request(command, pairs[0][0] if pairs else -1, status, flags, sequence)
        )
        if command in (WRITE_DWORD, WRITE_BLOCK) and not flags & FLAG_ACK:
            return None
        reply = struct.pack(">BBHBB", command | REPLY, flags, sequence, status, 0)
        for address, value in pairs:
            reply += struct.pack(">II", address, value)
        latched = self._latched if self._latched is not None else 0
        return reply + struct.pack(">HH", latched, 0)

    def _check(self, command: int, flags: int, sequence: int, body: bytes) -> int:
        if command not in (WRITE_DWORD, WRITE_BLOCK, READ_DWORD, READ_BLOCK):
            return INVALID_CMD
        if flags & ~(FLAG_ACK | FLAG_SEQUENCE_CHECK):
            return INVALID_FLAGS
        dword = command in (WRITE_DWORD, READ_DWORD)
        if dword and len(body) not in ((4, 8) if command == READ_DWORD else (8,)):
            return INVALID_PKT_LENGTH
        if not dword:
            if not body or len(body) % 8:
                return INVALID_PKT_LENGTH
            if len(body) // 8 > MAX_BLOCK:
                return INVALID_BLOCK_SIZE
        if (
            flags & FLAG_SEQUENCE_CHECK
            and self._latched is not None
            and sequence != (self._latched + 1) & 0xFFFF
        ):
            return SEQUENCE_CHECK_FAIL
        self._latched = sequence
        return 0

    def _execute(self, command: int, pairs: list[tuple[int, int]]) -> int:
        write = command in (WRITE_DWORD, WRITE_BLOCK)
        with self._lock:
            for address, _ in pairs:
                if address in self.faults.status:
                    return self.faults.status[address]
                one_way = self.faults.write_status if write else self.faults.read_status
                if address in one_way:
                    return one_way[address]
                if address not in self._regs or (write and address in self._read_only):
                    return INVALID_ADDR
            for m, (address, value) in enumerate(pairs):
                if write:
                    self._regs[address] = value
                else:
                    pairs[m] = (address, self._regs[address])
        return 0

    # -- enumeration -------------------------------------------------------------
    def _announce(self) -> None:
        assert self.announce_to is not None
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((self.ip, ANNOUNCE_SOURCE_PORT))
            while not self._stop.is_set():
                if self._down():
                    self._stop.wait(0.01)
                    continue
                seconds = int(time.monotonic() - self._started)
                for dp in range(self.data_planes):
                    packet = announcement_bytes(
                        self.ip,
                        self.mac,
                        data_plane=dp,
                        uuid=BRIDGE_UUID,
                        serial=b"RTBRIDG",
                        hsb_ip_version=self.hsb_ip_version,
                        fpga_crc=0x5AA5,
                        seconds=seconds,
                    )
                    s.sendto(packet, self.announce_to)
                self._stop.wait(self.announce_interval)

    # -- the data plane ----------------------------------------------------------
    def _programmed(self, vp: int) -> tuple[tuple[int, ...], str | None]:
        """The registers ``vp`` streams by (a snapshot), and why it cannot, if it cannot."""
        with self._lock:
            dp = self._enabled(vp)
            if dp is None:
                return (), "not enabled"
            base = VP_BASE + VP_STRIDE * vp
            v = tuple(self._regs[base + 4 * i] for i in range(VP_REGISTERS))
            hif = HIF_BASE + HIF_STRIDE * dp
            snapshot = (*v, self._regs[hif + PACKET_SIZE], self._regs[hif + PACKET_UDP_PORT])
        reg = dict(zip(range(0, 4 * VP_REGISTERS, 4), v, strict=True))
        if not reg[HOST_IP] or not reg[HOST_UDP_PORT]:
            return snapshot, "no destination (HOST_IP, HOST_UDP_PORT)"
        if not reg[BUFFER_LENGTH] or not reg[PAGE_INC] or not snapshot[-2]:
            return snapshot, "no frame size, page increment or packet size"
        if reg[MAX_BUFF] >> 16 & 0xFFF:
            return snapshot, "a first page other than 0 (MAX_BUFF[27:16])"
        return snapshot, None

    def _sensor(self, snapshot: tuple[int, ...], psn: int) -> tuple[Sensor, int, int]:
        reg = dict(zip(range(0, 4 * VP_REGISTERS, 4), snapshot[:VP_REGISTERS], strict=True))
        mac = reg[HOST_MAC_HIGH].to_bytes(2, "big") + reg[HOST_MAC_LOW].to_bytes(4, "big")
        addresses = Addresses(
            own_mac=self.mac,
            own_ip=self.ip,
            own_port=snapshot[-1] or DATA_SOURCE_PORT,
            own_qpn=1,
            their_mac=":".join(f"{b:02x}" for b in mac),
            their_ip=socket.inet_ntoa(reg[HOST_IP].to_bytes(4, "big")),
            their_qpn=reg[QP],
            transport="UC",
        )
        sensor = Sensor(
            addresses,
            va=reg[PAGE_LSB] | reg[PAGE_MSB] << 32,
            rkey=reg[RKEY],
            page_bytes=reg[PAGE_INC] * UNIT,
            pages=(reg[MAX_BUFF] & 0xFFF) + 1,
            payload=snapshot[-2] * UNIT,
            first_psn=psn,
            record="hsb",
            page_bits=page_bits_for(self.hsb_ip_version),  # its version's end-of-frame immediate
        )
        return sensor, reg[BUFFER_LENGTH], reg[HOST_UDP_PORT]

    def _stream(self, vp: int) -> None:
        sensor: Sensor | None = None
        current: tuple[int, ...] = ()
        psn = n = port = frame_bytes = 0
        resets = self.resets
        next_at = time.monotonic()
        while not self._stop.is_set() and (self.frames is None or n < self.frames):
            if resets != self.resets:  # restarted: frames and PSNs from 0 once programmed
                sensor, current, psn, n, resets = None, (), 0, 0, self.resets
            snapshot, why = self._programmed(vp)
            if why is not None:
                if why != "not enabled" and (not self.refused[vp] or self.refused[vp][-1] != why):
                    self.refused[vp].append(why)
                self._stop.wait(0.002)  # a register poll, as the FPGA's state machine waits
                continue
            if snapshot != current:
                next_at = time.monotonic()  # paced from its start, not from the bridge's
                if sensor is not None:
                    psn = sensor.psn  # the PSN runs on across a reprogramming, as HSB's does
                sensor, frame_bytes, port = self._sensor(snapshot, psn)
                current = snapshot
            assert sensor is not None
            if frame_bytes > sensor.max_frame_bytes:
                why = f"BUFFER_LENGTH {frame_bytes} is more than a page holds"
                if not self.refused[vp] or self.refused[vp][-1] != why:
                    self.refused[vp].append(why)
                self._stop.wait(0.002)
                continue
            sent = sensor.frame(n, _content(vp, n, frame_bytes))
            self._send(sent, sensor.addresses.their_ip, port)
            record = StreamedFrame(
                vp,
                n,
                sent.page,
                len(sent.content),
                sent.crc32,
                sensor.addresses.their_qpn,
                sensor.addresses.their_ip,
                sent.lost,
                resets,
            )
            self.sent[vp].append(record)
            if self.on_frame:
                self.on_frame(record)
            n += 1
            f = self.faults
            if vp == 0 and self.resets == 0 and n == f.reset_after_frames:
                self.reset(f.reset_down_s)
            if self.rate:
                next_at += 1.0 / self.rate
                self._stop.wait(max(0.0, next_at - time.monotonic()))

    def _send(self, sent: SentFrame, host_ip: str, port: int) -> None:
        for p in sent.packets:
            if self.link == "packet":
                self._data.send(p)
            else:
                self._data.sendto(p[parse_offsets(p) :], (host_ip, port))


def _content(vp: int, n: int, size: int) -> bytes:
    """Frame ``n`` of sensor ``vp``: a counting pattern of its own per sensor and frame."""
    pattern = bytes((n * 7 + vp * 61 + i) & 0xFF for i in range(256))
    return (pattern * (size // 256 + 1))[:size]
