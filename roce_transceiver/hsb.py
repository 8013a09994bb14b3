"""Holoscan Sensor Bridge conventions: the end-of-frame immediate and the
128-byte frame metadata record (big-endian), encoded by the C++ core."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from roce_transceiver import _core

__all__ = ["METADATA_BYTES", "FrameMetadata", "imm_decode", "imm_encode"]

METADATA_BYTES = 128


def imm_encode(psn: int, page: int) -> int:
    """The end-of-frame immediate: ``psn[19:0] << 12 | page[11:0]``."""
    return int(_core.hsb_imm_encode(psn, page))


def imm_decode(imm: int) -> tuple[int, int]:
    """``(psn[19:0], page)`` from an end-of-frame immediate."""
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
        """The 128-byte wire form; ValueError names a field that does not fit."""
        return bytes(_core.hsb_metadata_pack(asdict(self)))

    @classmethod
    def unpack(cls, data: bytes | bytearray | memoryview) -> FrameMetadata:
        """Read the first 128 bytes of ``data``; ValueError if fewer are given."""
        return cls(**_core.hsb_metadata_unpack(data))
