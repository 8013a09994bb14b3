"""The parser under arbitrary and damaged input.

Goal: ``parse`` and ``icrc`` never crash and never raise anything but
ProtocolError, whatever the bytes; each error names a field and an offset
inside the input; every truncation of a valid frame is an error, and a
truncation that keeps the IP and UDP lengths consistent names the first RoCE
header that no longer fits; ``build`` then ``parse`` gives back the fields.

Oracle: the contract itself (Packet, or ProtocolError with a field and an
offset no larger than the input), the IBA header sizes written out here for
truncations, and the input fields (tests/oracles.py) for round trips, the 64-bit fields
over all 64 bits and at 2**63 and 2**64 - 1.
"""

from __future__ import annotations

import random
import struct

import oracles
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracles import IBA_OPCODES, Spec, build_kwargs, random_spec

from roce_transceiver.protocol import ProtocolError, build, icrc, parse

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
FEW = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# IBA vol. 1 section 9.3: extension header sizes in bytes.
IBA_HEADER_BYTES = {
    "DETH": 8, "RETH": 16, "AtomicETH": 28, "AETH": 4, "AtomicAckETH": 8, "ImmDt": 4, "IETH": 4,
}  # fmt: skip
# ProtocolError.field of each header: Packet's attribute names.
HEADER_FIELD = {
    "DETH": "deth", "RETH": "reth", "AtomicETH": "atomic_eth", "AETH": "aeth",
    "AtomicAckETH": "atomic_ack_eth", "ImmDt": "immdt", "IETH": "ieth",
}  # fmt: skip
BTH_BYTES = 12
ICRC_BYTES = 4


def parse_or_error(data: bytes) -> object:
    """parse(data), holding it to the error contract; returns the Packet or the error."""
    try:
        pkt = parse(data)
    except ProtocolError as e:
        assert isinstance(e, ValueError)
        assert isinstance(e.field, str) and e.field, repr(e)
        assert 0 <= e.offset <= len(data), f"{e}: offset past {len(data)} bytes"
        message = str(e)
        assert f"offset {e.offset}" in message, message
        assert e.field.lower() in message.lower(), message
        try:
            icrc(data)
        except ProtocolError as again:
            assert (again.field, again.offset) == (e.field, e.offset)
        else:
            raise AssertionError(f"icrc() accepted what parse() refused: {data.hex()}")
        return e
    assert pkt.length <= len(data)
    assert pkt.icrc_ok == (icrc(data) == pkt.icrc)
    if pkt.opcode_name == "CNP":  # its PadCnt bits are reserved: 16 bytes, no pad
        assert (len(pkt.payload), pkt.pad) == (oracles.CNP_RESERVED_BYTES, b"")
    else:
        assert len(pkt.pad) == pkt.pad_count <= 3
    return pkt


@st.composite
def valid_specs(draw: st.DrawFn, max_payload: int = 64) -> Spec:
    opcode = draw(st.sampled_from(sorted(IBA_OPCODES)))
    seed = draw(st.integers(0, 2**32 - 1))
    return random_spec(random.Random(seed), opcode, max_payload=max_payload)


def transport_offset(frame: bytes) -> int:
    """Offset of the BTH, from the Ethernet and IP headers alone."""
    l3 = 18 if frame[12:14] == b"\x81\x00" else 14
    ihl = (frame[l3] & 0x0F) * 4 if frame[l3] >> 4 == 4 else 40
    return l3 + ihl + 8


# --- any bytes ------------------------------------------------------------------


@FUZZ
@given(st.binary(max_size=400))
def test_parse_any_bytes_gives_packet_or_protocol_error(data):
    parse_or_error(data)


@FUZZ
@given(valid_specs(), st.data())
def test_parse_valid_headers_then_any_bytes_gives_packet_or_protocol_error(spec, data):
    frame = build(**build_kwargs(spec))
    keep = data.draw(st.integers(0, len(frame)), label="keep")
    tail = data.draw(st.binary(max_size=80), label="tail")
    parse_or_error(frame[:keep] + tail)


@FUZZ
@given(valid_specs(), st.data())
def test_random_mutations_give_packet_or_protocol_error(spec, data):
    frame = bytearray(build(**build_kwargs(spec)))
    n = data.draw(st.integers(1, 6), label="mutations")
    for _ in range(n):
        kind = data.draw(st.sampled_from(["set", "xor", "insert", "delete"]), label="kind")
        at = data.draw(st.integers(0, max(0, len(frame) - 1)), label="at")
        if kind == "set" and frame:
            frame[at] = data.draw(st.integers(0, 255))
        elif kind == "xor" and frame:
            frame[at] ^= 1 << data.draw(st.integers(0, 7))
        elif kind == "insert":
            frame[at:at] = data.draw(st.binary(min_size=1, max_size=8))
        elif frame:
            del frame[at : at + data.draw(st.integers(1, 8))]
    parse_or_error(bytes(frame))


