"""The Holoscan Sensor Bridge's control plane, host side: enumeration and the Ethernet Control
Bus (ECB). Python, off the data path (docs/hsb.md).

**Enumeration.** A bridge announces each of its data planes (Ethernet ports) about once a
second with a 300-byte BOOTP request, UDP from port 12268 to 12267, broadcast. The vendor
area (BOOTP ``vend``, byte 236 of the datagram) carries tag 0xE0, ``NVDA``, the data plane,
the enumeration version (1 or 2), the board id (LE), the FPGA UUID (v2; v1: a 20-byte board
version), the serial number (7 bytes), the HSB IP version and the FPGA CRC (LE).
:func:`enumerate_bridges` listens and lists what it heard; :func:`parse_announcement` reads one
datagram and says at which offset one that is not an announcement goes wrong.

**ECB.** UDP to the bridge's port 8192: a request is ``cmd, flags, sequence (BE16), 0, 0``
and then ``address, value`` (BE32 each; a DWORD read sends the address only). Commands:
WRITE_DWORD 0x04, WRITE_BLOCK 0x09, READ_DWORD 0x14, READ_BLOCK 0x19; flags bit 0 asks for an
acknowledgement, bit 1 for the sequence check (the bridge refuses, with status 0x0B, a
sequence that is not one more than the last it took). The reply is the command + 0x80, the
flags, the sequence, the status byte, a reserved byte, the ``address, value`` pairs and the
latched sequence. :class:`Ecb` sends one request at a time (the bridge executes one at a
time), matches the reply by command and sequence, resends on silence up to ``retries`` times
without the sequence check (the first try may have been executed, its reply lost), turns
every status but success into :class:`EcbStatusError` naming the status, and a successful
reply without the pairs asked for into :class:`EcbError` saying how short it was.
"""

from __future__ import annotations

import errno
import ipaddress
import select
import socket
import struct
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

__all__ = [
    "BOARDS",
    "CONTROL_PORT",
    "ENUMERATION_PORT",
    "SEQUENCE_CHECK_FAIL",
    "STATUS",
    "Announcement",
    "Ecb",
    "EcbError",
    "EcbPortUnreachable",
    "EcbStatusError",
    "EcbTimeout",
    "EnumerationError",
    "announcement_bytes",
    "enumerate_bridges",
    "find_bridge",
    "parse_announcement",
    "status_name",
]

CONTROL_PORT = 8192  # the bridge's ECB port
ENUMERATION_PORT = 12267  # where announcements go (BOOTP's server port is HSB's 12267)
ANNOUNCE_SOURCE_PORT = 12268

WRITE_DWORD, WRITE_BLOCK, READ_DWORD, READ_BLOCK = 0x04, 0x09, 0x14, 0x19
COMMANDS = {
    WRITE_DWORD: "WRITE_DWORD",
    WRITE_BLOCK: "WRITE_BLOCK",
    READ_DWORD: "READ_DWORD",
    READ_BLOCK: "READ_BLOCK",
}
REPLY = 0x80  # a reply's command is the request's plus this
FLAG_ACK = 0x01
FLAG_SEQUENCE_CHECK = 0x02
HEADER_BYTES = 6  # cmd, flags, sequence, status (reserved in a request), reserved
MAX_BLOCK = 511  # APB operations in one block request (HSB user guide, "ECB block read and write")

#: The status byte of a reply: the bridge's codes (HSB user guide, "Controlplane", table 4)
#: and those hololink names beside them (hololink.hpp RESPONSE_*), with what each means.
STATUS: dict[int, tuple[str, str]] = {
    0x00: ("SUCCESS", "done"),
    0x02: ("ERROR_GENERAL", "the bridge failed the request"),
    0x03: ("INVALID_ADDR", "no register at that address, or the APB access timed out"),
    0x04: ("INVALID_CMD", "the bridge does not know the command"),
    0x05: ("INVALID_PKT_LENGTH", "the request's length does not fit its command"),
    0x06: ("INVALID_FLAGS", "the bridge refused the request's flags"),
    0x07: ("BUFFER_FULL", "the bridge's request buffer is full"),
    0x08: ("INVALID_BLOCK_SIZE", "too many operations in one block request"),
    0x09: ("INVALID_INDIRECT_ADDR", "the indirect address is not valid"),
    0x0A: ("COMMAND_TIMEOUT", "the bridge timed out executing the request"),
    0x0B: (
        "SEQUENCE_CHECK_FAIL",
        "the sequence is not one more than the last the bridge took (another host on its "
        "control port, or requests reordered)",
    ),
}
#: Statuses that say "not now" rather than "no": the request is sent again.
RETRYABLE = frozenset({0x07, 0x0A})
SEQUENCE_CHECK_FAIL = 0x0B


