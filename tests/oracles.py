"""Independent oracles shared by the protocol tests.

Nothing here asks ``roce_transceiver`` how a RoCEv2 frame is laid out. The
opcode table is written from the InfiniBand spec (IBA vol. 1, table 35), the
extension headers are packed with ``struct`` from their IBA layouts, frames are
assembled by scapy (``scapy.contrib.roce`` computes the ICRC), and the pcap
writer is the classic libpcap format. Tests compare the package against these.
"""

from __future__ import annotations

import ipaddress
import random
import struct
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scapy.compat import raw
from scapy.contrib.roce import BTH
from scapy.layers.inet import IP, UDP, IPOption
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Dot1Q, Ether
from scapy.packet import Packet as ScapyPacket
from scapy.packet import Raw

ROCEV2_PORT = 4791
CNP_OPCODE = 0x81
CNP_RESERVED_BYTES = 16

# IBA vol. 1 table 35: operation (opcode bits 4:0) -> name and the extension
# headers that follow the BTH, in wire order. UD adds a DETH in front.
IBA_OPERATIONS: dict[int, tuple[str, tuple[str, ...]]] = {
    0x00: ("SEND_FIRST", ()),
    0x01: ("SEND_MIDDLE", ()),
    0x02: ("SEND_LAST", ()),
    0x03: ("SEND_LAST_WITH_IMMEDIATE", ("ImmDt",)),
    0x04: ("SEND_ONLY", ()),
    0x05: ("SEND_ONLY_WITH_IMMEDIATE", ("ImmDt",)),
    0x06: ("RDMA_WRITE_FIRST", ("RETH",)),
    0x07: ("RDMA_WRITE_MIDDLE", ()),
    0x08: ("RDMA_WRITE_LAST", ()),
    0x09: ("RDMA_WRITE_LAST_WITH_IMMEDIATE", ("ImmDt",)),
    0x0A: ("RDMA_WRITE_ONLY", ("RETH",)),
    0x0B: ("RDMA_WRITE_ONLY_WITH_IMMEDIATE", ("RETH", "ImmDt")),
    0x0C: ("RDMA_READ_REQUEST", ("RETH",)),
    0x0D: ("RDMA_READ_RESPONSE_FIRST", ("AETH",)),
    0x0E: ("RDMA_READ_RESPONSE_MIDDLE", ()),
    0x0F: ("RDMA_READ_RESPONSE_LAST", ("AETH",)),
    0x10: ("RDMA_READ_RESPONSE_ONLY", ("AETH",)),
    0x11: ("ACKNOWLEDGE", ("AETH",)),
    0x12: ("ATOMIC_ACKNOWLEDGE", ("AETH", "AtomicAckETH")),
    0x13: ("COMPARE_SWAP", ("AtomicETH",)),
    0x14: ("FETCH_ADD", ("AtomicETH",)),
    0x16: ("SEND_LAST_WITH_INVALIDATE", ("IETH",)),
    0x17: ("SEND_ONLY_WITH_INVALIDATE", ("IETH",)),
}
# Which operations each transport has (table 35): RC all, UC sends and writes,
# UD the two SEND ONLYs. RD and XRC are valid IBA but not spoken here.
IBA_TRANSPORTS: dict[str, tuple[int, tuple[int, ...]]] = {
    "RC": (0x00, tuple(IBA_OPERATIONS)),
    "UC": (0x20, tuple(range(0x00, 0x0C))),
    "UD": (0x60, (0x04, 0x05)),
}
# Operations whose packets carry no payload (IBA 9.4-9.5).
IBA_NO_PAYLOAD = {0x0C, 0x11, 0x12, 0x13, 0x14}


def iba_opcodes() -> dict[int, tuple[str, tuple[str, ...]]]:
    """opcode -> (name, extension headers) for RC, UC, UD and the CNP."""
    table: dict[int, tuple[str, tuple[str, ...]]] = {}
    for transport, (base, operations) in IBA_TRANSPORTS.items():
        for op in operations:
            name, hdrs = IBA_OPERATIONS[op]
            if transport == "UD":
                hdrs = ("DETH", *hdrs)
            table[base | op] = (f"{transport}_{name}", hdrs)
    table[CNP_OPCODE] = ("CNP", ())
    return table


