"""The frames handler's account of a damaged stream: every frame delivered or counted.

Goal: what a sensor sent is accounted for exactly, frame by frame, on both executors:
- a frame whose first packets were lost has them in ``packets_lost`` (the PSNs after the
  previous frame's end are its own), and is not ``ok``, with or without metadata; also when
  the first to arrive is its short last packet or its record packet, where the offset it
  landed at would give another count;
- a frame whose end never came is closed as incomplete by the first packet for another page
  (``frames_incomplete``), not merged into the next one; frames of which nothing came are
  ``frames_missing`` (metadata frame numbers; without metadata, the page sequence);
- several faults in one frame (two lost packets, a burst, first and middle lost, an immediate
  naming another page, a record whose byte count disagrees) give ``packets_lost``,
  ``page_match``, ``bytes_ok``, ``crc_ok`` and ``ok`` as computed here from what was sent;
- what HSB's emulator sends is read right: the record appended to the last data packet (behind
  the 128-byte alignment pad), BTH byte 4 all ones, PSNs that wrap at 2^20, a record CRC left 0
  (``frames.check_crc: false``);
- a random mix of faults over many frames: frames + frames_dropped == frames sent.

Oracles: the sensor's own packets and content (the peer records each fault), zlib, and
arithmetic on what the test removed; the engine's counters.
"""

from __future__ import annotations

import random
import zlib

import pytest
from engine_helpers import EXECUTORS, wait_counters
from frames_helpers import frames_config, one_frame, send, sensor_for

from roce_transceiver.hsb import METADATA_BYTES, PAGE_ALIGN, FrameMetadata, jamcrc
from roce_transceiver.peers.sensor import Faults
from roce_transceiver.protocol import icrc, parse
from roce_transceiver.transceiver import Transceiver

METADATA = [pytest.param(True, id="metadata"), pytest.param(False, id="no_metadata")]


def content(n: int, size: int) -> bytes:
    return bytes((n * 13 + i * 5) & 0xFF for i in range(size))


def settle(t: Transceiver, injected: int) -> dict[str, int]:
    """Counters once the engine has taken every injected packet."""
    return wait_counters(t, rx_packets=injected)


# ------------------------------------------------------------- a frame's first packet lost


@pytest.mark.parametrize("metadata", METADATA)
@pytest.mark.parametrize("executor", EXECUTORS)
def test_lost_first_packet_belongs_to_its_frame(executor: str, metadata: bool) -> None:
    with Transceiver(frames_config(executor, metadata)) as t:
        sensor = sensor_for(t, payload=1024)
        whole = sensor.frame(0, content(0, 8 * 1024))
        send(t, whole.packets)
        f0 = one_frame(t)
        assert f0.ok and f0.packets_lost == 0
        f0.release()
        damaged = sensor.frame(1, content(1, 8 * 1024))
        first_psn = parse(damaged.packets[0]).psn
        send(t, damaged.packets[1:])
        f1 = one_frame(t)
        assert f1.packets_lost == 1
        assert f1.psn_first == first_psn  # the lost packet's PSN: right after frame 0's end
        assert not f1.ok
        if metadata:
            assert not f1.crc_ok and f1.bytes_ok  # its bytes reach the end; page 0 is stale
        wait_counters(t, frames=2, frames_dropped=0)


@pytest.mark.parametrize("executor", EXECUTORS)
def test_lost_first_packet_of_the_first_frame_is_estimated_from_where_the_rest_landed(
    executor: str,
) -> None:
    with Transceiver(frames_config(executor, metadata=False)) as t:
        sensor = sensor_for(t, payload=1024)
        sent = sensor.frame(0, content(0, 6 * 1024))
        send(t, sent.packets[2:])  # nothing came before: the first two are gone
        f = one_frame(t)
        assert (f.packets, f.packets_lost, f.ok) == (4, 2, False)


# The first packets lost and the first to arrive not a whole data packet: the frame's short
# last packet (100 bytes at offset 2 048: where it landed would say 21 packets came before it
# in packets of its size) or, with metadata, its record packet (no data: where it landed says
# nothing). The PSNs after the previous frame's end say how many were lost.
LOST_LEADS = {
    # name: (metadata, data packets lost, kept: indexes of the packets that arrive)
    "short_last_packet": (True, 2, [2, 3]),
    "record_packet": (True, 3, [3]),
    "short_last_packet_is_the_end": (False, 2, [2]),
}


