"""The protocol headers compiled by nvcc for the GPU give the host's bytes.

Goal: one source of truth for the data path (DESIGN.md section 2) means the
device build of decode, encode, ICRC (one thread and one warp per frame), the
HSB codecs and PSN arithmetic must agree exactly with the host build.
Oracle: the host build (itself checked against scapy and tshark elsewhere).
Runs on a GPU only (``-m gpu``); skipped with the reason elsewhere.
"""

from __future__ import annotations

import random

import pytest

from roce_transceiver import _core, hsb, protocol

pytestmark = pytest.mark.gpu


def _frames(seed: int) -> list[bytes]:
    """Every opcode, both IP versions, with and without VLAN, small to jumbo payloads."""
    rng = random.Random(seed)
    frames = []
    sizes = [0, 1, 2, 3, 4, 31, 32, 33, 255, 256, 1024, 4093, 4096, 8999]
    for name in sorted(protocol.OPCODES):
        row = protocol.opcode_row(name)
        for v6 in (False, True):
            size = 16 if name == "CNP" else (rng.choice(sizes) if row.payload else 0)
            frames.append(
                protocol.build(
                    name,
                    rng.randbytes(size) if name != "CNP" else bytes(16),
                    ip_src="fd00::1" if v6 else "10.1.2.3",
                    ip_dst="fd00::2" if v6 else "10.1.2.4",
                    vlan=rng.choice([None, 0x2005]),
                    dest_qp=rng.randrange(1 << 24),
                    psn=rng.randrange(1 << 24),
                    ack_req=rng.random() < 0.5,
                    va=rng.randrange(1 << 64),
                    rkey=rng.randrange(1 << 32),
                    imm=rng.randrange(1 << 32),
                    msn=rng.randrange(1 << 24),
                    ip_id=rng.randrange(1 << 16),
                    ip_ttl=rng.randrange(1, 256),
                )
            )
    return frames


def _pack(frames: list[bytes]) -> tuple[bytes, list[int], list[int]]:
    offsets, lengths, pos = [], [], 0
    for f in frames:
        offsets.append(pos)
        lengths.append(len(f))
        pos += len(f) + 5  # odd gaps: frames start unaligned, as in a real rx ring
    buf = bytearray(pos)
    for off, f in zip(offsets, frames, strict=True):
        buf[off : off + len(f)] = f
    return bytes(buf), offsets, lengths


def test_device_icrc_thread_and_warp_match_host_for_every_opcode() -> None:
    frames = _frames(1)
    buf, offsets, lengths = _pack(frames)
    per_thread, per_warp = _core.icrc_on_device(buf, offsets, lengths)
    expected = [protocol.icrc(f) for f in frames]
    assert per_thread == expected
    assert per_warp == expected


def test_device_icrc_reports_zero_for_frames_that_do_not_decode() -> None:
    good = protocol.build("RC_SEND_ONLY", b"abcd")
    buf, offsets, lengths = _pack([good, good[:40], b"\x00" * 20])
    per_thread, per_warp = _core.icrc_on_device(buf, offsets, lengths)
    assert per_thread == [protocol.icrc(good), 0, 0]
    assert per_warp == [protocol.icrc(good), 0, 0]


def test_device_decode_then_encode_reproduces_every_frame() -> None:
    frames = _frames(2)
    buf, offsets, lengths = _pack(frames)
    out, out_lengths = _core.reencode_on_device(buf, offsets, lengths)
    assert out_lengths == lengths
    for off, f in zip(offsets, frames, strict=True):
        assert out[off : off + len(f)] == f


def test_device_hsb_metadata_imm_and_psn_match_host() -> None:
    rng = random.Random(3)
    cases = [(0, 0), (0xFFFFFF, 0), (0, 0xFFFFFF), (0, 1 << 23), (5, 1 << 23)]
    cases += [(rng.randrange(1 << 24), rng.randrange(1 << 24)) for _ in range(200)]
    records = b"".join(
        hsb.FrameMetadata(
            flags=rng.randrange(1 << 32),
            psn=rng.randrange(1 << 32),
            crc=rng.randrange(1 << 32),
            ptp_s=rng.randrange(1 << 64),
            ptp_ns=rng.randrange(10**9),
            bytes_written=rng.randrange(1 << 64),
            frame_number=rng.randrange(1 << 16),
            meta_ptp_s=rng.randrange(1 << 64),
            meta_ptp_ns=rng.randrange(10**9),
        ).pack()
        for _ in cases
    )
    a = [c[0] for c in cases]
    b = [c[1] for c in cases]
    out, imm, diff = _core.hsb_psn_on_device(records, a, b)
    assert out == records
    assert imm == [hsb.imm_encode(bb, aa) for aa, bb in cases]
    assert diff == [protocol.psn_diff(bb, aa) for aa, bb in cases]


def test_device_team_copy_is_memcpy_at_every_alignment() -> None:
    """copy_bytes_team (queues/copy_wide.h): a warp copies a staged frame's payload, from any
    shared-memory offset to any destination offset, with five aligned loads and funnel shifts
    per 16 bytes; the oracle is a plain slice assignment."""
    rng = random.Random(7)
    src = bytes(rng.randrange(256) for _ in range(4160))
    cases = [(so, do, n) for so in range(0, 20) for do in range(0, 20, 3) for n in (0, 1, 15, 17)]
    cases += [(so, do, 4096) for so, do in [(0, 0), (6, 0), (70 % 64, 0), (3, 13), (63, 63)]]
    cases += [(rng.randrange(64), rng.randrange(64), rng.randrange(4097)) for _ in range(100)]
    out = _core.copy_team_on_device(src, cases)
    for i, (so, do, n) in enumerate(cases):
        want = bytearray(4160)
        want[do : do + n] = src[so : so + n]
        got = out[i * 4160 : (i + 1) * 4160]
        assert got == bytes(want), f"case {i}: from {so} to {do}, {n} bytes"