IBA_OPCODES = iba_opcodes()


@dataclass
class Spec:
    """Every field of one RoCEv2 frame, in the package's keyword names."""

    opcode: int
    payload: bytes = b""
    eth_dst: str = "02:00:00:00:00:02"
    eth_src: str = "02:00:00:00:00:01"
    vlan: int | None = None  # the 802.1Q TCI
    ip_src: str = "10.0.0.1"
    ip_dst: str = "10.0.0.2"
    ip_id: int = 0  # IPv4
    ip_tos: int = 0  # TOS or traffic class
    ip_ttl: int = 64  # TTL or hop limit
    ip_flow_label: int = 0  # IPv6
    ip_dont_fragment: bool = True  # IPv4
    ip_options: bytes = b""  # IPv4, scapy-built frames only
    udp_sport: int = 49152
    udp_checksum: int | None = 0  # None: scapy computes a real one
    se: bool = False
    mig_req: bool = True
    tver: int = 0
    pkey: int = 0xFFFF
    fecn: bool = False
    becn: bool = False
    dest_qp: int = 2
    ack_req: bool = False
    psn: int = 0
    ext: dict[str, int] = field(default_factory=dict)

    @property
    def ip_version(self) -> int:
        return ipaddress.ip_address(self.ip_src).version

    @property
    def headers(self) -> tuple[str, ...]:
        return IBA_OPCODES[self.opcode][1]

    @property
    def pad_count(self) -> int:
        return -len(self.payload) % 4


EXT_DEFAULTS = {
    "va": 0,
    "rkey": 0,
    "dma_len": 0,
    "imm": 0,
    "syndrome": 0x1F,
    "msn": 0,
    "swap_add": 0,
    "compare": 0,
    "atomic_ack_orig": 0,
    "qkey": 0,
    "src_qp": 0,
    "ieth_rkey": 0,
}
# Extension-header keywords each header takes.
HEADER_FIELDS = {
    "DETH": ("qkey", "src_qp"),
    "RETH": ("va", "rkey", "dma_len"),
    "AtomicETH": ("va", "rkey", "swap_add", "compare"),
    "AETH": ("syndrome", "msn"),
    "AtomicAckETH": ("atomic_ack_orig",),
    "ImmDt": ("imm",),
    "IETH": ("ieth_rkey",),
}


def ext_value(spec: Spec, key: str) -> int:
    return spec.ext.get(key, EXT_DEFAULTS[key])


def pack_ext_headers(spec: Spec) -> bytes:
    """The extension headers of `spec`, packed from their IBA layouts (big-endian)."""
    out = b""
    v = lambda key: ext_value(spec, key)  # noqa: E731
    for hdr in spec.headers:
        if hdr == "DETH":  # Q_Key, reserved 8 bits, source QP 24 bits
            out += struct.pack(">II", v("qkey"), v("src_qp") & 0xFFFFFF)
        elif hdr == "RETH":  # VA 64, R_Key 32, DMA length 32
            out += struct.pack(">QII", v("va"), v("rkey"), v("dma_len"))
        elif hdr == "AtomicETH":  # VA 64, R_Key 32, swap/add 64, compare 64
            out += struct.pack(">QIQQ", v("va"), v("rkey"), v("swap_add"), v("compare"))
        elif hdr == "AETH":  # syndrome 8, MSN 24
            out += struct.pack(">I", v("syndrome") << 24 | v("msn"))
        elif hdr == "AtomicAckETH":  # original remote data 64
            out += struct.pack(">Q", v("atomic_ack_orig"))
        elif hdr == "ImmDt":
            out += struct.pack(">I", v("imm"))
        elif hdr == "IETH":
            out += struct.pack(">I", v("ieth_rkey"))
        else:  # pragma: no cover - the table above has no other names
            raise AssertionError(hdr)
    return out


