"""CRC combination, the arithmetic behind the one-warp-per-packet ICRC.

Goal: crc32_combine (GF(2) multiplication by x^(8n) modulo the polynomial)
joins CRCs of consecutive pieces exactly, so 32 lanes can each take a slice.
Oracle: zlib.crc32 over the joined bytes.
"""

from __future__ import annotations

import random
import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from roce_transceiver import _core


@given(st.binary(max_size=600), st.binary(max_size=600))
def test_combine_of_two_pieces_equals_zlib_of_the_whole(a: bytes, b: bytes) -> None:
    assert _core.crc32_combine(zlib.crc32(a), zlib.crc32(b), len(b)) == zlib.crc32(a + b)


def test_combine_of_32_slices_equals_zlib_like_a_warp() -> None:
    rng = random.Random(7)
    for size in (0, 1, 31, 32, 33, 255, 4096, 9000):
        data = rng.randbytes(size)
        slice_len = ((size + 31) // 32 + 7) & ~7
        crc = zlib.crc32(b"")
        for lane in range(32):
            piece = data[lane * slice_len : (lane + 1) * slice_len]
            crc = _core.crc32_combine(crc, zlib.crc32(piece), len(piece))
        assert crc == zlib.crc32(data), size


def test_combine_with_long_second_piece_uses_high_powers() -> None:
    b = bytes(70000)
    assert _core.crc32_combine(0x12345678, zlib.crc32(b), len(b)) == zlib.crc32(b, 0x12345678)


@pytest.mark.parametrize("table", [False, True], ids=["shifts", "table"])
@pytest.mark.parametrize("n", [0, 1, 4, 12, 16, 64, 500, 512, 1024, 4096, 4100, 65536])
def test_zeros_move_a_raw_register_as_zlib_does(n: int, table: bool) -> None:
    """raw(A || n zero bytes) from raw(A), the register started from zero and not inverted:
    what folding a packet's CRC into its page's needs (engine/frames.h)."""
    a = bytes(range(37)) * 3

    def raw(data: bytes) -> int:
        # zlib's CRC started from a zero register, without the final inversion.
        crc = 0
        for byte in data:
            crc ^= byte
            for _ in range(8):
                crc = (crc >> 1) ^ 0xEDB88320 if crc & 1 else crc >> 1
        return crc

    assert _core.crc32_zeros(raw(a), n, table) == raw(a + bytes(n))


@pytest.mark.parametrize("n", [512, 2048, 4096, 8000])
@pytest.mark.parametrize("m", [0, 1, 2, 3, 14, 15, 16, 255, 511, 1000, 1023])
def test_run_shifts_move_a_register_over_m_packets_as_the_shifts_do(n: int, m: int) -> None:
    """The run tables' product for m packets of n bytes (stream_commit.h folds a run so)
    equals m * n zero bytes by the plain shifts."""
    for raw in (0x00000001, 0x80000000, 0xDEADBEEF, 0x12345678):
        assert _core.crc32_run_shift(raw, n, m) == _core.crc32_zeros(raw, n * m), hex(raw)


def test_run_shifts_refuse_a_run_longer_than_their_tables() -> None:
    with pytest.raises(ValueError, match="m=1024: at most 1023"):
        _core.crc32_run_shift(1, 4096, 1024)
