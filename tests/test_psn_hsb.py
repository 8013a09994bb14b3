"""PSN arithmetic and the Holoscan Sensor Bridge wire conventions.

Goal: psn_add and psn_diff wrap at 2**24 (checked at 0, 2**23, 0xFFFFFF and
across the wrap); the HSB end-of-frame immediate is psn[19:0] << 12 |
page[11:0], big-endian in the ImmDt; the 128-byte frame metadata record has
the big-endian layout HSB's FPGA sends and hololink reads (DESIGN.md section 3),
field by field, and its CRC is JAMCRC.

Oracle: plain Python formulas (modular arithmetic, shifts and masks) and a
``struct`` layout written here from hololink's ``Hololink::deserialize_metadata``:
">III Q I Q H H Q I": flags, psn, crc, PTP seconds u64 + ns u32, bytes_written u64,
reserved u16, frame_number u16, metadata PTP seconds u64 + ns u32, zero-filled to 128
bytes; JAMCRC is zlib's CRC-32 with its final XOR undone.
"""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from roce_transceiver.hsb import (
    METADATA_BYTES,
    FrameMetadata,
    imm_decode,
    imm_encode,
    jamcrc,
    page_bits_for,
)
from roce_transceiver.protocol import build, parse, psn_add, psn_diff

PSN_MOD = 1 << 24
HALF = 1 << 23
PROPS = settings(max_examples=300, deadline=None)


def ref_psn_add(psn: int, n: int) -> int:
    return (psn + n) % PSN_MOD


def ref_psn_diff(b: int, a: int) -> int:
    d = (b - a) % PSN_MOD
    return d - PSN_MOD if d >= HALF else d


# --- PSN -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("psn", "n", "want"),
    [
        (0, 0, 0),
        (0, 1, 1),
        (0xFFFFFF, 1, 0),
        (0xFFFFFF, 2, 1),
        (0xFFFFFE, 5, 3),
        (HALF, HALF, 0),
        (HALF - 1, 1, HALF),
        (0, PSN_MOD, 0),
        (7, 0xFFFFFFFF, 6),  # n as large as a u32: (7 + 2**32 - 1) mod 2**24
    ],
)
def test_psn_add_wraps_at_2_24(psn, n, want):
    assert psn_add(psn, n) == want == ref_psn_add(psn, n)


@pytest.mark.parametrize(
    ("b", "a", "want"),
    [
        (0, 0, 0),
        (1, 0, 1),
        (0, 1, -1),
        (0, 0xFFFFFF, 1),  # 0 follows 0xFFFFFF
        (0xFFFFFF, 0, -1),
        (0x10, 0xFFFFF0, 0x20),
        (HALF - 1, 0, HALF - 1),  # the farthest ahead
        (HALF, 0, -HALF),  # exactly half the circle counts as behind
        (0, HALF, -HALF),
        (HALF + 1, 0, -(HALF - 1)),
        (0xFFFFFF, HALF, HALF - 1),
    ],
)
def test_psn_diff_is_signed_on_the_24_bit_circle(b, a, want):
    assert psn_diff(b, a) == want == ref_psn_diff(b, a)


@PROPS
@given(st.integers(0, PSN_MOD - 1), st.integers(0, 2**32 - 1))
def test_psn_add_matches_modular_formula(psn, n):
    assert psn_add(psn, n) == ref_psn_add(psn, n)


@PROPS
@given(st.integers(0, PSN_MOD - 1), st.integers(0, PSN_MOD - 1))
def test_psn_diff_matches_formula_and_inverts_psn_add(b, a):
    d = psn_diff(b, a)
    assert d == ref_psn_diff(b, a)
    assert -HALF <= d < HALF
    assert psn_add(a, d % PSN_MOD) == b


# --- HSB immediate ------------------------------------------------------------------


def ref_imm(psn: int, page: int) -> int:
    return (psn & 0xFFFFF) << 12 | (page & 0xFFF)


@pytest.mark.parametrize(
    ("psn", "page", "want"),
    [
        (0, 0, 0),
        (1, 0, 0x1000),
        (0, 1, 1),
        (0xFFFFF, 0xFFF, 0xFFFFFFFF),
        (0xFFFFFF, 0, 0xFFFFF000),  # PSN bits 23:20 are dropped
        (0x123456, 0xABC, 0x23456ABC),
        (0, 0x1000, 0),  # page bit 12 is dropped
    ],
)
def test_imm_encode_is_psn_20_bits_then_page_12_bits(psn, page, want):
    assert imm_encode(psn, page) == want == ref_imm(psn, page)


@PROPS
@given(st.integers(0, PSN_MOD - 1), st.integers(0, 0xFFF))
def test_imm_round_trips_through_decode(psn, page):
    imm = imm_encode(psn, page)
    assert imm == ref_imm(psn, page)
    assert imm_decode(imm) == (psn & 0xFFFFF, page)


@PROPS
@given(st.integers(0, 2**32 - 1))
def test_imm_decode_splits_bits_31_12_and_11_0(imm):
    assert imm_decode(imm) == (imm >> 12, imm & 0xFFF)


@PROPS
@given(st.integers(0, 2**32 - 1))
def test_an_older_bridges_page_is_the_immediates_low_8_bits(imm):
    assert imm_decode(imm, page_bits=8) == (imm >> 12, imm & 0xFF)


def test_the_page_bits_follow_the_bridges_hsb_ip_version():
    # HSB IP 0x2603 moved the page from the immediate's low 8 bits to its low 12.
    assert [page_bits_for(v) for v in (0x2602, 0x2603, 0x2700, None)] == [8, 12, 12, 12]
    with pytest.raises(ValueError, match="page_bits 10: 8 or 12"):
        imm_decode(0, page_bits=10)


