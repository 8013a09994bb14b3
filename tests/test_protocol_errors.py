"""Error messages of parse() and build(): each names the field and where it is.

Goal: a frame that is not valid RoCEv2 raises ProtocolError (a ValueError)
whose ``field``, ``offset`` and message say which header or field is wrong, at
which byte offset, and why ("truncated RETH at offset 54: need 16 bytes, 8
left"); a bad build() argument raises ValueError naming the keyword and its
allowed range.

Oracle: the offsets come from the header sizes (Ethernet 14, 802.1Q 4, IPv4
20, IPv6 40, UDP 8, BTH 12, RETH 16), the message shapes from STYLE.md and
rt/protocol/describe.h, the frames from scapy or from a valid frame with one
byte changed.
"""

from __future__ import annotations

import re
import struct

import pytest
from scapy.compat import raw
from scapy.contrib.roce import BTH
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from roce_transceiver.protocol import ProtocolError, build, icrc, parse

ETH, VLAN, IPV4, IPV6, UDP_LEN, BTH_LEN = 14, 4, 20, 40, 8, 12
L3 = ETH  # untagged
L4 = L3 + IPV4
BTH_AT = L4 + UDP_LEN  # 42
EXT_AT = BTH_AT + BTH_LEN  # 54


def patched(frame: bytes, offset: int, data: bytes) -> bytes:
    out = bytearray(frame)
    out[offset : offset + len(data)] = data
    return bytes(out)


def send_only(payload: bytes = b"", **kw: object) -> bytes:
    return build("RC_SEND_ONLY", payload, **kw)


def scapy_udp(transport: bytes) -> bytes:
    """Ether / IPv4 / UDP 4791 around `transport`, lengths computed by scapy."""
    pkt = Ether(dst="02:00:00:00:00:02", src="02:00:00:00:00:01")
    pkt /= IP(src="10.0.0.1", dst="10.0.0.2", flags="DF") / UDP(sport=49152, dport=4791, chksum=0)
    return raw(pkt / Raw(transport))


def scapy_roce(bth: BTH, after_bth: bytes, icrc_bytes: bytes = b"\0" * 4) -> bytes:
    return scapy_udp(raw(bth)[:BTH_LEN] + after_bth + icrc_bytes)


def raises(frame: bytes) -> ProtocolError:
    with pytest.raises(ProtocolError) as info:
        parse(frame)
    with pytest.raises(ProtocolError) as again:
        icrc(frame)
    assert (again.value.field, again.value.offset) == (info.value.field, info.value.offset)
    return info.value


# --- parse --------------------------------------------------------------------------

