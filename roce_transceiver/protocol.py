"""RoCEv2 packets: parse, build and check the ICRC of Ethernet frames.

The work is done by the C++ protocol core (the same code the data path runs
on the CPU and the GPU); this module gives it typed Python shapes. Fields
follow scapy's convention: a derived field (lengths, checksums, pad count,
ICRC) is computed unless the caller gives it, so tests can build bad frames
on purpose.

The ``icrc`` of a packet is the CRC-32 value as ``zlib.crc32`` computes it; on
the wire it is sent least-significant byte first.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Any

from roce_transceiver import _core
from roce_transceiver._checks import check_bool, check_buffer, check_int

__all__ = [
    "OPCODES",
    "Aeth",
    "AtomicEth",
    "Deth",
    "OpcodeRow",
    "Packet",
    "ProtocolError",
    "Reth",
    "build",
    "icrc",
    "opcode_name",
    "opcode_row",
    "parse",
    "psn_add",
    "psn_diff",
]


class ProtocolError(ValueError):
    """A frame that is not a valid RoCEv2 packet.

    ``field`` names the offending header or field (``"reth"``,
    ``"ipv4.total_length"``) and ``offset`` its byte offset in the frame.
    """

    def __init__(self, message: str, *, field: str, offset: int) -> None:
        super().__init__(message)
        self.field = field
        self.offset = offset


@dataclass(frozen=True)
class OpcodeRow:
    """One row of the core's opcode table."""

    opcode: int
    name: str
    transport: str
    operation: str
    headers: tuple[str, ...]
    first: bool
    middle: bool
    last: bool
    payload: bool
    immediate: bool


def _load_table() -> dict[int, OpcodeRow]:
    rows = {}
    for r in _core.opcode_table():
        rows[r["opcode"]] = OpcodeRow(**{**r, "headers": tuple(r["headers"])})
    return rows


_TABLE: dict[int, OpcodeRow] = _load_table()
#: Opcode names (``"RC_SEND_ONLY"``, ``"UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE"``, ``"CNP"``) to values.
OPCODES: dict[str, int] = {row.name: op for op, row in _TABLE.items()}


def opcode_row(opcode: int | str) -> OpcodeRow:
    """The table row of an opcode given by value or name."""
    value = _opcode_value(opcode)
    return _TABLE[value]


def opcode_name(opcode: int) -> str:
    """``"RC_SEND_ONLY"`` for 0x04; raises ValueError for an opcode RoCE does not use."""
    return opcode_row(opcode).name


def _opcode_value(opcode: int | str) -> int:
    if isinstance(opcode, str):
        try:
            return OPCODES[opcode.upper()]
        except KeyError:
            raise ValueError(f"opcode {opcode!r}: unknown name (e.g. RC_SEND_ONLY)") from None
    if isinstance(opcode, bool) or not hasattr(opcode, "__index__"):
        raise TypeError(
            f"opcode={opcode!r}: expected an int or a name (e.g. RC_SEND_ONLY), "
            f"got {type(opcode).__name__}"
        )
    opcode = int(opcode)
    if opcode not in _TABLE:
        raise ValueError(f"opcode 0x{opcode:02X}: not an RC, UC, UD or CNP opcode")
    return opcode


@dataclass(frozen=True)
class Reth:
    """RDMA extended transport header: where a WRITE or READ lands."""

    va: int
    rkey: int
    dma_len: int


@dataclass(frozen=True)
class Aeth:
    """ACK extended transport header."""

    syndrome: int
    msn: int


@dataclass(frozen=True)
class AtomicEth:
    """Atomic extended transport header (FETCH_ADD, COMPARE_SWAP)."""

    va: int
    rkey: int
    swap_add: int
    compare: int


@dataclass(frozen=True)
class Deth:
    """Datagram extended transport header (UD)."""

    qkey: int
    src_qp: int


