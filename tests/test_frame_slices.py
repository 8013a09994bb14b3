"""Frame slices (frames.slice_bytes): a frame handed over in parts as its packets cover them.

Goal: the host can start on a frame before its end, and knows which parts of it are whole.
- Every slice of every frame comes, in order, before its frame: slice k is the page's bytes
  [k * S, min((k + 1) * S, frame end)), equal to what the sensor sent there, whole; the last
  one flagged ``last``. Frames with and without metadata, packets that do not divide S, the
  record appended behind HSB's pad.
- Slices come as the stream covers them, not at the frame's end: with half a frame sent, the
  slices it passed are there (bytes as sent) and no other (the engine took every packet sent:
  rx_packets), the rest come with the end.
- A lost packet marks the slices whose bytes it carried (not whole) and is counted
  (``frame_slices_partial``), whether it is in the middle, the first of the frame, or the last
  data packet before a separate record; a pair reordered inside a slice marks nothing (a
  packet that comes after a later one passed the slice's end does: the slice was recorded
  with the gap); an ICRC-corrupt packet counts as lost.
- A frame dropped because the host holds its page has no slices.
- On RC, where every payload is placed after the commit, the slices are recorded after their
  placements (the batch ends at a due slice): all of them, bytes as sent.
- slice_bytes is refused, naming the key, unless 0/null or a multiple of 64 from 256 to
  page_bytes.

Oracles: the sensor's own content; the engine's counters (frame_slices, frame_slices_partial).
"""

from __future__ import annotations

import time

import pytest
from engine_helpers import EXECUTORS, WAIT_S, wait_counters
from frames_helpers import PAGE, frames_config, one_frame, send, sensor_for

from roce_transceiver.config import ConfigError
from roce_transceiver.frames import SLICE_NAMES, Frame, Slice
from roce_transceiver.hsb import imm_encode
from roce_transceiver.peers.link import Addresses
from roce_transceiver.peers.sensor import SentFrame
from roce_transceiver.transceiver import Transceiver


def take_slices(t: Transceiver, n: int) -> list[Slice]:
    """Exactly the ``n`` slices the engine recorded next, waiting (bounded) for them."""
    got: list[Slice] = []
    deadline = time.monotonic() + WAIT_S
    while len(got) < n and time.monotonic() < deadline:
        got += t.slices(timeout=0.05, max_slices=n - len(got))
    assert len(got) == n, f"{len(got)} slices of {n}; counters {t.stats()}"
    return got


def expected(size: int, s: int) -> list[tuple[int, int]]:
    """(offset, bytes) of each slice of a frame of ``size`` bytes."""
    return [(k, min(s, size - k)) for k in range(0, size, s)]


def check_frame_slices(
    slices: list[Slice],
    frame: Frame,
    sent: SentFrame,
    s: int,
    partial: frozenset[int] | set[int] = frozenset(),
) -> None:
    size = len(sent.content)
    assert [(x.offset, x.bytes) for x in slices] == expected(size, s)
    for k, x in enumerate(slices):
        assert x.slice == k and x.page == frame.page and x.last == (k == len(slices) - 1)
        assert x.whole == (k not in partial), (k, partial)
        if x.whole:
            assert x.data.tobytes() == sent.content[x.offset : x.offset + x.bytes], k


@pytest.mark.parametrize(
    ("metadata", "record"), [(True, "separate"), (True, "hsb"), (False, "separate")]
)
@pytest.mark.parametrize("executor", EXECUTORS)
def test_every_slice_comes_whole_and_as_sent_before_its_frame(
    executor: str, metadata: bool, record: str
) -> None:
    s = 1024
    with Transceiver(frames_config(executor, metadata, slice_bytes=s)) as t:
        sensor = sensor_for(t, payload=1000, record=record)  # packets that do not divide S
        total = 0
        for n, size in enumerate([1, 1000, 1024, 5000, 16384, PAGE - 128, 300]):
            sent = sensor.frame(n, bytes((n * 31 + i * 7) & 0xFF for i in range(size)))
            send(t, sent.packets)
            f = one_frame(t)
            assert f.ok and f.frame_number == n
            slices = take_slices(t, len(expected(size, s)))
            check_frame_slices(slices, f, sent, s)
            assert all(x.frame_number == n for x in slices)  # the frames recorded before it
            assert t.slices(timeout=0) == []  # none more: the frame came after its slices
            total += len(slices)
            if executor == "cuda":
                x = slices[-1]
                assert x.array().get().tobytes() == x.data.tobytes()
            f.release()
        wait_counters(t, frames=7, frame_slices=total, frame_slices_partial=0, frames_dropped=0)
        assert list(slices[0].as_dict())[: len(SLICE_NAMES)] == list(SLICE_NAMES)