def random_spec(
    rng: random.Random,
    opcode: int,
    *,
    ip_version: int | None = None,
    vlan: bool | None = None,
    max_payload: int = 300,
) -> Spec:
    """A frame with every field random (within its width) for `opcode`: the 64-bit
    fields (VA, swap/add, compare, orig) over all 64 bits, half of them at or above 2**63."""
    if ip_version is None:
        ip_version = rng.choice((4, 6))
    if vlan is None:
        vlan = rng.random() < 0.5
    if ip_version == 4:
        ip_src = str(ipaddress.IPv4Address(rng.getrandbits(32)))
        ip_dst = str(ipaddress.IPv4Address(rng.getrandbits(32)))
    else:
        ip_src = str(ipaddress.IPv6Address(rng.getrandbits(128)))
        ip_dst = str(ipaddress.IPv6Address(rng.getrandbits(128)))
    if opcode == CNP_OPCODE:
        payload = bytes(CNP_RESERVED_BYTES)
    elif opcode & 0x1F in IBA_NO_PAYLOAD:
        payload = b""
    else:
        # Bias toward the pad boundaries 0..8 as well as long payloads.
        n = rng.choice((rng.randrange(0, 9), rng.randrange(0, max_payload + 1)))
        payload = rng.randbytes(n)
    ext = {
        "va": rng.getrandbits(64),
        "rkey": rng.getrandbits(32),
        "dma_len": rng.getrandbits(32),
        "imm": rng.getrandbits(32),
        "syndrome": rng.choice((0x1F, 0x60, 0x61, 0x20 | rng.getrandbits(5), rng.getrandbits(8))),
        "msn": rng.getrandbits(24),
        "swap_add": rng.getrandbits(64),
        "compare": rng.getrandbits(64),
        "atomic_ack_orig": rng.getrandbits(64),
        "qkey": rng.getrandbits(32),
        "src_qp": rng.getrandbits(24),
        "ieth_rkey": rng.getrandbits(32),
    }
    mac = lambda: ":".join(f"{b:02x}" for b in bytes([2]) + rng.randbytes(5))  # noqa: E731
    return Spec(
        opcode=opcode,
        payload=payload,
        eth_dst=mac(),
        eth_src=mac(),
        vlan=rng.getrandbits(16) if vlan else None,
        ip_src=ip_src,
        ip_dst=ip_dst,
        ip_id=rng.getrandbits(16),
        ip_tos=rng.getrandbits(8),
        ip_ttl=rng.randrange(1, 256),
        ip_flow_label=rng.getrandbits(20) if ip_version == 6 else 0,
        ip_dont_fragment=rng.random() < 0.8,
        udp_sport=rng.randrange(1, 65536),
        se=rng.random() < 0.5,
        mig_req=rng.random() < 0.5,
        tver=0,
        pkey=rng.getrandbits(16),
        fecn=rng.random() < 0.3,
        becn=rng.random() < 0.3,
        dest_qp=rng.randrange(2, 1 << 24),  # QP0/QP1 are management QPs
        ack_req=rng.random() < 0.5,
        psn=rng.getrandbits(24),
        ext={k: ext[k] for hdr in IBA_OPCODES[opcode][1] for k in HEADER_FIELDS[hdr]},
    )


# The 64-bit extension fields, and the values at the top of their range: bit 63 set is
# where a signed 64-bit conversion breaks (kernel VAs have it set).
WIDE_FIELDS = ("va", "swap_add", "compare", "atomic_ack_orig")
WIDE_EDGES = (2**63, 2**64 - 1)


def edge_specs(opcode: int) -> list[Spec]:
    """Frames of `opcode` with its 64-bit fields at 2**63 and 2**64 - 1: all of them at one
    edge, then each alone at an edge with the others at 2**63 - 1 (so that two fields swapped
    show), over IPv4 and IPv6. Empty when the opcode carries none of them."""
    wide = [k for hdr in IBA_OPCODES[opcode][1] for k in HEADER_FIELDS[hdr] if k in WIDE_FIELDS]
    if not wide:
        return []
    payload = b"" if opcode & 0x1F in IBA_NO_PAYLOAD else bytes(range(1, 6))
    fixed = {"rkey": 0xFFFFFFFF, "dma_len": 0x80000000, "syndrome": 0x1F, "msn": 0xFFFFFF}
    ext_keys = [k for hdr in IBA_OPCODES[opcode][1] for k in HEADER_FIELDS[hdr]]
    choices: list[dict[str, int]] = [dict.fromkeys(wide, e) for e in WIDE_EDGES]
    for key in wide if len(wide) > 1 else ():
        for e in WIDE_EDGES:
            choices.append({**dict.fromkeys(wide, 2**63 - 1), key: e})
    specs = []
    for i, values in enumerate(choices):
        ext = {k: values.get(k, fixed.get(k, 0x5A5A5A)) for k in ext_keys}
        v6 = i % 2 == 1
        specs.append(
            Spec(
                opcode=opcode,
                payload=payload,
                ip_src="fd00::1" if v6 else "10.0.0.1",
                ip_dst="fd00::2" if v6 else "10.0.0.2",
                dest_qp=0x123456,
                psn=0xFFFFFF,
                ext=ext,
            )
        )
    return specs