# (id, frame, field, offset, message)
PARSE_ERRORS = [
    (
        "truncated_reth",
        # An RDMA WRITE ONLY (0x2A) with 8 bytes between BTH and ICRC: RETH needs 16.
        patched(build("UC_SEND_ONLY", bytes(8)), BTH_AT, b"\x2a"),
        "reth", EXT_AT, "truncated RETH at offset 54: need 16 bytes, 8 left",
    ),
    (
        "truncated_eth", b"\x02" * 10,
        "eth", 0, "truncated ETH at offset 0: need 14 bytes, 10 left",
    ),
    (
        "empty_frame", b"",
        "eth", 0, "truncated ETH at offset 0: need 14 bytes, 0 left",
    ),
    (
        "truncated_vlan", bytes(12) + b"\x81\x00\x00\x05",
        "vlan", 12, "truncated VLAN at offset 12: need 6 bytes, 4 left",
    ),
    (
        "truncated_ipv4", send_only()[: L3 + 12],
        "ipv4", L3, "truncated IPV4 at offset 14: need 20 bytes, 12 left",
    ),
    (
        "truncated_ipv6", send_only(ip_src="fd00::1", ip_dst="fd00::2")[: L3 + 39],
        "ipv6", L3, "truncated IPV6 at offset 14: need 40 bytes, 39 left",
    ),
    (
        "truncated_bth",
        # UDP datagram of 8 + 6 bytes: the BTH needs 12.
        scapy_udp(raw(BTH(opcode=4))[:6]),
        "bth", BTH_AT, "truncated BTH at offset 42: need 12 bytes, 6 left",
    ),
    (
        "truncated_icrc",
        scapy_roce(BTH(opcode=4), b"", b"\0\0"),
        "icrc", EXT_AT, "truncated ICRC at offset 54: need 4 bytes, 2 left",
    ),
    (
        "truncated_atomic_eth",
        patched(build("RC_SEND_ONLY", bytes(20)), BTH_AT, b"\x13"),  # COMPARE_SWAP: 28 bytes
        "atomic_eth", EXT_AT, "truncated ATOMIC_ETH at offset 54: need 28 bytes, 20 left",
    ),
    (
        "truncated_immdt_after_deth",
        # UD SEND ONLY WITH IMMEDIATE: DETH (8) fits in 8 bytes, ImmDt at 62 does not.
        patched(build("RC_SEND_ONLY", bytes(8)), BTH_AT, b"\x65"),
        "immdt", EXT_AT + 8, "truncated IMMDT at offset 62: need 4 bytes, 0 left",
    ),
    (
        "pad_count_beyond_body",
        # PadCnt 3 with 2 bytes between BTH and ICRC.
        scapy_roce(BTH(opcode=4, padcount=3), b"ab"),
        "bth.pad_count", BTH_AT + 1, "bad bth.pad_count at offset 43: 3 (limit 2)",
    ),
    (
        "cnp_with_8_bytes",
        scapy_roce(BTH(opcode=0x81, becn=1), bytes(8)),
        "cnp.length", EXT_AT, "bad cnp.length at offset 54: 8 (limit 16)",
    ),
    (
        "udp_port_4790",
        send_only(udp_dport=4790),
        "udp.dst_port", L4 + 2,
        "not RoCEv2: udp.dst_port at offset 36 is 0x12B6, expected 0x12B7",
    ),
    (
        "ipv4_protocol_tcp",
        patched(send_only(), L3 + 9, b"\x06"),
        "ipv4.protocol", L3 + 9, "not RoCEv2: ipv4.protocol at offset 23 is 0x6, expected 0x11",
    ),
    (
        "ipv6_next_header_tcp",
        patched(send_only(ip_src="fd00::1", ip_dst="fd00::2"), L3 + 6, b"\x06"),
        "ipv6.next_header", L3 + 6,
        "not RoCEv2: ipv6.next_header at offset 20 is 0x6, expected 0x11",
    ),
    (
        "rd_opcode_0x40",
        patched(send_only(), BTH_AT, b"\x40"),
        "bth.opcode", BTH_AT, "unsupported bth.opcode at offset 42: 0x40 (RD transport)",
    ),
    (
        "xrc_opcode_0xa0",
        patched(send_only(), BTH_AT, b"\xa0"),
        "bth.opcode", BTH_AT, "unsupported bth.opcode at offset 42: 0xA0 (XRC transport)",
    ),
    (
        "uc_has_no_rdma_read_0x2c",
        patched(send_only(), BTH_AT, b"\x2c"),
        "bth.opcode", BTH_AT, "bad bth.opcode at offset 42: 0x2C",
    ),
    (
        "ud_has_no_send_first_0x60",
        patched(send_only(), BTH_AT, b"\x60"),
        "bth.opcode", BTH_AT, "bad bth.opcode at offset 42: 0x60",
    ),
    (
        "ipv4_more_fragments",
        patched(send_only(), L3 + 6, b"\x20\x00"),
        "ipv4.flags_fragment", L3 + 6, "unsupported ipv4.flags_fragment at offset 20: 0x2000",
    ),
    (
        "ipv4_fragment_offset",
        patched(send_only(), L3 + 6, b"\x40\x08"),
        "ipv4.flags_fragment", L3 + 6, "unsupported ipv4.flags_fragment at offset 20: 0x4008",
    ),
    (
        "ipv4_ihl_4",
        patched(send_only(), L3, b"\x44"),
        "ipv4.ihl", L3, "bad ipv4.ihl at offset 14: 4 (limit 5)",
    ),
    (
        "ipv4_version_6",
        patched(send_only(), L3, b"\x65"),
        "ipv4.version", L3, "bad ipv4.version at offset 14: 0x6",
    ),
    (
        "ipv4_total_length_past_frame",
        patched(send_only(), L3 + 2, struct.pack(">H", 200)),
        "ipv4.total_length", L3 + 2, "bad ipv4.total_length at offset 16: 200 (limit 44)",
    ),
    (
        "udp_length_below_header",
        patched(send_only(), L4 + 4, struct.pack(">H", 7)),
        "udp.length", L4 + 4, "bad udp.length at offset 38: 7 (limit 24)",
    ),
    (
        "udp_length_past_ip",
        patched(send_only(), L4 + 4, struct.pack(">H", 99)),
        "udp.length", L4 + 4, "bad udp.length at offset 38: 99 (limit 24)",
    ),
    (
        "ipv6_payload_length_past_frame",
        patched(send_only(ip_src="fd00::1", ip_dst="fd00::2"), L3 + 4, struct.pack(">H", 500)),
        "ipv6.payload_length", L3 + 4, "bad ipv6.payload_length at offset 18: 500 (limit 24)",
    ),
    (
        "vlan_shifts_offsets",
        patched(send_only(bytes(8), vlan=5), BTH_AT + VLAN, b"\x2a"),
        "reth", EXT_AT + VLAN, "truncated RETH at offset 58: need 16 bytes, 8 left",
    ),
]  # fmt: skip