@dataclass(frozen=True)
class Packet:
    """A decoded RoCEv2 frame. Absent headers are ``None``."""

    eth_dst: str
    eth_src: str
    vlan: int | None  # the 802.1Q TCI
    ip_version: int
    ip_src: str
    ip_dst: str
    ip_id: int | None  # IPv4 only
    ip_tos: int  # IPv4 TOS or IPv6 traffic class
    ip_ttl: int  # IPv4 TTL or IPv6 hop limit
    ip_flow_label: int | None  # IPv6 only
    udp_sport: int
    udp_dport: int
    udp_checksum: int
    opcode: int
    opcode_name: str
    se: bool
    mig_req: bool
    pad_count: int
    tver: int
    pkey: int
    fecn: bool
    becn: bool
    dest_qp: int
    ack_req: bool
    psn: int
    reth: Reth | None
    imm: int | None
    aeth: Aeth | None
    atomic_eth: AtomicEth | None
    atomic_ack_orig: int | None
    deth: Deth | None
    ieth_rkey: int | None
    headers: tuple[str, ...]  # extension headers present, in wire order
    payload: bytes  # without the pad
    pad: bytes
    icrc: int  # as carried by the frame
    icrc_ok: bool
    length: int  # bytes from the Ethernet header to the ICRC, both included


def _mac_str(b: bytes) -> str:
    return ":".join(f"{x:02x}" for x in b)


def _mac_bytes(value: str | bytes, key: str) -> bytes:
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)  # the core checks the length
    if not isinstance(value, str):
        raise TypeError(
            f"build(): {key}={value!r}: expected a MAC address (aa:bb:cc:dd:ee:ff or 6 bytes), "
            f"got {type(value).__name__}"
        )
    parts = value.replace("-", ":").split(":")
    try:
        raw = bytes(int(p, 16) for p in parts)
    except ValueError:
        raw = b""
    if len(raw) != 6:
        raise ValueError(f"{key}={value!r}: not a MAC address (aa:bb:cc:dd:ee:ff)")
    return raw


def _raise(err: dict[str, Any]) -> None:
    raise ProtocolError(err["message"], field=err["field"], offset=err["offset"])


def parse(frame: bytes | bytearray | memoryview) -> Packet:
    """Decode an Ethernet frame; raises ProtocolError naming the field and offset
    (TypeError: ``frame`` is not bytes-like)."""
    d = _core.decode(check_buffer("parse()", "frame", frame))
    if "error" in d:
        _raise(d["error"])
    version = d["ip_version"]
    reth = d.get("reth")
    aeth = d.get("aeth")
    atomic = d.get("atomic_eth")
    deth = d.get("deth")
    return Packet(
        eth_dst=_mac_str(d["eth_dst"]),
        eth_src=_mac_str(d["eth_src"]),
        vlan=d["vlan"],
        ip_version=version,
        ip_src=str(ipaddress.ip_address(d["ip_src"])),
        ip_dst=str(ipaddress.ip_address(d["ip_dst"])),
        ip_id=d["ip_id"],
        ip_tos=d["ip_tos"],
        ip_ttl=d["ip_ttl"],
        ip_flow_label=d["ip_flow_label"],
        udp_sport=d["udp_sport"],
        udp_dport=d["udp_dport"],
        udp_checksum=d["udp_checksum"],
        opcode=d["opcode"],
        opcode_name=d["opcode_name"],
        se=d["se"],
        mig_req=d["mig_req"],
        pad_count=d["pad_count"],
        tver=d["tver"],
        pkey=d["pkey"],
        fecn=d["fecn"],
        becn=d["becn"],
        dest_qp=d["dest_qp"],
        ack_req=d["ack_req"],
        psn=d["psn"],
        reth=Reth(*reth) if reth else None,
        imm=d.get("imm"),
        aeth=Aeth(*aeth) if aeth else None,
        atomic_eth=AtomicEth(*atomic) if atomic else None,
        atomic_ack_orig=d.get("atomic_ack_eth"),
        deth=Deth(*deth) if deth else None,
        ieth_rkey=d.get("ieth"),
        headers=tuple(d["headers"]),
        payload=d["payload"],
        pad=d["pad"],
        icrc=d["icrc"],
        icrc_ok=d["icrc"] == d["icrc_computed"],
        length=d["length"],
    )


# build() keywords the core takes as they are; names match Packet's fields.
_SCALAR_FIELDS = {
    "vlan", "ip_id", "ip_tos", "ip_ttl", "ip_flow_label", "ip_dont_fragment", "ip_checksum",
    "udp_sport", "udp_dport", "udp_checksum", "se", "mig_req", "tver", "pkey", "fecn", "becn",
    "dest_qp", "ack_req", "psn", "va", "rkey", "dma_len", "imm", "syndrome", "msn", "swap_add",
    "compare", "qkey", "src_qp", "pad_count", "icrc", "atomic_ack_orig", "ieth_rkey",
}  # fmt: skip
_BOOL_FIELDS = {"ip_dont_fragment", "se", "mig_req", "fecn", "becn", "ack_req"}
_ADDRESS_TYPES = (str, bytes, ipaddress.IPv4Address, ipaddress.IPv6Address)