def status_name(code: int) -> str:
    """``0x03 INVALID_ADDR (no register at that address, ...)``; unknown codes say so."""
    name, why = STATUS.get(code, ("UNKNOWN", "a status this host does not know"))
    return f"{code:#04x} {name} ({why})"


class EcbError(RuntimeError):
    """An ECB request failed; the message names the request and the bridge."""


class EcbTimeout(EcbError):
    """No reply came: the message says how many tries, how long each, and what else came."""


class EcbPortUnreachable(EcbTimeout):
    """Nothing listens on the control port (an ICMP port unreachable came back at once)."""


class EcbStatusError(EcbError):
    """The bridge answered with a status other than success (``status``)."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


def _u32(what: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be an int, not {type(value).__name__}")
    if not 0 <= value <= 0xFFFFFFFF:
        raise ValueError(f"{what} {value:#x}: must be a 32-bit value")
    return value


def _address(value: int) -> int:
    _u32("address", value)
    if value % 4:
        raise ValueError(f"address {value:#x}: ECB addresses are 4-byte aligned")
    return value


@dataclass
class EcbCounters:
    requests: int = 0
    retries: int = 0  # requests sent again after a silence or a retryable status
    ignored: int = 0  # datagrams that were not the reply asked for (stale, malformed)


class Ecb:
    """A client of one bridge's control port: one request at a time (a lock), as the bridge
    takes them. ``timeout`` is per try; a request is tried ``1 + retries`` times.

    The bridge keeps one sequence for its control port, so every stream of a process that
    talks to one bridge must share one client (:meth:`shared`): two clients would each
    break the other's sequence (SEQUENCE_CHECK_FAIL)."""

    _shared: ClassVar[dict[tuple[str, int], Ecb]] = {}
    _shared_lock: ClassVar[threading.Lock] = threading.Lock()

    @classmethod
    def shared(cls, ip: str, port: int = CONTROL_PORT, **kw: Any) -> Ecb:
        """The process's client of the bridge at ``ip:port`` (made with ``kw`` by its first
        user); each user closes it once, the socket goes with the last."""
        with cls._shared_lock:
            client = cls._shared.get((ip, port))
            if client is None:
                client = cls(ip, port, **kw)
                client._key = (ip, port)
                cls._shared[(ip, port)] = client
            client._users += 1
            return client

    def __init__(
        self,
        ip: str,
        port: int = CONTROL_PORT,
        *,
        timeout: float = 0.25,
        retries: int = 4,
        sequence_check: bool = True,
        first_sequence: int = 0x100,
    ) -> None:
        try:
            if ipaddress.ip_address(ip).version != 4:
                raise ValueError
        except ValueError:
            raise ValueError(
                f"bridge {ip!r}: an IPv4 address (HSB's control plane is IPv4)"
            ) from None
        if not 0 < timeout <= 60:
            raise ValueError(f"timeout {timeout}: 0 to 60 s per try")
        if not 0 <= retries <= 100:
            raise ValueError(f"retries {retries}: 0 to 100")
        self.ip, self.port = ip, port
        self.timeout, self.retries = timeout, retries
        self.sequence_check = sequence_check
        self._sequence = first_sequence & 0xFFFF
        # The first request goes unchecked: it latches our sequence at the bridge, whatever
        # the last host that spoke to it left there.
        self._latched = False
        self.counters = EcbCounters()
        self._lock = threading.Lock()
        self._key: tuple[str, int] | None = None  # set when shared
        self._users = 0
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            # Connected: replies from anyone else are not ours, and an ICMP port unreachable
            # comes back as ECONNREFUSED instead of a silence.
            self._sock.connect((ip, port))
        except OSError as e:
            self._sock.close()
            raise EcbError(f"ECB to {ip}:{port}: {e.strerror}") from None

    @property
    def where(self) -> str:
        return f"{self.ip}:{self.port}"

    def path_mtu(self) -> int | None:
        """The kernel's MTU for the path to the bridge (IP_MTU of our connected socket)."""
        try:
            return int(self._sock.getsockopt(socket.IPPROTO_IP, getattr(socket, "IP_MTU", 14)))
        except OSError:
            return None

    def local_ip(self) -> str:
        """The address the kernel sends to the bridge from (its route's source)."""
        return str(self._sock.getsockname()[0])

    def close(self) -> None:
        if self._key is not None:
            with Ecb._shared_lock:
                self._users -= 1
                if self._users > 0:
                    return
                Ecb._shared.pop(self._key, None)
        self._sock.close()

    def __enter__(self) -> Ecb:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- requests ---------------------------------------------------------------
    def relatch(self) -> None:
        """Send the next request without the sequence check, so that it latches this
        client's sequence again: after SEQUENCE_CHECK_FAIL, when another host has spoken to
        the bridge since (the refused request was not executed, so it may be sent again)."""
        with self._lock:
            self._latched = False

    def read(self, address: int) -> int:
        """The 32-bit register at ``address``."""
        reply = self._execute(READ_DWORD, [(_address(address), None)], f"read {address:#x}")
        got_address, value = struct.unpack_from(">II", reply, HEADER_BYTES)
        if got_address != address:
            raise EcbError(
                f"ECB read {address:#x} at {self.where}: the reply is for {got_address:#x}"
            )
        return int(value)

    def write(self, address: int, value: int) -> None:
        _u32("value", value)
        self._execute(WRITE_DWORD, [(_address(address), value)], f"write {address:#x} = {value:#x}")

    def read_block(self, addresses: Sequence[int]) -> list[int]:
        """The registers at ``addresses`` (any 4-aligned addresses, in blocks of 511)."""
        out: list[int] = []
        for chunk in _chunks([_address(a) for a in addresses]):
            what = f"read block {chunk[0]:#x}+{len(chunk)}"
            reply = self._execute(READ_BLOCK, [(a, 0) for a in chunk], what)
            for m, a in enumerate(chunk):
                got, value = struct.unpack_from(">II", reply, HEADER_BYTES + 8 * m)
                if got != a:
                    raise EcbError(
                        f"ECB {what} at {self.where}: pair {m} of the reply is for "
                        f"{got:#x}, asked {a:#x}"
                    )
                out.append(int(value))
        return out

    def write_block(self, pairs: Iterable[tuple[int, int]]) -> None:
        """Write ``(address, value)`` pairs, in blocks of 511, in order."""
        checked = [(_address(a), _u32("value", v)) for a, v in pairs]
        for chunk in _chunks(checked):
            self._execute(WRITE_BLOCK, list(chunk), f"write block {chunk[0][0]:#x}+{len(chunk)}")

    # -- one request, its tries --------------------------------------------------
    def _next_sequence(self) -> int:
        s = self._sequence
        self._sequence = (s + 1) & 0xFFFF
        return s

    def _execute(self, command: int, pairs: list[tuple[int, int | None]], what: str) -> bytes:
        with self._lock:
            return self._execute_locked(command, pairs, what)

    def _execute_locked(
        self, command: int, pairs: list[tuple[int, int | None]], what: str
    ) -> bytes:
        sequence = self._next_sequence()
        check = self.sequence_check and self._latched
        tries = 1 + self.retries
        ignored_before = self.counters.ignored
        statuses: list[int] = []
        for attempt in range(tries):
            flags = FLAG_ACK | (FLAG_SEQUENCE_CHECK if check else 0)
            request = struct.pack(">BBHBB", command, flags, sequence, 0, 0)
            for address, value in pairs:
                request += struct.pack(">I", address)
                if value is not None:
                    request += struct.pack(">I", value)
            self.counters.requests += attempt == 0
            self.counters.retries += attempt > 0
            try:
                self._sock.send(request)
                reply = self._await(command, sequence)
            except ConnectionRefusedError:
                raise EcbPortUnreachable(
                    f"ECB {what} at {self.where}: port unreachable (nothing listens on the "
                    "bridge's control port: is it a bridge, is hsb.control_port right?)"
                ) from None
            except OSError as e:
                raise EcbError(f"ECB {what} at {self.where}: {e.strerror or e}") from None
            if reply is None:
                check = False  # the first try may have been executed: its sequence is used
                continue
            status = reply[4]
            self._latched = True
            if status == 0:
                # Only a read's values are taken from the reply: a write's success is its
                # status (HSB's own host reads nothing more of it), so a bridge that answers a
                # write with the bare header is not refused.
                reads = command in (READ_DWORD, READ_BLOCK)
                return self._whole(reply, len(pairs) if reads else 0, what)
            statuses.append(status)
            if status in RETRYABLE and attempt + 1 < tries:
                check = False
                continue
            raise EcbStatusError(
                f"ECB {what} at {self.where}: the bridge answered {status_name(status)}",
                status,
            )
        ignored = self.counters.ignored - ignored_before
        extra = f"; {ignored} datagrams that were not the reply ignored" if ignored else ""
        busy = (
            f"; it answered {', '.join(status_name(s) for s in statuses)} before"
            if statuses
            else ""
        )
        raise EcbTimeout(
            f"ECB {what} at {self.where}: no reply to {tries} tries of {self.timeout:g} s "
            f"(sequence {sequence:#06x}){busy}{extra}; is the bridge up, is it {self.ip}?"
        )

    def _whole(self, reply: bytes, pairs: int, what: str) -> bytes:
        """``reply`` if it holds the header and the ``pairs`` (address, value) pairs that a
        successful read's reply carries (its values are in them); 0 pairs: the header alone."""
        need = HEADER_BYTES + 8 * pairs
        if len(reply) < need:
            raise EcbError(
                f"ECB {what} at {self.where}: the reply (status 0x00 SUCCESS) has "
                f"{len(reply)} bytes, {need} needed: the {HEADER_BYTES}-byte header and "
                f"{pairs} address, value pair{'s' if pairs != 1 else ''} of 8 bytes "
                f"(short by {need - len(reply)} bytes; is it a bridge?)"
            )
        return reply

    def _await(self, command: int, sequence: int) -> bytes | None:
        """The reply to (command, sequence) within one try's timeout, or None."""
        deadline = time.monotonic() + self.timeout
        while (left := deadline - time.monotonic()) > 0:
            ready, _, _ = select.select([self._sock], [], [], left)
            if not ready:
                return None
            data = self._sock.recv(65536)
            if (
                len(data) < HEADER_BYTES
                or data[0] != command | REPLY
                or struct.unpack_from(">H", data, 2)[0] != sequence
            ):
                self.counters.ignored += 1  # a late reply to an earlier try, or garbage
                continue
            return data
        return None