@pytest.mark.parametrize(
    ("frame", "field", "offset", "message"),
    [case[1:] for case in PARSE_ERRORS],
    ids=[case[0] for case in PARSE_ERRORS],
)
def test_parse_error_names_field_offset_and_reason(frame, field, offset, message):
    err = raises(frame)
    assert isinstance(err, ValueError)
    assert (err.field, err.offset) == (field, offset)
    assert str(err) == message


def test_pad_count_with_empty_body_names_pad_count_and_offset():
    err = raises(send_only(b"", pad_count=3))
    assert (err.field, err.offset) == ("bth.pad_count", BTH_AT + 1)
    assert str(err).startswith("bad bth.pad_count at offset 43: ")
    assert "3" in str(err).split(": ", 1)[1]


def test_bad_ethertype_names_ethertype_offset_and_value():
    arp = patched(send_only(), 12, b"\x08\x06")
    err = raises(arp)
    assert (err.field, err.offset) == ("eth.ethertype", 12)
    message = str(err)
    assert message.startswith("not RoCEv2: eth.ethertype at offset 12 is 0x806"), message
    # The frame is not wrong for lack of ethertype 0: say what would do.
    assert "expected 0x0" not in message, message


def test_vlan_inner_ethertype_is_checked_at_offset_16():
    frame = patched(send_only(vlan=7), 16, b"\x88\xb5")
    err = raises(frame)
    assert (err.field, err.offset) == ("eth.ethertype", 16)


def test_protocol_error_is_a_value_error_with_field_and_offset():
    with pytest.raises(ValueError, match=r"^truncated ETH at offset 0") as info:
        parse(b"\0")
    assert isinstance(info.value, ProtocolError)
    assert info.value.field == "eth" and info.value.offset == 0


# --- build ---------------------------------------------------------------------------