def build_kwargs(spec: Spec) -> dict[str, Any]:
    """Keywords for ``roce_transceiver.protocol.build(**kwargs)``."""
    kw: dict[str, Any] = {
        "opcode": spec.opcode,
        "payload": spec.payload,
        "eth_dst": spec.eth_dst,
        "eth_src": spec.eth_src,
        "vlan": spec.vlan,
        "ip_src": spec.ip_src,
        "ip_dst": spec.ip_dst,
        "ip_tos": spec.ip_tos,
        "ip_ttl": spec.ip_ttl,
        "udp_sport": spec.udp_sport,
        "udp_checksum": spec.udp_checksum or 0,
        "se": spec.se,
        "mig_req": spec.mig_req,
        "tver": spec.tver,
        "pkey": spec.pkey,
        "fecn": spec.fecn,
        "becn": spec.becn,
        "dest_qp": spec.dest_qp,
        "ack_req": spec.ack_req,
        "psn": spec.psn,
        **spec.ext,
    }
    if spec.ip_version == 4:
        kw["ip_id"] = spec.ip_id
        kw["ip_dont_fragment"] = spec.ip_dont_fragment
    else:
        kw["ip_flow_label"] = spec.ip_flow_label
    return kw


def scapy_bth(spec: Spec, **overrides: Any) -> BTH:
    fields: dict[str, Any] = {
        "opcode": spec.opcode,
        "solicited": int(spec.se),
        "migreq": int(spec.mig_req),
        "padcount": spec.pad_count,
        "version": spec.tver,
        "pkey": spec.pkey,
        "fecn": int(spec.fecn),
        "becn": int(spec.becn),
        "dqpn": spec.dest_qp,
        "ackreq": int(spec.ack_req),
        "psn": spec.psn,
    }
    fields.update(overrides)
    return BTH(**fields)


def scapy_packet(spec: Spec, **bth_overrides: Any) -> ScapyPacket:
    """Ether / [802.1Q] / IP|IPv6 / UDP / BTH / Raw(ext headers + payload + pad).

    Lengths, the IPv4 checksum and the ICRC are left for scapy to compute.
    """
    pkt: ScapyPacket = Ether(dst=spec.eth_dst, src=spec.eth_src)
    if spec.vlan is not None:
        pkt /= Dot1Q(prio=spec.vlan >> 13, dei=(spec.vlan >> 12) & 1, vlan=spec.vlan & 0xFFF)
    if spec.ip_version == 4:
        pkt /= IP(
            src=spec.ip_src,
            dst=spec.ip_dst,
            id=spec.ip_id,
            tos=spec.ip_tos,
            ttl=spec.ip_ttl,
            flags="DF" if spec.ip_dont_fragment else 0,
            options=[IPOption(spec.ip_options)] if spec.ip_options else [],
        )
    else:
        pkt /= IPv6(
            src=spec.ip_src,
            dst=spec.ip_dst,
            tc=spec.ip_tos,
            fl=spec.ip_flow_label,
            hlim=spec.ip_ttl,
        )
    pkt /= UDP(sport=spec.udp_sport, dport=ROCEV2_PORT, chksum=spec.udp_checksum)
    pkt /= scapy_bth(spec, **bth_overrides)
    pkt /= Raw(pack_ext_headers(spec) + spec.payload + bytes(spec.pad_count))
    return pkt


def scapy_frame(spec: Spec) -> bytes:
    return raw(scapy_packet(spec))