def _chunks(items: list) -> list[list]:
    return [items[i : i + MAX_BLOCK] for i in range(0, len(items), MAX_BLOCK)] or [[]]


# ----------------------------------------------------------------------------- enumeration
BOOTP_BYTES = 300
VEND_AT = 236  # BOOTP: op..giaddr 28, chaddr 16, sname 64, file 128
VENDOR_TAG = 0xE0
VENDOR_ID = b"NVDA"

#: Boards by FPGA UUID (hololink's enumeration strategies): name, sensors, SIFs per sensor,
#: whether block requests may be used. A UUID not here gets hololink's defaults (2, 2, yes).
BOARDS: dict[str, tuple[str, int, int, bool]] = {
    "889b7ce3-65a5-4247-8b05-4ff1904c3359": ("hololink-lite", 3, 2, True),
    "d0f015e0-93b6-4473-b7d1-7dbd01cbeab5": ("hololink-nano", 2, 2, True),
    "7a377bf7-76cb-4756-a4c5-7dddaed8354b": ("hololink 100G", 2, 2, True),
    "ed6a9292-debf-40ac-b603-a24e025309c1": ("Microchip Polarfire", 2, 1, True),
    "f1627640-b4dc-48af-a360-c55b09b3d230": ("Leopard Eagle", 3, 1, True),
    "9957a9ac-36b5-4518-83ec-5d514aecb750": ("TauroTech DA326", 2, 1, False),
}
DEFAULT_BOARD = ("unknown board", 2, 2, True)
#: Enumeration v1 carries a board id instead of a UUID; these are the ids hololink maps.
V1_BOARD_UUIDS = {
    2: "889b7ce3-65a5-4247-8b05-4ff1904c3359",
    3: "7a377bf7-76cb-4756-a4c5-7dddaed8354b",
    4: "ed6a9292-debf-40ac-b603-a24e025309c1",
    5: "d0f015e0-93b6-4473-b7d1-7dbd01cbeab5",
    7: "f1627640-b4dc-48af-a360-c55b09b3d230",
    10: "9957a9ac-36b5-4518-83ec-5d514aecb750",
}