BUILD_ERRORS = [
    ({"bogus": 1}, "build(): unknown field 'bogus'"),
    ({"psn": 1 << 24}, "psn=16777216: out of range 0..16777215"),
    ({"dest_qp": -1}, "dest_qp=-1: out of range 0..16777215"),
    ({"pad_count": 4}, "pad_count=4: out of range 0..3"),
    ({"tver": 16}, "tver=16: out of range 0..15"),
    ({"pkey": 1 << 16}, "pkey=65536: out of range 0..65535"),
    ({"rkey": 1 << 32}, "rkey=4294967296: out of range 0..4294967295"),
    ({"msn": 1 << 24}, "msn=16777216: out of range 0..16777215"),
    ({"src_qp": 1 << 24}, "src_qp=16777216: out of range 0..16777215"),
    ({"ip_flow_label": 1 << 20}, "ip_flow_label=1048576: out of range 0..1048575"),
    ({"vlan": 70000}, "vlan=70000: out of range 0..65535"),
    ({"ip_ttl": 256}, "ip_ttl=256: out of range 0..255"),
    ({"udp_sport": -5}, "udp_sport=-5: out of range 0..65535"),
    ({"icrc": 1 << 32}, "icrc=4294967296: out of range 0..4294967295"),
    ({"ieth_rkey": 1 << 32}, "ieth_rkey=4294967296: out of range 0..4294967295"),
    ({"eth_dst": "zz"}, "eth_dst='zz': not a MAC address"),
    ({"eth_src": b"\1\2\3"}, "eth_src: need 6 bytes, got 3"),
    ({"ip_src": "10.0.0.1", "ip_dst": "fd00::2"}, "not the same IP version"),
    ({"ip_src": "nope"}, "ip_src/ip_dst: 'nope'"),
]


@pytest.mark.parametrize(("kwargs", "message"), BUILD_ERRORS, ids=[str(k) for k, _ in BUILD_ERRORS])
def test_build_error_names_the_field(kwargs, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        build("RC_RDMA_WRITE_ONLY", b"", **kwargs)


@pytest.mark.parametrize(
    ("opcode", "message"),
    [
        ("RC_NOPE", "opcode 'RC_NOPE': unknown name"),
        (0x40, "opcode 0x40: not an RC, UC, UD or CNP opcode"),
        (0x2C, "opcode 0x2C: not an RC, UC, UD or CNP opcode"),
    ],
)
def test_build_bad_opcode_names_the_opcode(opcode, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        build(opcode)


def test_build_cnp_payload_must_be_16_reserved_bytes():
    with pytest.raises(
        ValueError, match=r"^payload: a CNP carries exactly 16 reserved bytes, got 3"
    ):
        build("CNP", b"abc")


def test_build_payload_beyond_ip_limit_names_payload():
    with pytest.raises(ValueError, match=r"^payload: 70000 bytes"):
        build("RC_SEND_ONLY", bytes(70000))


# The 64-bit wire fields, the opcode that carries each, and how parse() reports it.
WIDE_FIELDS = {
    "va": ("RC_RDMA_WRITE_ONLY", lambda pkt: pkt.reth.va),
    "swap_add": ("RC_FETCH_ADD", lambda pkt: pkt.atomic_eth.swap_add),
    "compare": ("RC_COMPARE_SWAP", lambda pkt: pkt.atomic_eth.compare),
    "atomic_ack_orig": ("RC_ATOMIC_ACKNOWLEDGE", lambda pkt: pkt.atomic_ack_orig),
}


def test_build_accepts_64_bit_fields_at_and_above_2_63():
    """VA, swap/add, compare and orig are 64-bit on the wire (kernel VAs have bit 63 set)."""
    failures = []
    for field, (opcode, read) in WIDE_FIELDS.items():
        for value in (2**63, 2**64 - 1):
            try:
                got = read(parse(build(opcode, b"", **{field: value})))
            except Exception as e:
                failures.append(f"build({opcode}, {field}={value:#x}): {type(e).__name__}: {e}")
                continue
            if got != value:
                failures.append(f"build({opcode}, {field}={value:#x}) parses back {got:#x}")
    assert not failures, "\n".join(failures)


def test_build_64_bit_field_overflow_is_value_error_naming_field():
    failures = []
    for field, (opcode, _) in WIDE_FIELDS.items():
        try:
            build(opcode, b"", **{field: 2**64})
        except ValueError as e:
            if not str(e).startswith(f"{field}=18446744073709551616: out of range"):
                failures.append(f"{field}=2**64: ValueError {e}")
        except Exception as e:
            failures.append(f"{field}=2**64: {type(e).__name__}: {e}")
        else:
            failures.append(f"{field}=2**64: accepted")
    assert not failures, "\n".join(failures)