def scapy_icrc_bytes(frame: bytes) -> bytes:
    """The 4 ICRC bytes scapy computes for `frame` (dissect, drop the ICRC, rebuild).

    Trailing Ethernet padding is cut first: scapy's compute_icrc would hash it.
    """
    pkt = Ether(frame)
    assert BTH in pkt, "scapy did not find a BTH"
    end = len(frame) - len(raw(pkt[UDP])) + pkt[UDP].len
    pkt = Ether(frame[:end])
    pkt[BTH].icrc = None
    return raw(pkt)[-4:]


def expected_fields(spec: Spec) -> dict[str, Any]:
    """What ``parse`` must report for a frame built from `spec` (Packet attribute names)."""
    v = lambda key: ext_value(spec, key)  # noqa: E731
    hdrs = spec.headers
    ipv4 = spec.ip_version == 4
    return {
        "eth_dst": spec.eth_dst,
        "eth_src": spec.eth_src,
        "vlan": spec.vlan,
        "ip_version": spec.ip_version,
        "ip_src": str(ipaddress.ip_address(spec.ip_src)),
        "ip_dst": str(ipaddress.ip_address(spec.ip_dst)),
        "ip_id": spec.ip_id if ipv4 else None,
        "ip_tos": spec.ip_tos,
        "ip_ttl": spec.ip_ttl,
        "ip_flow_label": None if ipv4 else spec.ip_flow_label,
        "udp_sport": spec.udp_sport,
        "udp_dport": ROCEV2_PORT,
        "opcode": spec.opcode,
        "opcode_name": IBA_OPCODES[spec.opcode][0],
        "se": spec.se,
        "mig_req": spec.mig_req,
        "pad_count": spec.pad_count,
        "tver": spec.tver,
        "pkey": spec.pkey,
        "fecn": spec.fecn,
        "becn": spec.becn,
        "dest_qp": spec.dest_qp,
        "ack_req": spec.ack_req,
        "psn": spec.psn,
        "headers": hdrs,
        "reth": (v("va"), v("rkey"), v("dma_len")) if "RETH" in hdrs else None,
        "imm": v("imm") if "ImmDt" in hdrs else None,
        "aeth": (v("syndrome"), v("msn")) if "AETH" in hdrs else None,
        "atomic_eth": (
            (v("va"), v("rkey"), v("swap_add"), v("compare")) if "AtomicETH" in hdrs else None
        ),
        "atomic_ack_orig": v("atomic_ack_orig") if "AtomicAckETH" in hdrs else None,
        "deth": (v("qkey"), v("src_qp")) if "DETH" in hdrs else None,
        "ieth_rkey": v("ieth_rkey") if "IETH" in hdrs else None,
        "payload": spec.payload,
        "pad": bytes(spec.pad_count),
    }


def packet_fields(pkt: Any) -> dict[str, Any]:
    """The subset of a parsed Packet that `expected_fields` describes, headers as tuples."""
    out: dict[str, Any] = {}
    for key in expected_fields(Spec(opcode=0x04)):
        value = getattr(pkt, key)
        if key in ("reth", "aeth", "atomic_eth", "deth") and value is not None:
            value = tuple(vars(value).values())
        out[key] = value
    return out


# --- pcap --------------------------------------------------------------------

PCAP_MAGIC = 0xA1B2C3D4
LINKTYPE_ETHERNET = 1


def classic_pcap(frames: Iterable[bytes]) -> bytes:
    """A classic libpcap file: 24-byte global header, 16-byte record headers."""
    out = [struct.pack("<IHHiIII", PCAP_MAGIC, 2, 4, 0, 0, 65535, LINKTYPE_ETHERNET)]
    for i, frame in enumerate(frames):
        out.append(struct.pack("<IIII", i, 0, len(frame), len(frame)))
        out.append(bytes(frame))
    return b"".join(out)


def write_pcap(path: Path, frames: Iterable[bytes]) -> str:
    """Write `frames` to `path`, with the package's pcap writer when it has one.

    Returns which writer was used ("roce_transceiver.pcap" or "tests.oracles").
    """
    frames = list(frames)
    try:
        from roce_transceiver.pcap import write_pcap as package_write_pcap  # type: ignore
    except ImportError:
        path.write_bytes(classic_pcap(frames))
        return "tests.oracles"
    package_write_pcap(path, frames)
    return "roce_transceiver.pcap"
