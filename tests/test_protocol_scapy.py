"""Wire layout and ICRC of RoCEv2 frames, byte-exact against scapy.

Goal: every frame ``build`` makes is the frame scapy makes from the same
fields, scapy dissects it to those fields and recomputes the same ICRC; every
frame scapy makes is parsed to the fields it was given with ``icrc_ok``; the
ICRC covers exactly what DESIGN.md section 3 says (IPv4 ID, total length and
flags covered; TOS, TTL, IP checksum, UDP checksum, BTH byte 4, IPv6 traffic
class, flow label and hop limit masked). Seeded random cases cover every
opcode in OPCODES, IPv4 and IPv6, with and without 802.1Q, payloads of 0..300
bytes (every pad count) and the 64-bit fields over all 64 bits, plus explicit
vectors at 2**63 and 2**64 - 1 for VA, swap/add, compare and orig.

Oracle: ``scapy.contrib.roce`` (its BTH layer and its own ICRC computation),
extension headers packed with ``struct`` from IBA layouts, the IBA opcode
table written out in tests/oracles.py, and a CNP captured from a ConnectX-4 Lx
(tests/golden/rocev2_captures.json).
"""

from __future__ import annotations

import json
import random
import struct
from dataclasses import replace
from pathlib import Path

import oracles
import pytest
from oracles import IBA_OPCODES, Spec, build_kwargs, random_spec, scapy_frame, scapy_icrc_bytes
from scapy.compat import raw
from scapy.contrib.roce import BTH, CNPPadding, cnp
from scapy.layers.inet import IP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Dot1Q, Ether

from roce_transceiver.protocol import OPCODES, ProtocolError, build, icrc, opcode_row, parse

CASES_PER_OPCODE = 8  # x 38 opcodes: ~300 frames per test, ~1 s each
OPCODE_NAMES = [name for name, _ in sorted(OPCODES.items(), key=lambda kv: kv[1])]
GOLDEN = json.loads((Path(__file__).parent / "golden" / "rocev2_captures.json").read_text())


def specs_for(name: str, tag: str, **kwargs: object) -> list[Spec]:
    """Seeded random specs for one opcode; cases cycle through IPv4/IPv6 x VLAN/none."""
    rng = random.Random(f"{tag}-{name}")
    return [
        random_spec(rng, OPCODES[name], ip_version=(4, 6)[i % 2], vlan=bool(i & 2), **kwargs)
        for i in range(CASES_PER_OPCODE)
    ]


def l3_offset(frame: bytes) -> int:
    return 18 if frame[12:14] == b"\x81\x00" else 14


# --- the opcode table ----------------------------------------------------------


def test_opcode_table_matches_iba_table_35():
    ours = {op: (opcode_row(op).name, opcode_row(op).headers) for op in OPCODES.values()}
    assert ours == IBA_OPCODES
    assert {name: op for op, (name, _) in IBA_OPCODES.items()} == OPCODES


def test_opcode_names_match_scapy_bth_table():
    scapy_names = BTH.fields_desc[0].i2s  # scapy's opcode -> name table
    known = {op for op in OPCODES.values() if op in scapy_names}
    # scapy lacks only the two SEND ... WITH INVALIDATE opcodes (RC 0x16, 0x17).
    assert set(OPCODES.values()) - known == {0x16, 0x17}
    for op in known:
        assert opcode_row(op).name == scapy_names[op]


# --- frames we build, checked by scapy ------------------------------------------


