"""Host CRC-32 (``_core.crc32``) and the benchmark entry points of ``_core``.

Goal: the PCLMULQDQ folding path and its slicing-by-8 fallback give exactly zlib's CRC-32 for
every length (the 64-byte switch-over, the 16-byte blocks and the sub-16-byte tail), every start
alignment, any starting CRC and any split of the input; the ICRC built on top stays right on
frames long enough to take the fast path; the benchmark functions run and check their inputs.

Oracle: ``zlib.crc32`` (the standard library), plus the CRC-32 check value of b"123456789"
(0xCBF43926) and an ICRC computed in Python from the masking rules of IBA annex A17.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import platform
import random
import zlib
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from roce_transceiver import _core
from roce_transceiver.protocol import build, icrc


def _rand(n: int, seed: int) -> bytes:
    return random.Random(seed).randbytes(n)


def test_crc32_check_value():
    assert _core.crc32(b"123456789") == 0xCBF43926


def test_crc32_matches_zlib_every_length_0_to_300():
    data = _rand(300, seed=1)
    for n in range(301):
        assert _core.crc32(data[:n]) == zlib.crc32(data[:n]), f"length {n}"
        assert _core.crc32(data[:n], 0x12345678) == zlib.crc32(data[:n], 0x12345678), (
            f"length {n}, crc 0x12345678"
        )


def test_crc32_matches_zlib_at_every_alignment():
    rng = random.Random(2)
    buf = _rand(70000 + 16, seed=3)
    # Random lengths plus the edges of the 64-byte loop and the 16-byte tail.
    edges = [63, 64, 65, 79, 80, 127, 128, 129, 1023, 1024, 4096, 65536, 70000]
    for align in range(16):
        for n in edges + [rng.randrange(70001) for _ in range(20)]:
            view = memoryview(buf)[align : align + n]
            assert _core.crc32(view) == zlib.crc32(view), f"alignment {align}, length {n}"


def test_crc32_continuation_equals_whole():
    data = _rand(5000, seed=4)
    for split in [0, 1, 15, 16, 63, 64, 65, 100, 128, 1000, 4999, 5000]:
        a, b = data[:split], data[split:]
        assert _core.crc32(b, _core.crc32(a)) == zlib.crc32(data), f"split at {split}"


@given(data=st.binary(max_size=5000), crc=st.integers(min_value=0, max_value=2**32 - 1))
def test_crc32_matches_zlib_property(data: bytes, crc: int):
    assert _core.crc32(data, crc) == zlib.crc32(data, crc)


@given(a=st.binary(max_size=2000), b=st.binary(max_size=2000))
def test_crc32_continuation_property(a: bytes, b: bytes):
    assert _core.crc32(b, _core.crc32(a)) == zlib.crc32(a + b)


def _cpu_flags() -> set[str]:
    cpuinfo = Path("/proc/cpuinfo")
    if platform.machine() not in ("x86_64", "AMD64") or not cpuinfo.exists():
        pytest.skip(f"CPU flags unknown here ({platform.machine()}, no /proc/cpuinfo)")
    for line in cpuinfo.read_text().splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    pytest.skip("/proc/cpuinfo has no flags line")


def test_crc32_impl_is_pclmul_where_the_cpu_has_it():
    flags = _cpu_flags()
    missing = {"pclmulqdq", "sse4_1"} - flags
    if missing:
        pytest.skip(f"CPU lacks {', '.join(sorted(missing))}: the slicing-by-8 path is expected")
    assert _core.crc32_impl() == "pclmul"


def _icrc_oracle(frame: bytes) -> int:
    """ICRC from the annex A17 rules, independent of the core: 8 x 0xFF, IP/UDP/BTH masked."""
    ip = bytearray(frame[14:-4])
    if ip[0] >> 4 == 4:
        ihl = (ip[0] & 0x0F) * 4
        ip[1] = 0xFF  # TOS
        ip[8] = 0xFF  # TTL
        ip[10:12] = b"\xff\xff"  # header checksum
    else:
        ihl = 40
        ip[0] |= 0x0F  # traffic class, high nibble
        ip[1:4] = b"\xff\xff\xff"  # traffic class low nibble, flow label
        ip[7] = 0xFF  # hop limit
    ip[ihl + 6 : ihl + 8] = b"\xff\xff"  # UDP checksum
    ip[ihl + 8 + 4] = 0xFF  # BTH byte 4: FECN, BECN, reserved
    return zlib.crc32(b"\xff" * 8 + bytes(ip))


@pytest.mark.parametrize("ip", [("10.0.0.1", "10.0.0.2"), ("fd00::1", "fd00::2")])
@pytest.mark.parametrize("payload_len", [0, 12, 60, 64, 100, 1000, 4000])
def test_icrc_matches_python_oracle_on_long_frames(ip: tuple[str, str], payload_len: int):
    payload = _rand(payload_len, seed=payload_len)
    frame = build("RC_SEND_ONLY", payload, ip_src=ip[0], ip_dst=ip[1], dest_qp=7, psn=9)
    assert icrc(frame) == _icrc_oracle(frame)


def _ranges(frames: list[bytes]) -> tuple[bytes, list[int], list[int]]:
    offsets, at = [], 0
    for f in frames:
        offsets.append(at)
        at += len(f)
    return b"".join(frames), offsets, [len(f) for f in frames]


def _tiny_frames() -> list[bytes]:
    return [
        build("RC_SEND_ONLY", b"abcd", dest_qp=1, psn=1),
        build("UC_RDMA_WRITE_ONLY", bytes(100), dest_qp=2, psn=2, va=0x1000, rkey=5),
    ]


def test_bench_icrc_and_crc32_ours_return_positive_seconds():
    data, offsets, lengths = _ranges(_tiny_frames())
    assert _core.bench_icrc(data, offsets, lengths, 10) > 0
    assert _core.bench_crc32_ours(data, offsets, lengths, 10) > 0


def test_bench_crc32_fn_runs_libz_crc32():
    path = ctypes.util.find_library("z")
    if path is None:
        pytest.skip("libz not found by ctypes.util.find_library('z')")
    address = ctypes.cast(ctypes.CDLL(path).crc32, ctypes.c_void_p).value
    assert address
    data, offsets, lengths = _ranges(_tiny_frames())
    assert _core.bench_crc32_fn(address, data, offsets, lengths, 10) > 0


def test_bench_rejects_ranges_outside_the_data():
    data, offsets, lengths = _ranges(_tiny_frames())
    with pytest.raises(ValueError, match="runs past the data"):
        _core.bench_crc32_ours(data, [len(data) - 1], [2], 1)
    with pytest.raises(ValueError, match="must match"):
        _core.bench_icrc(data, offsets, lengths[:1], 1)
    with pytest.raises(ValueError, match="iterations=0"):
        _core.bench_crc32_ours(data, offsets, lengths, 0)
    with pytest.raises(ValueError, match="fn_address=0"):
        _core.bench_crc32_fn(0, data, offsets, lengths, 1)


def test_bench_icrc_rejects_a_frame_that_does_not_decode():
    frame = _tiny_frames()[0]
    with pytest.raises(ValueError, match="frame 0"):
        _core.bench_icrc(frame[:30], [0], [30], 1)