@pytest.mark.parametrize("case", list(LOST_LEADS))
@pytest.mark.parametrize("executor", EXECUTORS)
def test_lost_first_packets_are_counted_from_the_psn_not_where_the_first_to_arrive_landed(
    executor: str, case: str
) -> None:
    metadata, lost, kept = LOST_LEADS[case]
    with Transceiver(frames_config(executor, metadata)) as t:
        sensor = sensor_for(t, payload=1024)
        whole = sensor.frame(0, content(0, 3 * 1024))
        send(t, whole.packets)
        f0 = one_frame(t)
        assert f0.ok and f0.packets_lost == 0
        f0.release()
        damaged = sensor.frame(1, content(1, 2 * 1024 + 100))  # 1 024, 1 024, 100 (, record)
        assert len(damaged.packets) == 3 + metadata
        send(t, [damaged.packets[i] for i in kept])
        f1 = one_frame(t)
        assert (f1.packets, f1.packets_lost, f1.ok) == (len(kept), lost, False)
        assert f1.psn_first == parse(damaged.packets[0]).psn  # right after frame 0's end
        assert f1.psn_last == parse(damaged.packets[-1]).psn
        # Frames: both recorded, none missing or dropped.
        wait_counters(t, frames=2, frames_dropped=0, frames_missing=0, frames_incomplete=0)


# ------------------------------------------------------------- ends lost, frames missing


@pytest.mark.parametrize("metadata", METADATA)
@pytest.mark.parametrize("executor", EXECUTORS)
def test_lost_end_closes_the_frame_as_incomplete_not_merged(executor: str, metadata: bool) -> None:
    with Transceiver(frames_config(executor, metadata)) as t:
        sensor = sensor_for(t, payload=1024)
        first = sensor.frame(1, content(1, 4096))  # page 1
        second = sensor.frame(2, content(2, 4096))  # page 2
        send(t, first.packets[:-1])  # its end (0x2B) lost
        send(t, second.packets)
        f = one_frame(t)
        assert (f.frame_number if metadata else f.page, f.page) == (2, 2)
        assert f.psn_first == parse(second.packets[0]).psn
        assert f.ok and f.data.tobytes() == second.content
        wait_counters(t, frames=1, frames_dropped=1, frames_incomplete=1, frames_missing=0)


@pytest.mark.parametrize("metadata", METADATA)
@pytest.mark.parametrize("executor", EXECUTORS)
def test_frames_of_which_nothing_came_are_counted_missing(executor: str, metadata: bool) -> None:
    with Transceiver(frames_config(executor, metadata, pages=8)) as t:
        sensor = sensor_for(t, payload=1024)
        frames = [sensor.frame(n, content(n, 3000)) for n in range(6)]
        injected = 0
        for n in (0, 3, 4):  # 1 and 2 vanish whole
            send(t, frames[n].packets)
            injected += len(frames[n].packets)
        send(t, frames[5].packets[:-1])  # 5: its end lost too ...
        injected += len(frames[5].packets) - 1
        later = sensor.frame(7, content(7, 3000))  # ... and 6 vanishes whole
        send(t, later.packets)
        injected += len(later.packets)
        settle(t, injected)
        got = t.frames(timeout=1.0)
        assert [f.page for f in got] == [0, 3, 4, 7] and all(f.ok for f in got)
        # 8 frames sent: 4 recorded, 1 incomplete (5), 3 missing (1, 2, 6).
        wait_counters(t, frames=4, frames_dropped=4, frames_incomplete=1, frames_missing=3)


@pytest.mark.parametrize("executor", EXECUTORS)
def test_frame_numbers_going_back_are_a_restart_not_missing_frames(executor: str) -> None:
    # A sensor that restarts (or a replayed capture) numbers from 0 again: a 16-bit step back
    # of up to half the space is a new run, not 65 000 vanished frames.
    with Transceiver(frames_config(executor, metadata=True, pages=8)) as t:
        sensor = sensor_for(t, payload=1024)
        injected = 0
        for _run in range(2):
            for n in range(4):
                packets = sensor.frame(n, content(n, 3000)).packets
                send(t, packets)
                injected += len(packets)
            settle(t, injected)
            got = t.frames(timeout=1.0)
            assert [f.frame_number for f in got] == [0, 1, 2, 3] and all(f.ok for f in got)
            for f in got:
                f.release()
        wait_counters(t, frames=8, frames_dropped=0, frames_missing=0)


# ------------------------------------------------------------- several faults in one frame


def _drop(packets: list[bytes], *indexes: int) -> list[bytes]:
    return [p for i, p in enumerate(packets) if i not in indexes]