@pytest.mark.parametrize("name", OPCODE_NAMES)
def test_built_frame_dissects_in_scapy_to_given_fields(name):
    for spec in specs_for(name, "dissect"):
        frame = build(**build_kwargs(spec))
        pkt = Ether(frame)
        assert pkt.dst == spec.eth_dst and pkt.src == spec.eth_src
        if spec.vlan is None:
            assert Dot1Q not in pkt
        else:
            tag = pkt[Dot1Q]
            assert (tag.prio << 13 | tag.dei << 12 | tag.vlan) == spec.vlan
        if spec.ip_version == 4:
            ip = pkt[IP]
            assert (ip.src, ip.dst, ip.id, ip.tos, ip.ttl) == (
                spec.ip_src,
                spec.ip_dst,
                spec.ip_id,
                spec.ip_tos,
                spec.ip_ttl,
            )
            flags = (bool(ip.flags.DF), bool(ip.flags.MF), ip.frag)
            assert flags == (spec.ip_dont_fragment, False, 0)
            l3 = l3_offset(frame)
            assert ip.len == len(frame) - l3
            assert ip.chksum == _ipv4_checksum(frame[l3 : l3 + 20])
        else:
            ip6 = pkt[IPv6]
            assert (ip6.src, ip6.dst, ip6.tc, ip6.fl, ip6.hlim) == (
                spec.ip_src,
                spec.ip_dst,
                spec.ip_tos,
                spec.ip_flow_label,
                spec.ip_ttl,
            )
            assert ip6.plen == len(frame) - l3_offset(frame) - 40
        udp = pkt[UDP]
        assert (udp.sport, udp.dport, udp.chksum) == (spec.udp_sport, 4791, 0)
        assert udp.len == len(raw(udp))
        bth = pkt[BTH]
        got = (
            bth.opcode, bth.solicited, bth.migreq, bth.padcount, bth.version, bth.pkey,
            bth.fecn, bth.becn, bth.resv6, bth.dqpn, bth.ackreq, bth.resv7, bth.psn,
        )  # fmt: skip
        want = (
            spec.opcode, spec.se, spec.mig_req, spec.pad_count, spec.tver, spec.pkey,
            spec.fecn, spec.becn, 0, spec.dest_qp, spec.ack_req, 0, spec.psn,
        )  # fmt: skip
        assert got == want, spec
        after_bth = raw(bth.payload)
        assert after_bth == oracles.pack_ext_headers(spec) + spec.payload + bytes(spec.pad_count)


@pytest.mark.parametrize("name", OPCODE_NAMES)
def test_icrc_matches_scapy_recomputation(name):
    for spec in specs_for(name, "icrc"):
        frame = build(**build_kwargs(spec))
        wire = scapy_icrc_bytes(frame)
        assert frame[-4:] == wire, spec
        assert icrc(frame).to_bytes(4, "little") == wire
        assert parse(frame).icrc_ok


@pytest.mark.parametrize("name", OPCODE_NAMES)
def test_build_is_byte_identical_to_scapy(name):
    for spec in specs_for(name, "bytes"):
        assert build(**build_kwargs(spec)).hex() == scapy_frame(spec).hex(), spec


EDGE_OPCODES = [name for name in OPCODE_NAMES if oracles.edge_specs(OPCODES[name])]


@pytest.mark.parametrize("name", EDGE_OPCODES)
def test_64_bit_fields_at_2_63_and_2_64_minus_1_match_scapy(name):
    """VA, swap/add, compare and orig at the top of their range (bit 63 set, all ones): the
    frame is scapy's byte for byte, its extension headers are the struct-packed IBA layout,
    and parse() gives every field back."""
    for spec in oracles.edge_specs(OPCODES[name]):
        frame = build(**build_kwargs(spec))
        assert frame.hex() == scapy_frame(spec).hex(), spec
        after_bth = raw(Ether(frame)[BTH].payload)
        assert after_bth == oracles.pack_ext_headers(spec) + spec.payload + bytes(spec.pad_count)
        assert frame[-4:] == scapy_icrc_bytes(frame)
        assert oracles.packet_fields(parse(frame)) == oracles.expected_fields(spec), spec


def test_rc_write_first_icrc_matches_scapy_ipv6_vlan():
    spec = Spec(
        opcode=OPCODES["RC_RDMA_WRITE_FIRST"],
        payload=bytes(range(37)),
        vlan=0x6123,
        ip_src="fd00::1",
        ip_dst="fd00::2",
        ip_tos=0x68,
        ip_flow_label=0xABCDE,
        dest_qp=0x1234,
        psn=0xFFFFFF,
        ext={"va": 0x7000_0000_1000, "rkey": 0xCAFE, "dma_len": 4096},
    )
    frame = build(**build_kwargs(spec))
    assert frame == scapy_frame(spec)
    assert frame[-4:] == scapy_icrc_bytes(frame)


# --- frames scapy builds, parsed by us --------------------------------------------