class EnumerationError(ValueError):
    """A datagram on the enumeration port that is not a bridge's announcement: says where."""


@dataclass(frozen=True)
class Announcement:
    """One data plane of a bridge, as it announced itself."""

    ip: str  # where it sent from: where its control port is
    mac: str
    data_plane: int
    enum_version: int
    board_id: int
    uuid: str  # v1: the one hololink assumes for the board id, or ""
    serial: str  # hex
    hsb_ip_version: int
    fpga_crc: int
    seconds: int  # since the bridge started announcing
    board_version: str = ""  # v1 only

    @property
    def board(self) -> tuple[str, int, int, bool]:
        """(name, sensors, SIFs per sensor, block requests) for its UUID."""
        return BOARDS.get(self.uuid, DEFAULT_BOARD)

    def as_dict(self) -> dict[str, object]:
        name, sensors, sifs, block = self.board
        return {
            "ip": self.ip,
            "mac": self.mac,
            "data_plane": self.data_plane,
            "board": name,
            "board_id": self.board_id,
            "uuid": self.uuid,
            "serial": self.serial,
            "hsb_ip_version": self.hsb_ip_version,
            "fpga_crc": self.fpga_crc,
            "enum_version": self.enum_version,
            "sensors": sensors,
            "sifs_per_sensor": sifs,
            "block_requests": block,
            "seconds": self.seconds,
        }