def _patched(packet: bytes, at: int, new: bytes) -> bytes:
    """``packet`` with ``new`` at payload offset ``at`` (negative: before the payload, as for
    the immediate) and its ICRC made right again."""
    p = parse(packet)
    start = p.length - 4 - len(p.pad) - len(p.payload)  # the payload's offset in the frame
    out = bytearray(packet)
    out[start + at : start + at + len(new)] = new
    out[-4:] = icrc(bytes(out)).to_bytes(4, "little")
    return bytes(out)


def _end_naming_page(packet: bytes, page: int) -> bytes:
    """The end-of-frame packet with its immediate naming ``page``."""
    imm = parse(packet).imm
    assert imm is not None
    return _patched(packet, -4, ((imm & ~0xFFF) | page).to_bytes(4, "big"))


def _record_saying(packet: bytes, bytes_written: int) -> bytes:
    """The separate record packet with its byte count (u64 @24) changed."""
    return _patched(packet, 24, bytes_written.to_bytes(8, "big"))


# name: (packet edit, packets lost, page_match, bytes_ok, crc_ok); frames of 10 data packets.
CASES = {
    "two_lost": (lambda ps: _drop(ps, 2, 6), 2, True, True, False),
    "burst_of_four": (lambda ps: _drop(ps, 3, 4, 5, 6), 4, True, True, False),
    "first_and_middle": (lambda ps: _drop(ps, 0, 5), 2, True, True, False),
    "last_data_packets": (lambda ps: _drop(ps, 8, 9), 2, True, False, False),
    "imm_names_another_page": (
        lambda ps: [*ps[:-1], _end_naming_page(ps[-1], 3)],
        0,
        False,
        True,
        True,
    ),
    "record_byte_count_disagrees": (
        lambda ps: [*ps[:-1], _record_saying(ps[-1], 10 * 1024 - 200)],  # beyond the 128 pad
        0,
        True,
        False,
        False,
    ),
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("executor", EXECUTORS)
def test_several_faults_in_one_frame_give_its_exact_account(executor: str, case: str) -> None:
    edit, lost, page_match, bytes_ok, crc_ok = CASES[case]
    with Transceiver(frames_config(executor)) as t:
        sensor = sensor_for(t, payload=1024)
        before = sensor.frame(0, content(0, 1024))  # gives the stream its position
        send(t, before.packets)
        one_frame(t).release()
        sent = sensor.frame(1, content(1, 10 * 1024))
        packets = edit(sent.packets)
        send(t, packets)
        f = one_frame(t)
        assert (f.packets_lost, f.page_match, f.bytes_ok, f.crc_ok) == (
            lost,
            page_match,
            bytes_ok,
            crc_ok,
        ), case
        assert f.packets == len(packets)
        assert f.ok == (lost == 0 and page_match and bytes_ok and crc_ok)
        assert f.ok is False  # every case here is a damaged frame
        wait_counters(t, frames=2, frame_crc_errors=0 if crc_ok else 1)


@pytest.mark.parametrize("case", ["two_lost", "first_and_middle", "imm_names_another_page"])
@pytest.mark.parametrize("executor", EXECUTORS)
def test_several_faults_without_metadata(executor: str, case: str) -> None:
    edit, lost, page_match, _, _ = CASES[case]
    with Transceiver(frames_config(executor, metadata=False)) as t:
        sensor = sensor_for(t, payload=1024)
        send(t, sensor.frame(0, content(0, 1024)).packets)
        one_frame(t).release()
        sent = sensor.frame(1, content(1, 10 * 1024))
        send(t, edit(sent.packets))
        f = one_frame(t)
        assert (f.packets_lost, f.page_match) == (lost, page_match)
        assert f.ok is False
        assert f.crc_checked is False and f.has_metadata is False


# ------------------------------------------------------------- what HSB's emulator sends


@pytest.mark.parametrize("size", [1, 100, 128, 1000, 1024, 1025, 5000, 4 * 1024])
@pytest.mark.parametrize("executor", EXECUTORS)
def test_record_appended_to_the_last_data_packet(executor: str, size: int) -> None:
    with Transceiver(frames_config(executor)) as t:
        sensor = sensor_for(t, payload=1024, record="appended")
        sent = sensor.frame(0, content(0, size))
        data_packets = -(-size // 1024)
        assert len(sent.packets) == data_packets  # no packet of its own for the record
        end = parse(sent.packets[-1])
        pad = -size % PAGE_ALIGN
        assert (
            end.payload[-METADATA_BYTES:]
            == FrameMetadata(psn=end.psn, crc=jamcrc(sent.content), bytes_written=size).pack()
        )
        assert end.payload[-METADATA_BYTES - pad : -METADATA_BYTES] == bytes(pad)
        send(t, sent.packets)
        f = one_frame(t)
        assert f.bytes == size and f.data.tobytes() == sent.content
        assert f.crc32 == zlib.crc32(sent.content) and f.metadata_crc == jamcrc(sent.content)
        assert f.crc_ok and f.bytes_ok and f.ok and f.packets == data_packets


@pytest.mark.parametrize("executor", EXECUTORS)
def test_emulator_bth_byte4_all_ones_and_20_bit_psn_wrap(executor: str) -> None:
    with Transceiver(frames_config(executor, rx_psn=0xFFFFC)) as t:
        sensor = sensor_for(t, payload=1024, psn_bits=20, first_psn=0xFFFFC, record="appended")
        frames = [sensor.frame(n, content(n, 3 * 1024 + 200)) for n in range(3)]
        psns = [parse(p).psn for s in frames for p in s.packets]
        assert 0xFFFFF in psns and 0 in psns and max(psns) <= 0xFFFFF  # wraps at 2^20
        for s in frames:
            # BTH byte 4 (FECN, BECN, reserved) as the emulator sets it; the ICRC masks it.
            send(t, [p[:46] + b"\xff" + p[47:] for p in s.packets])
        got = []
        while len(got) < len(frames) and (more := t.frames(timeout=5.0)):
            got += more
        for f, s in zip(got, frames, strict=True):
            assert f.ok and f.packets_lost == 0 and f.data.tobytes() == s.content
        wait_counters(t, frames=3, psn_gaps=0, frames_dropped=0, icrc_errors=0, malformed=0)


@pytest.mark.parametrize("check_crc", [True, False])
@pytest.mark.parametrize("executor", EXECUTORS)
def test_record_crc_left_zero_passes_only_without_check_crc(executor: str, check_crc: bool) -> None:
    with Transceiver(frames_config(executor, check_crc=check_crc)) as t:
        sensor = sensor_for(t, payload=1024)
        sent = sensor.frame(0, content(0, 2048))
        # HSB's emulator leaves the record's CRC 0.
        send(t, [*sent.packets[:-1], _record_crc_zero(sent.packets[-1])])
        f = one_frame(t)
        assert f.metadata_crc == 0 and not f.crc_ok and f.bytes_ok
        assert f.crc_checked == check_crc and f.ok == (not check_crc)
        wait_counters(t, frames=1, frame_crc_errors=1 if check_crc else 0)


def _record_crc_zero(packet: bytes) -> bytes:
    return _patched(packet, 8, bytes(4))


# ------------------------------------------------------------- every frame accounted for


@pytest.mark.parametrize("seed", [5, 13])
@pytest.mark.parametrize("metadata", METADATA)
@pytest.mark.parametrize("executor", EXECUTORS)
def test_random_faults_every_frame_delivered_or_counted(
    executor: str, metadata: bool, seed: int
) -> None:
    """150 frames with packets lost, reordered, duplicated and corrupt, ends lost, whole
    frames vanished (fewer in a row than there are pages) and a host that releases its pages
    late. The stream's first frame and a last one come whole: a receiver cannot know of
    frames before the first it sees, nor close the last without a next one."""
    rng = random.Random(seed)
    faults = Faults(loss=0.1, reorder=0.1, duplicate=0.05, corrupt=0.05, end_loss=0.2)
    with Transceiver(frames_config(executor, metadata, pages=8)) as t:
        sensor = sensor_for(t, payload=1024, seed=seed)
        sent, injected, vanished = 0, 0, 0
        for n in range(151):
            sensor.faults = faults if 0 < n < 150 else Faults()
            frame = sensor.frame(n, content(n, rng.choice([1000, 2048, 4096, 7000])))
            sent += 1
            if 0 < n < 150 and rng.random() < 0.15 and vanished < 6:
                vanished += 1
                continue
            vanished = 0
            send(t, frame.packets)
            injected += len(frame.packets)
            for f in t.frames(timeout=0.0):
                f.release()
        settle(t, injected)
        for f in t.frames(timeout=0.2):
            f.release()
        stats = t.stats()
        assert stats["frames"] + stats["frames_dropped"] == sent, stats
        assert stats["frames_incomplete"] > 0 and stats["frames_missing"] > 0, stats