@pytest.mark.parametrize("name", OPCODE_NAMES)
def test_scapy_built_frame_parses_to_its_fields(name):
    rng = random.Random(f"options-{name}")
    for spec in specs_for(name, "parse"):
        if rng.random() < 0.5:
            spec = replace(spec, udp_checksum=None)  # scapy computes a real checksum
        if spec.ip_version == 4 and rng.random() < 0.3:
            spec = replace(spec, ip_options=b"\x01" * rng.choice((4, 8, 40)))  # NOPs
        frame = scapy_frame(spec)
        pkt = parse(frame)
        assert oracles.packet_fields(pkt) == oracles.expected_fields(spec)
        assert pkt.icrc_ok, spec
        assert pkt.icrc == int.from_bytes(frame[-4:], "little")
        assert pkt.length == len(frame)
        assert pkt.udp_checksum == Ether(frame)[UDP].chksum
        # Ethernet pads short frames to 60 bytes (plus FCS): trailing bytes are ignored.
        padded = parse(frame + bytes(max(0, 64 - len(frame)) + 3))
        assert oracles.packet_fields(padded) == oracles.expected_fields(spec)
        assert padded.icrc_ok and padded.length == len(frame)


def test_cnp_built_by_scapy_parses_with_16_reserved_bytes():
    for reserved1, reserved2 in ((0, 0), (0x0123456789ABCDEF, 0xFEDCBA9876543210)):
        for ip in (
            IP(src="22.22.22.8", dst="22.22.22.7", id=0x98C6, flags="DF", ttl=0x20, tos=0x89),
            IPv6(src="fd00::8", dst="fd00::7", tc=0x89, fl=0x12345, hlim=0x20),
        ):
            pkt = Ether(dst="02:00:00:00:00:07", src="02:00:00:00:00:08") / ip
            pkt /= UDP(sport=56238, dport=4791, chksum=0) / cnp(dqpn=0xD2)
            pkt[CNPPadding].reserved1 = reserved1
            pkt[CNPPadding].reserved2 = reserved2
            frame = raw(pkt)
            got = parse(frame)
            assert (got.opcode, got.opcode_name, got.headers) == (0x81, "CNP", ())
            assert got.becn and not got.fecn and got.dest_qp == 0xD2 and got.psn == 0
            assert got.payload == struct.pack(">QQ", reserved1, reserved2)
            assert got.pad_count == 0 and got.pad == b""
            ip_bytes = 20 if IP in pkt else 40
            assert got.icrc_ok and got.length == len(frame) == 14 + ip_bytes + 8 + 12 + 16 + 4


def test_cnp_build_is_byte_identical_to_scapy_cnp():
    pkt = Ether(dst="02:00:00:00:00:07", src="02:00:00:00:00:08")
    pkt /= IP(src="22.22.22.8", dst="22.22.22.7", id=0x98C6, flags="DF", ttl=0x20, tos=0x89)
    pkt /= UDP(sport=56238, dport=4791, chksum=0) / cnp(dqpn=0xD2)
    ours = build(
        "CNP",
        bytes(16),
        eth_dst="02:00:00:00:00:07",
        eth_src="02:00:00:00:00:08",
        ip_src="22.22.22.8",
        ip_dst="22.22.22.7",
        ip_id=0x98C6,
        ip_ttl=0x20,
        ip_tos=0x89,
        udp_sport=56238,
        mig_req=False,
        becn=True,
        dest_qp=0xD2,
    )
    assert ours.hex() == raw(pkt).hex()


@pytest.mark.parametrize("capture", GOLDEN, ids=[g["name"] for g in GOLDEN])
def test_golden_capture_parses_with_icrc_ok_and_rebuilds_byte_exact(capture):
    frame = bytes.fromhex(capture["hex"])
    want = capture["fields"]
    pkt = parse(frame)
    assert pkt.icrc_ok
    assert scapy_icrc_bytes(frame) == frame[-4:]
    for key, value in want.items():
        got = getattr(pkt, key)
        if key == "payload":
            got = got.hex()
        elif key == "headers":
            got = list(got)
        assert got == value, key
    kwargs = {k: v for k, v in want.items() if k not in ("opcode_name", "headers", "icrc")}
    kwargs["payload"] = bytes.fromhex(kwargs["payload"])
    for derived in ("ip_version", "udp_dport", "pad_count"):
        kwargs.pop(derived)
    assert build(**kwargs).hex() == frame.hex()


# --- what the ICRC covers ----------------------------------------------------------


