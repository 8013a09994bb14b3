"""Holoscan Sensor Bridge conventions: the end-of-frame immediate and the
128-byte frame metadata record (big-endian), encoded by the C++ core."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from roce_transceiver import _core
from roce_transceiver._checks import check_buffer, check_int

__all__ = ["METADATA_BYTES", "FrameMetadata", "imm_decode", "imm_encode"]

METADATA_BYTES = 128
_U32_MAX = 2**32 - 1


def imm_encode(psn: int, page: int) -> int:
    """The end-of-frame immediate: ``psn[19:0] << 12 | page[11:0]``; both are u32 (the bits
    above are dropped), ValueError outside 0..2**32-1, TypeError for a non-int."""
    psn = check_int("imm_encode()", "psn", psn, 0, _U32_MAX)
    page = check_int("imm_encode()", "page", page, 0, _U32_MAX)
    return int(_core.hsb_imm_encode(psn, page))


def imm_decode(imm: int) -> tuple[int, int]:
    """``(psn[19:0], page)`` from an end-of-frame immediate (a u32)."""
    imm = check_int("imm_decode()", "imm", imm, 0, _U32_MAX)
    psn, page = _core.hsb_imm_decode(imm)
    return int(psn), int(page)


@dataclass(frozen=True)
class FrameMetadata:
    """The frame metadata record an HSB sensor appends to a frame."""

    flags: int = 0
    psn: int = 0
    crc32: int = 0  # zlib CRC-32 of the frame's data bytes
    ptp_s: int = 0  # PTP time of the first data byte (48-bit seconds)
    ptp_ns: int = 0
    bytes_written: int = 0
    frame_number: int = 0
    meta_ptp_s: int = 0  # PTP time the record was written
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
