"""Holoscan Sensor Bridge conventions: the end-of-frame immediate and the
128-byte frame metadata record, encoded by the C++ core (``rt/protocol/hsb.h``).

The record is big-endian, laid out as HSB's FPGA sends it and hololink's
``Hololink::deserialize_metadata`` reads it: flags u32 @0, psn u32 @4, crc u32 @8,
PTP seconds u64 @12 + ns u32 @20, bytes_written u64 @24, frame_number u16 @34,
metadata PTP seconds u64 @36 + ns u32 @44, the rest reserved. Its CRC is JAMCRC
(:func:`jamcrc`: CRC-32 without the final XOR)."""

from __future__ import annotations

import zlib
from dataclasses import asdict, dataclass

from roce_transceiver import _core
from roce_transceiver._checks import check_buffer, check_int

__all__ = [
    "DEFAULT_PAGE_BITS",
    "METADATA_BYTES",
    "PAGE_ALIGN",
    "PAGE_BITS_12_FROM",
    "FrameMetadata",
    "imm_decode",
    "imm_encode",
    "jamcrc",
    "page_bits_for",
]

METADATA_BYTES = 128
_U32_MAX = 2**32 - 1
PAGE_ALIGN = 128  # HSB pads a frame to this before a record appended to its last packet
#: The HSB IP version from which a bridge names the page in the immediate's low 12 bits; the
#: ones before it in the low 8 (hsb.page_bits).
PAGE_BITS_12_FROM = 0x2603
DEFAULT_PAGE_BITS = 12


def page_bits_for(hsb_ip_version: int | None) -> int:
    """The immediate's page bits of a bridge of ``hsb_ip_version`` (None, not heard: 12)."""
    if hsb_ip_version is None or hsb_ip_version >= PAGE_BITS_12_FROM:
        return DEFAULT_PAGE_BITS
    return 8


def jamcrc(data: bytes | bytearray | memoryview) -> int:
    """The record's CRC of ``data``: CRC-32 without the final XOR, ``~zlib.crc32``."""
    return zlib.crc32(data) ^ 0xFFFFFFFF


def imm_encode(psn: int, page: int) -> int:
    """The end-of-frame immediate: ``psn[19:0] << 12 | page[11:0]``; both are u32 (the bits
    above are dropped), ValueError outside 0..2**32-1, TypeError for a non-int."""
    psn = check_int("imm_encode()", "psn", psn, 0, _U32_MAX)
    page = check_int("imm_encode()", "page", page, 0, _U32_MAX)
    return int(_core.hsb_imm_encode(psn, page))


def imm_decode(imm: int, page_bits: int = DEFAULT_PAGE_BITS) -> tuple[int, int]:
    """``(psn[19:0], page)`` from an end-of-frame immediate (a u32), the page in its low
    ``page_bits`` bits (8 or 12: hsb.page_bits)."""
    imm = check_int("imm_decode()", "imm", imm, 0, _U32_MAX)
    if page_bits not in (8, 12):
        raise ValueError(f"imm_decode(): page_bits {page_bits!r}: 8 or 12")
    psn, page = _core.hsb_imm_decode(imm, page_bits)
    return int(psn), int(page)


@dataclass(frozen=True)
class FrameMetadata:
    """The frame metadata record an HSB sensor appends to a frame."""

    flags: int = 0  # bit 0: early TLAST; bit 1: window-size termination
    psn: int = 0  # PSN of the end-of-frame packet
    crc: int = 0  # JAMCRC of the frame's data bytes (:func:`jamcrc`)
    ptp_s: int = 0  # PTP time of the first data byte: seconds (64 bits)
    ptp_ns: int = 0
    bytes_written: int = 0
    frame_number: int = 0  # 16 bits
    meta_ptp_s: int = 0  # PTP time the record was formed
    meta_ptp_ns: int = 0

    def pack(self) -> bytes:
        """The 128-byte wire form; ValueError names a field that does not fit, TypeError one
        that is not an int."""
        values = {k: check_int("FrameMetadata.pack()", k, v) for k, v in asdict(self).items()}
        return bytes(_core.hsb_metadata_pack(values))

    @classmethod
    def unpack(cls, data: bytes | bytearray | memoryview) -> FrameMetadata:
        """Read the first 128 bytes of ``data``; ValueError if fewer are given, TypeError if
        ``data`` is not bytes-like."""
        data = check_buffer("FrameMetadata.unpack()", "data", data)
        return cls(**_core.hsb_metadata_unpack(data))