@pytest.mark.parametrize("metadata", [True, False])
@pytest.mark.parametrize("executor", EXECUTORS)
def test_slices_come_as_the_stream_covers_them(executor: str, metadata: bool) -> None:
    s = 4096
    with Transceiver(frames_config(executor, metadata, slice_bytes=s)) as t:
        sensor = sensor_for(t, payload=1024)
        sent = sensor.frame(0, bytes((i * 13) & 0xFF for i in range(16384)))
        head, rest = sent.packets[:9], sent.packets[9:]  # 9216 bytes: past slices 0 and 1
        send(t, head)
        early = take_slices(t, 2)
        assert [(x.slice, x.offset, x.bytes, x.whole, x.last) for x in early] == [
            (0, 0, s, True, False),
            (1, s, s, True, False),
        ]
        for x in early:  # the page is the engine's, and the frame goes on: the bytes are there
            assert x.data.tobytes() == sent.content[x.offset : x.offset + x.bytes]
        # Every packet sent is taken, and slice 2 (to 12288) is not covered: none more.
        wait_counters(t, rx_packets=9, frame_slices=2, frames=0)
        assert t.slices(timeout=0) == []
        send(t, rest)
        f = one_frame(t)
        late = take_slices(t, 2)
        check_frame_slices(early + late, f, sent, s)
        wait_counters(t, frames=1, frame_slices=4, frame_slices_partial=0)


def faulty(sent: SentFrame, fault: str) -> None:
    p = sent.packets  # 8 data packets of 1024 bytes, then the record
    if fault == "loss":
        del p[3]
    elif fault == "first":
        del p[0]
    elif fault == "tail":
        del p[7]
    elif fault == "reorder":  # within slice 1: it is recorded once both came
        p[2], p[3] = p[3], p[2]
    elif fault == "reorder_across":  # packet 4 passes slice 1's end first: recorded, a gap in it
        p[3], p[4] = p[4], p[3]
    elif fault == "corrupt":
        p[5] = p[5][:-4] + bytes(b ^ 0xFF for b in p[5][-4:])


@pytest.mark.parametrize("executor", EXECUTORS)
def test_a_lost_packet_marks_the_slices_it_carried(executor: str) -> None:
    s = 2048  # two packets a slice; slice_bytes 256 splits a lost packet over four slices
    cases = {  # fault: (slice_bytes, the slices not whole)
        "loss": (s, {1}),
        "first": (s, {0}),
        "tail": (s, {3}),
        "reorder": (s, set()),
        "reorder_across": (s, {1}),
        "corrupt": (s, {2}),
        "loss_small": (256, {12, 13, 14, 15}),
    }
    for fault, (size, partial) in cases.items():
        with Transceiver(frames_config(executor, slice_bytes=size)) as t:
            sensor = sensor_for(t, payload=1024)
            sent = sensor.frame(0, bytes((i * 5 + 1) & 0xFF for i in range(8 * 1024)))
            faulty(sent, fault.removesuffix("_small"))
            send(t, sent.packets)
            f = one_frame(t)
            assert f.ok == (not partial or fault == "reorder_across"), fault
            slices = take_slices(t, len(expected(8 * 1024, size)))
            check_frame_slices(slices, f, sent, size, partial)
            n = len(slices)
            wait_counters(t, frame_slices=n, frame_slices_partial=len(partial))