@FUZZ
@given(valid_specs(), st.data())
def test_random_length_fields_give_packet_or_protocol_error(spec, data):
    """The fields every later read depends on: IP lengths, IHL, UDP length, pad count."""
    frame = bytearray(build(**build_kwargs(spec)))
    l3 = 18 if spec.vlan is not None else 14
    bth = transport_offset(bytes(frame))
    # IPv4 version/IHL and total length, or IPv6 payload length.
    targets = [(l3, "B"), (l3 + 2, "H")] if spec.ip_version == 4 else [(l3 + 4, "H")]
    targets += [(bth - 4, "H"), (bth + 1, "B")]  # UDP length, BTH SE/M/pad/tver
    for off, fmt in data.draw(st.lists(st.sampled_from(targets), min_size=1, max_size=3)):
        value = data.draw(st.integers(0, 0xFF if fmt == "B" else 0xFFFF))
        struct.pack_into(">" + fmt, frame, off, value)
    parse_or_error(bytes(frame))


# --- truncations -------------------------------------------------------------------


@FEW
@given(valid_specs(max_payload=40))
def test_every_prefix_of_a_valid_frame_is_a_protocol_error(spec):
    frame = build(**build_kwargs(spec))
    assert parse(frame).icrc_ok
    for k in range(len(frame)):
        err = parse_or_error(frame[:k])
        assert isinstance(err, ProtocolError), f"prefix of {k} bytes parsed: {frame[:k].hex()}"
        assert err.offset <= k


def expected_truncation(spec: Spec, bth: int, t: int) -> tuple[str, int, int, int] | None:
    """(field, offset, need, have) decode must report for `t` transport bytes, or None."""
    if t < BTH_BYTES:
        return ("bth", bth, BTH_BYTES, t)
    body_end = bth + t - ICRC_BYTES  # headers must end before the ICRC
    off = bth + BTH_BYTES
    for hdr in spec.headers:
        size = IBA_HEADER_BYTES[hdr]
        if off + size > body_end:
            return (HEADER_FIELD[hdr], off, size, max(0, body_end - off))
        off += size
    if off + ICRC_BYTES > bth + t:
        return ("icrc", off, ICRC_BYTES, bth + t - off)
    return None


def cut_transport(frame: bytes, bth: int, t: int, ip_version: int) -> bytes:
    """Keep `t` bytes after the UDP header and rewrite IP and UDP lengths to match."""
    out = bytearray(frame[: bth + t])
    l3 = 18 if frame[12:14] == b"\x81\x00" else 14
    udp = bth - 8
    struct.pack_into(">H", out, udp + 4, 8 + t)
    if ip_version == 4:
        struct.pack_into(">H", out, l3 + 2, udp - l3 + 8 + t)
    else:
        struct.pack_into(">H", out, l3 + 4, 8 + t)
    return bytes(out)


@FEW
@given(valid_specs(max_payload=40))
def test_truncation_with_consistent_lengths_names_first_missing_header(spec):
    frame = build(**build_kwargs(spec))
    bth = transport_offset(frame)
    full = len(frame) - bth
    for t in range(full):
        cut = cut_transport(frame, bth, t, spec.ip_version)
        got = parse_or_error(cut)
        want = expected_truncation(spec, bth, t)
        if want is None:
            # All headers and an ICRC fit: a shorter message, or a pad count or
            # CNP length the shorter body cannot hold.
            if isinstance(got, ProtocolError):
                assert got.field in ("bth.pad_count", "cnp.length"), str(got)
            else:
                assert not got.icrc_ok or t == full
            continue
        field, offset, need, have = want
        assert isinstance(got, ProtocolError), f"{t} transport bytes parsed: {cut.hex()}"
        assert (got.field, got.offset) == (field, offset), str(got)
        assert str(got) == (
            f"truncated {field.upper()} at offset {offset}: need {need} bytes, {have} left"
        )


# --- round trip ------------------------------------------------------------------------


@st.composite
def edge_specs(draw: st.DrawFn) -> Spec:
    """A frame with a 64-bit field (VA, swap/add, compare, orig) at 2**63 or 2**64 - 1."""
    opcode = draw(st.sampled_from([op for op in sorted(IBA_OPCODES) if oracles.edge_specs(op)]))
    return draw(st.sampled_from(oracles.edge_specs(opcode)))


@FUZZ
@given(st.one_of(valid_specs(max_payload=300), edge_specs()))
def test_build_then_parse_gives_the_fields_given(spec):
    frame = build(**build_kwargs(spec))
    pkt = parse(frame)
    assert oracles.packet_fields(pkt) == oracles.expected_fields(spec)
    assert pkt.icrc_ok and pkt.length == len(frame)