def _field_value(key: str, value: Any) -> Any:
    """A build() keyword's value in the type the core takes (TypeError naming the field
    otherwise); integer ranges are the core's, which knows each field's width."""
    if key in _BOOL_FIELDS:
        return check_bool("build()", key, value)
    if key == "vlan" and value is None:  # None: untagged
        return None
    return check_int("build()", key, value)


def build(
    opcode: int | str,
    payload: bytes = b"",
    *,
    eth_dst: str | bytes = "02:00:00:00:00:02",
    eth_src: str | bytes = "02:00:00:00:00:01",
    ip_src: str = "10.0.0.1",
    ip_dst: str = "10.0.0.2",
    **fields: Any,
) -> bytes:
    """Build a full Ethernet frame with a correct ICRC.

    Keywords are Packet's field names (``dest_qp``, ``psn``, ``ack_req``...)
    plus the flat extension-header fields ``va, rkey, dma_len, imm, syndrome,
    msn, swap_add, compare, qkey, src_qp`` and the overrides ``ip_checksum``,
    ``pad_count`` and ``icrc``. The IP version follows the addresses. For
    opcodes with a RETH, ``dma_len`` defaults to the payload length.

    A value of the wrong type is a TypeError naming the field and the type it needs (an
    integer field takes an int, a flag a bool, an address a str); one out of the field's
    range, or an unknown field, a ValueError.
    """
    core: dict[str, Any] = {"opcode": _opcode_value(opcode)}
    payload = check_buffer("build()", "payload", payload)
    for key, address in (("ip_src", ip_src), ("ip_dst", ip_dst)):
        if not isinstance(address, _ADDRESS_TYPES):
            raise TypeError(
                f"build(): {key}={address!r}: expected an IPv4 or IPv6 address as a str, "
                f"got {type(address).__name__}"
            )
    core["eth_dst"] = _mac_bytes(eth_dst, "eth_dst")
    core["eth_src"] = _mac_bytes(eth_src, "eth_src")
    try:
        src, dst = ipaddress.ip_address(ip_src), ipaddress.ip_address(ip_dst)
    except ValueError as e:
        raise ValueError(f"ip_src/ip_dst: {e}") from None
    if src.version != dst.version:
        raise ValueError(f"ip_src={ip_src} and ip_dst={ip_dst}: not the same IP version")
    core["ip_version"] = src.version
    core["ip_src"] = src.packed
    core["ip_dst"] = dst.packed
    for key, value in fields.items():
        if key in _SCALAR_FIELDS:
            core[key] = _field_value(key, value)
        else:
            raise ValueError(f"build(): unknown field {key!r}")
    if "RETH" in _TABLE[core["opcode"]].headers:
        core.setdefault("dma_len", payload.nbytes)
    return _core.encode(core, bytes(payload))


def icrc(frame: bytes | bytearray | memoryview) -> int:
    """The ICRC the frame should carry (whatever it does carry)."""
    d = _core.decode(check_buffer("icrc()", "frame", frame))
    if "error" in d:
        _raise(d["error"])
    return int(d["icrc_computed"])


_PSN_MAX = 0xFFFFFF


def psn_add(psn: int, n: int) -> int:
    """``psn + n`` on the 24-bit circle; ``psn`` is a PSN (0 to 2**24-1), ``n`` any int
    (negative steps back). ValueError: a psn out of range; TypeError: not an int."""
    psn = check_int("psn_add()", "psn", psn, 0, _PSN_MAX)
    n = check_int("psn_add()", "n", n)
    return int(_core.psn_add(psn, n % (_PSN_MAX + 1)))  # same sum mod 2**24, as a u32


def psn_diff(b: int, a: int) -> int:
    """Signed distance ``b - a`` on the 24-bit circle, in [-2**23, 2**23); both PSNs
    (0 to 2**24-1). ValueError: a PSN out of range; TypeError: not an int."""
    b = check_int("psn_diff()", "b", b, 0, _PSN_MAX)
    a = check_int("psn_diff()", "a", a, 0, _PSN_MAX)
    return int(_core.psn_diff(b, a))