def _uuid_text(raw: bytes) -> str:
    h = raw.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def parse_announcement(data: bytes, source_ip: str) -> Announcement:
    """The announcement in ``data`` (a datagram from ``source_ip``); EnumerationError saying
    at which byte offset it stops being one."""
    if len(data) < VEND_AT + 41:
        raise EnumerationError(
            f"{len(data)} bytes from {source_ip}: an announcement has {BOOTP_BYTES} "
            f"(vendor data at {VEND_AT}..{VEND_AT + 41})"
        )
    op, htype, hlen = data[0], data[1], data[2]
    if op != 1 or htype != 1 or hlen != 6:
        raise EnumerationError(
            f"from {source_ip}, offset 0: op/htype/hlen {op}/{htype}/{hlen}, a bridge sends "
            "1/1/6 (a BOOTP request over Ethernet)"
        )
    seconds = struct.unpack_from(">H", data, 8)[0]
    mac = ":".join(f"{b:02X}" for b in data[28:34])
    v = VEND_AT
    if data[v] != VENDOR_TAG or data[v + 2 : v + 6] != VENDOR_ID:
        raise EnumerationError(
            f"from {source_ip}, offset {v}: vendor tag {data[v]:#04x} id "
            f"{data[v + 2 : v + 6]!r}, a bridge sends 0xe0 b'NVDA'"
        )
    data_plane, version = data[v + 6], data[v + 7]
    board_id = struct.unpack_from("<H", data, v + 8)[0]
    serial = data[v + 30 : v + 37].hex()
    hsb_ip_version, fpga_crc = struct.unpack_from("<HH", data, v + 37)
    if version == 2:
        uuid, board_version = _uuid_text(data[v + 10 : v + 26]), ""
    elif version == 1:
        uuid, board_version = V1_BOARD_UUIDS.get(board_id, ""), data[v + 10 : v + 30].hex()
    else:
        raise EnumerationError(
            f"from {source_ip}, offset {v + 7}: enumeration version {version}, this host "
            "reads 1 and 2"
        )
    return Announcement(
        ip=source_ip,
        mac=mac,
        data_plane=data_plane,
        enum_version=version,
        board_id=board_id,
        uuid=uuid,
        serial=serial,
        hsb_ip_version=hsb_ip_version,
        fpga_crc=fpga_crc,
        seconds=seconds,
        board_version=board_version,
    )