@pytest.mark.parametrize("executor", EXECUTORS)
def test_a_frame_dropped_for_a_held_page_has_no_slices(executor: str) -> None:
    s = 1024
    with Transceiver(frames_config(executor, pages=2, slice_bytes=s)) as t:
        sensor = sensor_for(t, payload=1024)
        frames = list(sensor.frames(6, 4096))  # 4 slices each
        held = []
        for sent in frames[:2]:
            send(t, sent.packets)
            held.append(one_frame(t))
            check_frame_slices(take_slices(t, 4), held[-1], sent, s)
        for sent in frames[2:4]:  # pages 0 and 1 again: still the host's
            send(t, sent.packets)
        wait_counters(t, frames=2, frames_dropped=2, frame_slices=8)
        assert t.slices(timeout=0) == []
        for f in held:
            f.release()
        for sent in frames[4:]:
            send(t, sent.packets)
            f = one_frame(t)
            check_frame_slices(take_slices(t, 4), f, sent, s)
            f.release()
        wait_counters(t, frames=4, frames_dropped=2, frame_slices=16, frame_slices_partial=0)


@pytest.mark.parametrize("bad", [100, 192, 1000, PAGE + 64, -64])
def test_slice_bytes_errors_name_the_key(bad: int) -> None:
    with pytest.raises(ConfigError, match=r"frames\.slice_bytes"):
        Transceiver(frames_config("cpu", slice_bytes=bad))


@pytest.mark.parametrize("off", [0, None])
def test_no_slices_by_default_or_with_0(off: int | None) -> None:
    cfg = frames_config("cpu", slice_bytes=off)
    with Transceiver(cfg) as t:
        sensor = sensor_for(t, payload=1024)
        sent = sensor.frame(0, bytes(8192))
        send(t, sent.packets)
        one_frame(t).release()
        wait_counters(t, frames=1, frame_slices=0)
        assert t.slices(timeout=0) == []


def rc_frame(t: Transceiver, n: int, content: bytes, first_psn: int, payload: int = 1024) -> list:
    """Frame ``n`` as RC WRITE Onlys into page ``n % pages`` (no metadata; the last packet is
    the WRITE Only with Immediate), PSNs from ``first_psn``. On RC nothing is placed before
    the commit knows its PSN is the next: every slice waits for execute (the deferred path)."""
    fr = t.config["frames"]
    a = Addresses.mirror(t.config)
    page = n % fr["pages"]
    base = fr["va"] + page * fr["page_bytes"]
    chunks = [content[i : i + payload] for i in range(0, len(content), payload)]
    out = []
    for k, chunk in enumerate(chunks):
        psn = first_psn + k
        fields = {"va": base + k * payload, "rkey": fr["rkey"], "dma_len": len(chunk)}
        if k < len(chunks) - 1:
            out.append(a.frame("RDMA_WRITE_ONLY", chunk, psn=psn, **fields))
        else:
            imm = imm_encode(psn, page)
            out.append(a.frame("RDMA_WRITE_ONLY_WITH_IMMEDIATE", chunk, psn=psn, imm=imm, **fields))
    return out


@pytest.mark.parametrize("executor", EXECUTORS)
def test_rc_slices_wait_for_their_placements(executor: str) -> None:
    s, size = 2048, 16384
    cfg = frames_config(executor, metadata=False, slice_bytes=s)
    cfg["qp"]["transport"] = "RC"
    with Transceiver(cfg) as t:
        psn = 0
        for n in range(3):
            content = bytes((n * 17 + i * 3) & 0xFF for i in range(size))
            packets = rc_frame(t, n, content, psn)
            psn += len(packets)
            send(t, packets[:9])  # 9216 bytes: slices 0 to 3 are due
            early = take_slices(t, 4)
            for x in early:
                assert x.whole and x.data.tobytes() == content[x.offset : x.offset + x.bytes]
            send(t, packets[9:])
            f = one_frame(t)
            assert f.ok and f.data.tobytes() == content
            late = take_slices(t, 4)
            assert [(x.slice, x.offset, x.bytes, x.last) for x in early + late] == [
                (k, k * s, s, k == 7) for k in range(8)
            ]
            assert all(x.whole for x in late)
            f.release()
        wait_counters(t, frames=3, frame_slices=24, frame_slices_partial=0, psn_gaps=0)