def test_imm_is_big_endian_in_end_of_frame_write():
    psn, page = 0xABCDEF, 0x123
    frame = build(
        "UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", b"\xee" * 8, psn=psn, imm=imm_encode(psn, page)
    )
    imm_at = 14 + 20 + 8 + 12 + 16  # Ethernet, IPv4, UDP, BTH, RETH
    assert frame[imm_at : imm_at + 4] == struct.pack(">I", (psn & 0xFFFFF) << 12 | page)
    pkt = parse(frame)
    assert imm_decode(pkt.imm) == (psn & 0xFFFFF, page)


# --- HSB frame metadata -------------------------------------------------------------

# Byte offset and width of each field, as hololink deserializes the record.
LAYOUT = {
    "flags": (0, 4),
    "psn": (4, 4),
    "crc": (8, 4),
    "ptp_s": (12, 8),
    "ptp_ns": (20, 4),
    "bytes_written": (24, 8),
    "frame_number": (34, 2),  # after 2 reserved bytes
    "meta_ptp_s": (36, 8),
    "meta_ptp_ns": (44, 4),
}
RECORD = struct.Struct(">IIIQIQHHQI")  # hololink's reads, in order (H @32: reserved)


def ref_pack(m: dict[str, int]) -> bytes:
    out = RECORD.pack(
        m["flags"],
        m["psn"],
        m["crc"],
        m["ptp_s"],
        m["ptp_ns"],
        m["bytes_written"],
        0,
        m["frame_number"],
        m["meta_ptp_s"],
        m["meta_ptp_ns"],
    )
    assert len(out) == 48
    return out.ljust(128, b"\0")


def test_metadata_record_is_128_bytes():
    assert METADATA_BYTES == 128
    assert FrameMetadata().pack() == bytes(128)


@pytest.mark.parametrize("field", list(LAYOUT))
def test_metadata_field_lands_at_its_hololink_offset(field):
    offset, width = LAYOUT[field]
    value = int.from_bytes(bytes(range(0xA1, 0xA1 + width)), "big")  # A1 A2 A3 ...
    packed = FrameMetadata(**{field: value}).pack()
    want = bytearray(128)
    want[offset : offset + width] = value.to_bytes(width, "big")
    assert packed == bytes(want)


def test_metadata_golden_record_as_hsb_sends_it():
    """A record written byte by byte as HSB's emulator serializes one (u32 halves, frame
    number as a u32 whose top half is the reserved u16), read back field by field."""
    golden = bytes.fromhex(
        "00000002"  # flags: window-size termination
        "0000abcd"  # psn
        "1234abcd"  # crc
        "00000000"
        "6543210f"  # PTP seconds, high and low halves
        "0001e240"  # ns 123456
        "00000000"
        "00100080"  # bytes_written 1048704
        "0000"
        "beef"  # reserved, frame number
        "00000000"
        "65432110"  # metadata PTP seconds
        "000f4240"  # ns 1000000
    ).ljust(128, b"\0")
    m = FrameMetadata.unpack(golden)
    assert m == FrameMetadata(
        flags=2,
        psn=0xABCD,
        crc=0x1234ABCD,
        ptp_s=0x6543210F,
        ptp_ns=123456,
        bytes_written=1048704,
        frame_number=0xBEEF,
        meta_ptp_s=0x65432110,
        meta_ptp_ns=1000000,
    )
    assert m.pack() == golden


def test_jamcrc_is_crc32_without_its_final_xor():
    # CRC-32/JAMCRC's check value (the CRC catalogue's "123456789").
    assert jamcrc(b"123456789") == 0x340BC6D9
    assert jamcrc(b"") == 0xFFFFFFFF


value_of = {name: st.integers(0, (1 << (8 * width)) - 1) for name, (_, width) in LAYOUT.items()}


@PROPS
@given(st.fixed_dictionaries(value_of))
def test_metadata_pack_matches_struct_layout(fields):
    packed = FrameMetadata(**fields).pack()
    assert packed == ref_pack(fields)
    assert FrameMetadata.unpack(packed) == FrameMetadata(**fields)


@PROPS
@given(st.binary(min_size=128, max_size=200))
def test_metadata_unpack_reads_first_128_bytes_by_struct_layout(data):
    got = FrameMetadata.unpack(data)
    for name, (offset, width) in LAYOUT.items():
        assert getattr(got, name) == int.from_bytes(data[offset : offset + width], "big"), name


def test_metadata_unpack_short_buffer_says_how_many_bytes():
    with pytest.raises(ValueError, match=r"need 128 bytes, 127 left"):
        FrameMetadata.unpack(bytes(127))


@pytest.mark.parametrize(
    ("field", "limit"), [("frame_number", 2**16), ("psn", 2**32), ("ptp_ns", 2**32)]
)
def test_metadata_field_too_wide_names_field(field, limit):
    with pytest.raises(ValueError, match=rf"^{field}={limit}: out of range 0\.\.{limit - 1}$"):
        FrameMetadata(**{field: limit}).pack()


def test_metadata_64_bit_fields_take_all_64_bits():
    for field in ("bytes_written", "ptp_s", "meta_ptp_s"):
        offset, _ = LAYOUT[field]
        for value in (2**63, 2**64 - 1):
            packed = FrameMetadata(**{field: value}).pack()
            assert packed[offset : offset + 8] == value.to_bytes(8, "big")
            assert getattr(FrameMetadata.unpack(packed), field) == value