def announcement_bytes(
    ip: str,
    mac: str,
    *,
    data_plane: int = 0,
    uuid: str,
    serial: bytes,
    hsb_ip_version: int,
    fpga_crc: int = 0,
    board_id: int = 0,
    seconds: int = 0,
) -> bytes:
    """The 300-byte announcement (enumeration v2) of a bridge's data plane: what the software
    bridge sends (roce_transceiver/peers/bridge.py)."""
    out = bytearray(BOOTP_BYTES)
    struct.pack_into(">BBBBIHH", out, 0, 1, 1, 6, 0, data_plane, seconds & 0xFFFF, 0)
    out[12:16] = ipaddress.IPv4Address(ip).packed
    out[28:34] = bytes(int(p, 16) for p in mac.split(":"))
    v = VEND_AT
    out[v], out[v + 1], out[v + 2 : v + 6] = VENDOR_TAG, 4, VENDOR_ID
    out[v + 6], out[v + 7] = data_plane, 2
    struct.pack_into("<H", out, v + 8, board_id)
    out[v + 10 : v + 26] = bytes.fromhex(uuid.replace("-", ""))
    out[v + 30 : v + 37] = serial[:7].ljust(7, b"\0")
    struct.pack_into("<HH", out, v + 37, hsb_ip_version, fpga_crc)
    return bytes(out)


def _listener(port: int, interface: str | None) -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        # Several listeners on one host (hololink beside us) each get a copy of a broadcast.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if interface:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, interface.encode())
        s.bind(("", port))
    except OSError as e:
        s.close()
        where = f" on {interface}" if interface else ""
        hint = " (root or CAP_NET_RAW binds to an interface)" if e.errno == errno.EPERM else ""
        raise EnumerationError(f"enumeration port {port}{where}: {e.strerror}{hint}") from None
    return s


def enumerate_bridges(
    timeout: float = 2.0,
    *,
    port: int = ENUMERATION_PORT,
    interface: str | None = None,
    want: str | None = None,
) -> tuple[list[Announcement], list[str]]:
    """Listen for ``timeout`` s (or until ``want``, an IP, is heard) and return the data
    planes heard (the latest announcement of each, in the order first heard) and one line per
    datagram that was not an announcement."""
    found: dict[tuple[str, int], Announcement] = {}
    problems: list[str] = []
    with _listener(port, interface) as s:
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            ready, _, _ = select.select([s], [], [], left)
            if not ready:
                break
            data, (src, _) = s.recvfrom(65536)
            try:
                a = parse_announcement(data, src)
            except EnumerationError as e:
                if len(problems) < 16:
                    problems.append(str(e))
                continue
            found[(a.ip, a.data_plane)] = a
            if want is not None and a.ip == want:
                break
    return list(found.values()), problems


def find_bridge(
    ip: str, timeout: float = 3.0, *, port: int = ENUMERATION_PORT, interface: str | None = None
) -> Announcement:
    """The announcement of the bridge at ``ip``; EnumerationError naming what was heard
    instead when it does not come within ``timeout`` s."""
    found, problems = enumerate_bridges(timeout, port=port, interface=interface, want=ip)
    for a in found:
        if a.ip == ip:
            return a
    heard = ", ".join(sorted({a.ip for a in found})) or "none"
    extra = f"; not announcements: {problems[0]}" if problems else ""
    raise EnumerationError(
        f"no announcement from {ip} within {timeout:g} s on UDP port {port} (bridges heard: "
        f"{heard}{extra}): is it powered, on this link, and is {ip} its address? "
        "(hsb.enumerate: false programs it without waiting)"
    )