def masked_offsets(frame: bytes) -> set[int]:
    """Offsets of the variant bytes (DESIGN.md section 3), found without asking parse()."""
    l3 = l3_offset(frame)
    if frame[l3] >> 4 == 4:
        ihl = (frame[l3] & 0x0F) * 4
        ip = {l3 + 1, l3 + 8, l3 + 10, l3 + 11}  # TOS, TTL, header checksum
    else:
        ihl = 40
        ip = {l3 + 1, l3 + 2, l3 + 3, l3 + 7}  # traffic class, flow label, hop limit
    l4 = l3 + ihl
    return ip | {l4 + 6, l4 + 7, l4 + 8 + 4}  # UDP checksum, BTH FECN/BECN byte


def inert_offsets(frame: bytes, spec: Spec) -> set[int]:
    """Covered bytes whose value no parser check looks at: addresses, IPv4 ID, UDP
    source port, P_Key, DestQP, PSN, extension headers and payload."""
    l3 = l3_offset(frame)
    if spec.ip_version == 4:
        ihl = (frame[l3] & 0x0F) * 4
        ip = {l3 + 4, l3 + 5, *range(l3 + 12, l3 + 20)}
    else:
        ihl = 40
        ip = set(range(l3 + 8, l3 + 40))
    bth = l3 + ihl + 8
    udp_sport = {l3 + ihl, l3 + ihl + 1}
    pkey_dqpn = {bth + 2, bth + 3, *range(bth + 5, bth + 8)}
    psn = set(range(bth + 9, bth + 12))
    ext_end = bth + 12 + len(oracles.pack_ext_headers(spec))
    ext_and_payload = set(range(bth + 12, ext_end + len(spec.payload)))
    return ip | udp_sport | pkey_dqpn | psn | ext_and_payload


@pytest.mark.parametrize("ip_version", [4, 6])
@pytest.mark.parametrize("vlan", [False, True], ids=["untagged", "vlan"])
def test_single_byte_flip_in_covered_bytes_fails_icrc(ip_version, vlan):
    rng = random.Random(f"flip-{ip_version}-{vlan}")
    for opcode in rng.sample(sorted(IBA_OPCODES), 10):
        spec = random_spec(rng, opcode, ip_version=ip_version, vlan=vlan, max_payload=24)
        frame = scapy_frame(spec)
        masked = masked_offsets(frame)
        inert = inert_offsets(frame, spec)
        l3 = l3_offset(frame)
        for off in range(l3, len(frame)):
            if off in masked or (ip_version == 6 and off == l3):
                continue  # masked, or (IPv6 byte 0) version + masked traffic-class nibble
            mutated = bytearray(frame)
            mutated[off] ^= rng.randrange(1, 256)
            try:
                pkt = parse(bytes(mutated))
            except ProtocolError:
                assert off not in inert, f"offset {off}: {bytes(mutated).hex()}"
                continue
            assert not pkt.icrc_ok, f"flip at offset {off} kept icrc_ok: {bytes(mutated).hex()}"


def test_masked_fields_leave_icrc_ok_ipv4():
    rng = random.Random("masked-v4")
    for opcode in sorted(IBA_OPCODES):
        spec = random_spec(rng, opcode, ip_version=4, max_payload=64)
        frame = scapy_frame(spec)
        l3 = l3_offset(frame)
        mutated = bytearray(frame)
        for off in (l3 + 1, l3 + 8, l3 + 10, l3 + 11, l3 + 20 + 6, l3 + 20 + 7, l3 + 28 + 4):
            mutated[off] = rng.randrange(256)  # TOS, TTL, checksum, UDP checksum, BTH byte 4
        mutated[l3 + 8] = rng.randrange(1, 256)  # keep the TTL a live packet's
        pkt = parse(bytes(mutated))
        assert pkt.icrc_ok, bytes(mutated).hex()
        assert scapy_icrc_bytes(bytes(mutated)) == frame[-4:]
        assert (pkt.ip_tos, pkt.ip_ttl) == (mutated[l3 + 1], mutated[l3 + 8])
        ecn_byte = mutated[l3 + 20 + 8 + 4]
        assert (pkt.fecn, pkt.becn) == (bool(ecn_byte & 0x80), bool(ecn_byte & 0x40))


def test_masked_fields_leave_icrc_ok_ipv6():
    rng = random.Random("masked-v6")
    for opcode in sorted(IBA_OPCODES):
        spec = random_spec(rng, opcode, ip_version=6, vlan=rng.random() < 0.5, max_payload=64)
        frame = scapy_frame(spec)
        l3 = l3_offset(frame)
        mutated = bytearray(frame)
        mutated[l3] = 0x60 | rng.randrange(16)  # version stays 6; traffic class high nibble
        for off in (l3 + 1, l3 + 2, l3 + 3, l3 + 7, l3 + 40 + 6, l3 + 40 + 7, l3 + 48 + 4):
            mutated[off] = rng.randrange(256)
        pkt = parse(bytes(mutated))
        assert pkt.icrc_ok, bytes(mutated).hex()
        assert scapy_icrc_bytes(bytes(mutated)) == frame[-4:]
        tc_fl = int.from_bytes(mutated[l3 : l3 + 4], "big")
        assert (pkt.ip_tos, pkt.ip_flow_label, pkt.ip_ttl) == (
            (tc_fl >> 20) & 0xFF,
            tc_fl & 0xFFFFF,
            mutated[l3 + 7],
        )


def _ipv4_checksum(header: bytes) -> int:
    words = struct.unpack(f">{len(header) // 2}H", header[:10] + b"\0\0" + header[12:])
    s = sum(words)
    while s > 0xFFFF:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def _set_ipv4(frame: bytes, off: int, fmt: str, value: int) -> bytes:
    """Rewrite an IPv4 header field and fix the header checksum, as a router would."""
    b = bytearray(frame)
    l3 = l3_offset(frame)
    struct.pack_into(fmt, b, l3 + off, value)
    struct.pack_into(">H", b, l3 + 10, _ipv4_checksum(bytes(b[l3 : l3 + 20])))
    return bytes(b)


def test_ipv4_id_flags_and_total_length_are_covered():
    rng = random.Random("covered")
    for opcode in sorted(IBA_OPCODES):
        spec = random_spec(rng, opcode, ip_version=4, max_payload=40)
        frame = scapy_frame(spec)
        l3 = l3_offset(frame)
        ip_id, flags = struct.unpack_from(">HH", frame, l3 + 4)
        total = struct.unpack_from(">H", frame, l3 + 2)[0]
        variants = {
            "id": _set_ipv4(frame, 4, ">H", ip_id ^ (1 << rng.randrange(16))),
            "DF": _set_ipv4(frame, 6, ">H", flags ^ 0x4000),
            "reserved flag": _set_ipv4(frame, 6, ">H", flags ^ 0x8000),
            # 4 more bytes in the IP packet, past the UDP datagram: the ICRC
            # still ends where UDP says, only the total length field differs.
            "total length": _set_ipv4(frame + b"\0" * 4, 2, ">H", total + 4),
        }
        for what, mutated in variants.items():
            pkt = parse(mutated)
            assert not pkt.icrc_ok, f"{what}: {mutated.hex()}"
            assert icrc(mutated).to_bytes(4, "little") == scapy_icrc_bytes(mutated), what
            assert pkt.payload == spec.payload


def test_ipv6_payload_length_is_covered():
    rng = random.Random("covered6")
    for opcode in sorted(IBA_OPCODES):
        spec = random_spec(rng, opcode, ip_version=6, max_payload=40)
        frame = bytearray(scapy_frame(spec) + b"\0" * 8)
        l3 = l3_offset(frame)
        plen = struct.unpack_from(">H", frame, l3 + 4)[0]
        struct.pack_into(">H", frame, l3 + 4, plen + 8)
        pkt = parse(bytes(frame))
        assert not pkt.icrc_ok
        assert icrc(bytes(frame)).to_bytes(4, "little") == scapy_icrc_bytes(bytes(frame))


def test_bth_reserved_bits_of_byte_8_are_covered():
    rng = random.Random("resv7")
    for opcode in sorted(IBA_OPCODES):
        spec = random_spec(rng, opcode, max_payload=16)
        frame = bytearray(scapy_frame(spec))
        bth = len(frame) - len(raw(Ether(bytes(frame))[BTH]))
        frame[bth + 8] ^= 1 << rng.randrange(7)  # resv7, below the AckReq bit
        pkt = parse(bytes(frame))
        assert not pkt.icrc_ok and pkt.ack_req == spec.ack_req
