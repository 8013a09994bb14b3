"""The batch step (engine/batch.h): frames taken a batch at a time, exactly as one at a time.

Goal: a crew classifies a batch in parallel, commits it in ring order and places it in
parallel; that is an optimisation only. With the rx ring full before the loop starts (so
every pass finds a whole batch), a run with ``queues.batch`` 32 or 8 records the same frames,
transmits the same bytes, delivers the same messages and counts the same counters as the
same run with ``queues.batch: 1`` (one frame a pass: the general path, tested elsewhere
against scapy and zlib). On the cuda executor also with ``cuda.warps`` 1, 4 and 8, where the
batch's frames are classified and placed by different warps at once.
- a sensor stream, with and without metadata, whose packets are lost, reordered,
  duplicated and corrupted inside batches, frame ends in the middle of batches, ends lost
  and whole frames vanished;
- a queue whose pages are all held by the host (every later packet refused, counted);
- page CRCs folded from the packets (2 and 4 KiB, random bytes) while packets come
  swapped, late, reversed, twice, not at all, or in PSN order to places out of order: the
  CRC is the page's, in page order, and a whole frame's is zlib's of what was sent;
- batches that end early: an echo script with express off (SEND Onlys, a two-packet SEND,
  immediates, an ICRC error, a PSN gap, a wrong QP) on UC and RC, and RC WRITEs with ACK
  requests, duplicates and a gap, where an ACK waits for its data;
- WRITEs and then, on the same bytes, FETCH_ADDs, COMPARE_SWAPs (RC) and WRITEs with
  Immediate: each must see the WRITEs before it, though a batch places them only later.

Oracles: the one-frame-at-a-time run of the same frames; for the stream, zlib over what the
sensor sent (every frame that came whole is recorded with its CRC); for the WRITEs and
atomics on the same bytes, a Python model of RDMA's order (rdma_model): the region's bytes,
each atomic's value before, each immediate's message.
"""

from __future__ import annotations

import random
import time
import zlib
from typing import Any

import pytest
from engine_helpers import EXECUTORS, TRANSPORTS, WAIT_S, Peer, make, wait_counters
from frames_helpers import frames_config, sensor_for

from roce_transceiver.peers.sensor import Faults
from roce_transceiver.protocol import icrc, parse, psn_add
from roce_transceiver.transceiver import Transceiver

RING = 4096
VA, RKEY = 0x7F00_1234_0000, 0x1357
REGIONS = [{"va": VA, "rkey": RKEY, "length": 16384}]
TIMESTAMPS = ("rx_first_ns", "rx_last_ns", "done_ns")
#: Counters of how a run took its frames, not of what it found: the express path, and page
#: CRCs folded from the packets' own pass (a batch's) rather than read from the page.
BY_SHAPE = ("express", "frames_crc_folded")


def content(n: int, size: int) -> bytes:
    return bytes((n * 29 + i * 7) & 0xFF for i in range(size))


def shapes(executor: str) -> list[dict[str, Any]]:
    """The batch settings each run is compared across: the first is the oracle."""
    out: list[dict[str, Any]] = [{"queues": {"batch": 1}}, {"queues": {"batch": 32}}]
    if executor == "cuda":
        out += [{"queues": {"batch": 32}, "cuda": {"warps": w}} for w in (1, 4)]
        out.append({"queues": {"batch": 8}, "cuda": {"warps": 8}})
    else:
        out.append({"queues": {"batch": 8}})
    return out


def merged(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in extra.items():
        out[k] = {**out.get(k, {}), **v} if isinstance(v, dict) else v
    return out


def drain_frames(t: Transceiver, injected: int) -> list[dict[str, Any]]:
    """Every frame record, in order, once the engine has taken all ``injected`` frames."""
    wait_counters(t, rx_packets=injected)
    got: list[dict[str, Any]] = []
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        batch = t.frames(timeout=0.2)
        if not batch:
            break
        for f in batch:
            d = f.as_dict()
            for k in TIMESTAMPS:
                d.pop(k, None)
            d["payload_crc"] = zlib.crc32(f.data.tobytes())
            got.append(d)
            f.release()
    return got


def stream_run(
    executor: str, extra: dict[str, Any], metadata: bool, seed: int, pages: int
) -> dict[str, Any]:
    rng = random.Random(seed)
    config = merged(frames_config(executor, metadata, pages=pages), {"queues": {"rx_depth": RING}})
    t = Transceiver(merged(config, extra))
    sensor = sensor_for(t, payload=1024, seed=seed)
    faults = Faults(loss=0.05, reorder=0.08, duplicate=0.05, corrupt=0.05, end_loss=0.1)
    injected, sent = 0, []
    for n in range(40):
        sensor.faults = faults if 0 < n < 39 else Faults()
        frame = sensor.frame(n, content(n, rng.choice([700, 2048, 3000, 5000, 8192])))
        if 0 < n < 39 and rng.random() < 0.1:
            continue  # vanished whole
        sent.append(frame)
        for p in frame.packets:
            assert t.inject(p), "the script is longer than the rx ring"
            injected += 1
    with t:
        records = drain_frames(t, injected)
    return {"records": records, "stats": t.stats(), "sent": sent}


def assert_same(runs: list[dict[str, Any]], keys: tuple[str, ...]) -> None:
    oracle = runs[0]
    for i, run in enumerate(runs[1:], 1):
        for k in keys:
            if k == "stats":
                differ = {
                    c: (run["stats"][c], oracle["stats"][c])
                    for c in oracle["stats"]
                    if c not in BY_SHAPE and run["stats"][c] != oracle["stats"][c]
                }
                assert not differ, f"shape {i}: counters (batched, one at a time): {differ}"
            else:
                assert run[k] == oracle[k], f"shape {i}: {k} differ"


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("metadata", [True, False], ids=["metadata", "no_metadata"])
@pytest.mark.parametrize("executor", EXECUTORS)
def test_a_damaged_stream_in_batches_is_recorded_as_one_frame_at_a_time(
    executor: str, metadata: bool, seed: int
) -> None:
    runs = [stream_run(executor, s, metadata, seed, pages=64) for s in shapes(executor)]
    assert_same(runs, ("records", "stats"))
    stats = runs[0]["stats"]
    assert stats["frames"] > 10 and stats["psn_gaps"] + stats["icrc_errors"] > 0, stats
    whole = {s.frame_number: s.crc32 for s in runs[0]["sent"] if not s.events}
    for r in runs[-1]["records"]:
        if r["frame_number"] in whole and metadata and r["packets_lost"] == 0:
            assert r["crc32"] == whole[r["frame_number"]]


@pytest.mark.parametrize("executor", EXECUTORS)
def test_a_queue_whose_pages_are_all_held_refuses_the_same_packets_in_batches(
    executor: str,
) -> None:
    runs = [stream_run(executor, s, True, 7, pages=2) for s in shapes(executor)]
    assert_same(runs, ("records", "stats"))
    stats = runs[0]["stats"]
    assert len(runs[0]["records"]) == 2 and stats["frame_page_busy"] > 0, stats


def sized_run(
    executor: str,
    shape: dict[str, Any],
    sizes: tuple[int, ...] | list[int],
    pages: int,
    record: str = "separate",
) -> dict[str, Any]:
    """Frames of ``sizes`` in 2 KiB WRITEs (metadata on), all in the ring before the loop
    starts, taken by a transceiver of ``shape``: what was sent, the records, the counters and
    the loop's batches (epoch_stats)."""
    queues = {"rx_depth": RING, "slot_bytes": 2304}  # 2 KiB, a record, the headers
    config = merged(frames_config(executor, True, pages=pages), {"queues": queues})
    t = Transceiver(merged(config, shape))
    sensor = sensor_for(t, payload=2048, record=record)
    sent = [sensor.frame(n, content(n, size)) for n, size in enumerate(sizes)]
    packets = [p for f in sent for p in f.packets]
    for p in packets:
        assert t.inject(p)
    with t:
        records = drain_frames(t, len(packets))
        stats = t.stats()
    return {
        "sent": sent,
        "packets": len(packets),
        "records": records,
        "stats": stats,
        "epochs": t.epoch_stats(),
    }


def streamed(shape: dict[str, Any]) -> bool:
    """Whether a shape takes the frames stream by the stream step (stream_batch.h): every
    shape does, on both executors, at every batch depth and warp count."""
    return shape["queues"]["batch"] >= 1


@pytest.mark.parametrize("record", ["separate", "appended"])
@pytest.mark.parametrize("executor", EXECUTORS)
def test_a_page_crc_comes_from_its_packets_when_they_came_in_order(
    executor: str, record: str
) -> None:
    """At every batch depth, a frame whose data came in order, every packet without pad, its
    first carrying 512 bytes or more (frames.h kFoldMinBytes), has its page CRC folded from
    the packets' own CRC pass (frames_crc_folded) instead of the page read again, whatever its
    later packets' sizes (2 148 = 2 048 + 100); a packet with pad (a frame of 1 023 bytes), a
    small first packet (64 bytes), or a record appended after HSB's 128-byte pad past the data
    (700, 3 000, 5 000, 2 148 with the record appended: the pad is in the packet's data) leave
    the page to be read. Every way, each frame's CRC is zlib's of what was sent."""
    sizes = [4096, 3000, 8192, 700, 1023, 5000, 2048, 64, 2148]

    def folds(n: int) -> bool:  # every packet pad-free, the first 512 B, no HSB pad in data
        padded = record == "appended" and n % 2048 % 128 != 0
        return n % 4 == 0 and min(n, 2048) >= 512 and not padded

    foldable = sum(map(folds, sizes))
    for shape in shapes(executor):
        run = sized_run(executor, shape, sizes, pages=16, record=record)
        sent, records, stats = run["sent"], run["records"], run["stats"]
        assert [r["crc32"] for r in records] == [zlib.crc32(f.content) for f in sent], shape
        assert all(r["crc_ok"] for r in records), shape
        want = foldable if streamed(shape) else 0
        assert stats["frames_crc_folded"] == want, (shape, stats["frames_crc_folded"], want)


# A frame's data packets as the wire delivers them: what each fault does to their order
# (indexes into the frame's data packets before its end), and how many are lost.
FOLD_FAULTS: dict[str, tuple[list[int], int]] = {
    "in_order": ([0, 1, 2, 3, 4, 5], 0),
    "swap_middle": ([0, 2, 1, 3, 4, 5], 0),
    "swap_first": ([1, 0, 2, 3, 4, 5], 0),  # the first to arrive lands at one packet in
    "late_by_three": ([0, 2, 3, 4, 1, 5], 0),
    "reversed": ([5, 4, 3, 2, 1, 0], 0),
    "duplicate_next": ([0, 1, 2, 2, 3, 4, 5], 0),
    "duplicate_late": ([0, 1, 2, 3, 1, 4, 5], 0),
    "duplicate_first": ([0, 0, 1, 2, 3, 4, 5], 0),
    "lost_middle": ([0, 1, 3, 4, 5], 1),
    "lost_first": ([1, 2, 3, 4, 5], 1),
    "swapped_and_lost": ([0, 2, 1, 3, 5], 1),
    # In PSN order, but the sensor wrote its second and third packets' places the other way
    # round: a stream run whose offsets do not follow on.
    "written_out_of_order": ([0, 2, 1, 3, 4, 5], 0),
}


def with_psn(packet: bytes, psn: int) -> bytes:
    """``packet`` (IPv4) with BTH PSN ``psn`` and its ICRC made right again."""
    assert packet[12:14] == b"\x08\x00", "an IPv4 frame"
    bth = 14 + (packet[14] & 0xF) * 4 + 8
    out = bytearray(packet)
    out[bth + 9 : bth + 12] = psn.to_bytes(3, "big")
    out[-4:] = icrc(bytes(out)).to_bytes(4, "little")
    return bytes(out)


def fold_stream(
    executor: str, shape: dict[str, Any], metadata: bool, payload: int
) -> dict[str, Any]:
    """Frames of random bytes in packets of ``payload`` bytes (2 KiB or more: the fold's
    size), each fault of FOLD_FAULTS in one frame, an undamaged frame before each and at the
    end; the rx ring filled before the loop starts, so batches hold whole stretches."""
    rng = random.Random(payload * 2 + metadata)
    pages = 2 * len(FOLD_FAULTS) + 1  # a page each: none is held when its frame comes
    queues = {"rx_depth": RING, "slot_bytes": payload + 256}
    config = merged(frames_config(executor, metadata, pages=pages), {"queues": queues})
    t = Transceiver(merged(config, shape))
    sensor = sensor_for(t, payload=payload)
    # Seven data packets: the first six take the fault; the seventh (512 bytes or a whole
    # one: the frame's end without metadata) and the record packet come after them.
    sent: list[Any] = []
    lost: dict[int, int] = {}
    packets: list[bytes] = []
    faults = [f for name in FOLD_FAULTS for f in ("in_order", name)] + ["in_order"]
    for n, fault in enumerate(faults):
        tail = (512, payload)[n % 2]
        frame = sensor.frame(n, rng.randbytes(6 * payload + tail))
        order, lost[n] = FOLD_FAULTS[fault]
        data, end = frame.packets[:6], frame.packets[6:]
        arrival = [data[i] for i in order]
        if fault == "written_out_of_order":  # each keeps the PSN of its place in the order
            arrival = [with_psn(p, parse(data[k]).psn) for k, p in enumerate(arrival)]
        packets += arrival + end
        sent.append(frame)
    for p in packets:
        assert t.inject(p), "the script is longer than the rx ring"
    with t:
        records = drain_frames(t, len(packets))
        stats = t.stats()
    return {"records": records, "stats": stats, "sent": sent, "lost": lost, "faults": faults}


@pytest.mark.parametrize("payload", [2048, 4096])
@pytest.mark.parametrize("metadata", [True, False], ids=["metadata", "no_metadata"])
@pytest.mark.parametrize("executor", EXECUTORS)
def test_a_page_crc_is_the_pages_when_its_packets_came_out_of_order_twice_or_not_at_all(
    executor: str, metadata: bool, payload: int
) -> None:
    """The page CRC folded from the packets (batch.h's commit, frames.h fold_page_crc) is the
    CRC of the bytes in page order: a packet placed at its offset out of arrival order, or
    written twice, must not fold in as it came, whatever the batch. Random content: a
    packet's bytes at another packet's offset change the CRC. Every frame's CRC is the
    page's; a whole frame's is zlib's of what the sensor sent, and it is ok; a frame that
    lost a packet has it in ``packets_lost`` and is not ok."""
    runs = []
    for shape in shapes(executor):
        run = fold_stream(executor, shape, metadata, payload)
        by_page = {f.page: f for f in run["sent"]}
        assert len(run["records"]) == len(run["sent"]), (shape, run["stats"])
        for r in run["records"]:
            frame = by_page[r["page"]]
            why = (shape, run["faults"][frame.frame_number])
            assert r["crc32"] == r["payload_crc"], why  # the page's bytes
            lost = run["lost"][frame.frame_number]
            assert (r["packets_lost"], r["ok"]) == (lost, lost == 0), why
            if lost == 0:
                assert r["crc32"] == zlib.crc32(frame.content), why
            elif metadata:
                assert not r["crc_ok"], why
        if streamed(shape):  # the fold ran: the undamaged frames had their CRC from it
            assert run["stats"]["frames_crc_folded"] > 0, (shape, run["stats"])
        runs.append(run)
    assert_same(runs, ("records", "stats"))


# ------------------------------------------------------------- batches that end early


def echo_script(peer: Peer) -> list[bytes]:
    frames: list[bytes] = []

    def send(op: str, payload: bytes, **fields: Any) -> None:
        frames.append(peer.frame(op, payload, psn=peer.take(), **fields))

    for n in range(6):
        send("SEND_ONLY", bytes([65 + n]) * (32 + 100 * n))
    bad = peer.frame("SEND_ONLY", b"G" * 32, psn=peer.psn)
    frames.append(bad[:-4] + bytes(b ^ 0x5A for b in bad[-4:]))  # ICRC error
    gap = psn_add(peer.psn, 5)
    frames.append(peer.frame("SEND_ONLY", b"H" * 32, psn=gap))  # PSN gap
    if peer.transport == "UC":
        peer.psn = psn_add(gap, 1)
    send("SEND_ONLY", b"I" * 32, ack_req=True)
    send("SEND_ONLY_WITH_IMMEDIATE", b"M" * 32, imm=7)
    send("SEND_FIRST", b"N" * 256)
    send("SEND_LAST", b"O" * 10)
    frames.append(peer.frame("SEND_ONLY", b"P" * 32, psn=peer.psn, dest_qp=peer.qpn + 1))
    for n in range(8):
        send("SEND_ONLY", b"Q" * (n + 1))
    return frames


#: Where the overlapping operations land: past write_script's WRITEs (region bytes 0..12 287).
OVERLAP = 12288


def overlap_ops(transport: str, seed: int = 26) -> list[tuple[Any, ...]]:
    """Operations on the same bytes, each right after the one it must see: a WRITE Only and
    then a FETCH_ADD of its word, a COMPARE_SWAP that matches only what the WRITE wrote (and
    one that matches only what was there before it), a WRITE with Immediate over part of a
    WRITE, a WRITE over a WRITE with Immediate, an atomic on a word a WRITE with Immediate
    wrote. Atomics are RC's alone. Random bytes: a WRITE placed late or not at all shows in
    every word it covers.
    ``("write" | "write_imm", offset, payload[, imm])``, ``("fetch_add", offset, add)``,
    ``("compare_swap", offset, compare, swap)``; offsets from the region's start."""
    rng = random.Random(seed)
    word = [int.from_bytes(rng.randbytes(8), "little") for _ in range(8)]
    at = [OVERLAP + 256 * k for k in range(8)]
    ops: list[tuple[Any, ...]] = []
    rc = transport == "RC"
    ops.append(("write", at[0], word[0].to_bytes(8, "little")))
    if rc:
        ops.append(("fetch_add", at[0], 5))
        ops.append(("fetch_add", at[0], 2**64 - 1))  # another at once: sees the first's
    ops.append(("write", at[1], rng.randbytes(64)))  # the word in the middle of a WRITE
    if rc:
        ops.append(("fetch_add", at[1] + 24, 1 << 40))
    ops.append(("write", at[2], rng.randbytes(16) + word[2].to_bytes(8, "little")))
    if rc:
        ops.append(("compare_swap", at[2] + 16, word[2], word[3]))  # matches the WRITE's
    # A WRITE over what a WRITE with Immediate just wrote: the handler's message is the
    # immediate's bytes, so its batch must end with it (placements after it come later).
    ops.append(("write_imm", at[3], rng.randbytes(32), 0x2600_0004))
    ops.append(("write", at[3], rng.randbytes(32)))
    ops.append(("write", at[4], word[4].to_bytes(8, "little")))
    if rc:
        ops.append(("compare_swap", at[4], 0, word[5]))  # matches what was there before
    ops.append(("write", at[5], rng.randbytes(128)))
    ops.append(("write_imm", at[5] + 32, rng.randbytes(48), 0x2600_0001))  # over part of it
    ops.append(("write", at[6], rng.randbytes(64)))
    ops.append(("write_imm", at[6], rng.randbytes(64), 0x2600_0002))  # over all of it
    ops.append(("write_imm", at[7], word[7].to_bytes(8, "little"), 0x2600_0003))
    if rc:
        ops.append(("fetch_add", at[7], 3))
    ops.append(("write", at[7] + 8, rng.randbytes(32)))  # right after it, not over it
    return ops


def overlap_frames(peer: Peer, ops: list[tuple[Any, ...]]) -> list[bytes]:
    """``ops`` as the peer's frames, one PSN each."""
    frames: list[bytes] = []
    for op in ops:
        kind, offset = op[0], op[1]
        if kind in ("write", "write_imm"):
            fields: dict[str, Any] = {"va": VA + offset, "rkey": RKEY, "dma_len": len(op[2])}
            if kind == "write":
                frames.append(peer.frame("RDMA_WRITE_ONLY", op[2], psn=peer.take(), **fields))
            else:
                name = "RDMA_WRITE_ONLY_WITH_IMMEDIATE"
                frames.append(peer.frame(name, op[2], psn=peer.take(), imm=op[3], **fields))
        elif kind == "fetch_add":
            frames.append(
                peer.frame("FETCH_ADD", psn=peer.take(), va=VA + offset, rkey=RKEY, swap_add=op[2])
            )
        else:
            frames.append(
                peer.frame(
                    "COMPARE_SWAP",
                    psn=peer.take(),
                    va=VA + offset,
                    rkey=RKEY,
                    compare=op[2],
                    swap_add=op[3],
                )
            )
    return frames


def rdma_model(ops: list[tuple[Any, ...]], first_psn: int, length: int) -> dict[str, Any]:
    """What RDMA's ordering makes of ``ops``, one after another (IBA 9.4): the region's bytes
    (zero before), each atomic's value before (its ATOMIC ACKNOWLEDGE's, by PSN) and each
    WRITE with Immediate's message (the bytes it wrote, its immediate, its PSN). The words
    are little-endian, as the engine's atomics keep them (test_engine_atomics.py)."""
    mem = bytearray(length)
    originals: list[tuple[int, int]] = []
    delivered: list[tuple[bytes, int, int]] = []
    psn = first_psn
    for op in ops:
        kind, offset = op[0], op[1]
        if kind in ("write", "write_imm"):
            mem[offset : offset + len(op[2])] = op[2]
            if kind == "write_imm":
                delivered.append((op[2], op[3], psn))
        else:
            before = int.from_bytes(mem[offset : offset + 8], "little")
            if kind == "fetch_add":
                after = (before + op[2]) % 2**64
            else:
                after = op[3] if before == op[2] else before
            mem[offset : offset + 8] = after.to_bytes(8, "little")
            originals.append((psn, before))
        psn = psn_add(psn, 1)
    return {"region": bytes(mem), "originals": originals, "delivered": delivered}


def write_script(peer: Peer) -> list[bytes]:
    """RC/UC WRITEs into the first region: the overlapping operations first (overlap_ops:
    WRITEs, then atomics and WRITEs with Immediate on the same bytes), then WRITE Onlys of
    which some ask for an ACK, one is repeated, one skips."""
    frames = overlap_frames(peer, overlap_ops(peer.transport))
    for n in range(24):
        payload = content(n, 512)
        fields: dict[str, Any] = {"va": VA + 512 * n, "rkey": RKEY, "dma_len": 512}
        if n % 5 == 4:
            fields["ack_req"] = True
        frames.append(peer.frame("RDMA_WRITE_ONLY", payload, psn=peer.take(), **fields))
        if n == 9:
            frames.append(frames[-1])  # a duplicate
        if n == 15:
            peer.psn = psn_add(peer.psn, 2)  # a gap
    frames.append(peer.frame("SEND_ONLY", b"end", psn=peer.take()))
    return frames


def drain(take: Any) -> list[Any]:
    """What ``take()`` returns until it returns nothing (each call waits a little)."""
    out: list[Any] = []
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        got = take()
        if not got:
            break
        out += got
    return out


def script_run(executor: str, transport: str, extra: dict[str, Any], script: Any) -> dict[str, Any]:
    base = {"express": False, "queues": {"rx_depth": 256}, "regions": REGIONS}
    t = make(executor, transport, **merged(base, extra))
    peer = Peer(t)
    frames = script(peer)
    for f in frames:
        assert t.inject(f)
    with t:
        wait_counters(t, rx_packets=len(frames))
        sent = drain(lambda: t.collect(max_frames=4096, timeout=0.2))
        messages = [
            (m.request, m.reply, m.opcode, m.psn, m.imm)
            for m in drain(lambda: t.receive(timeout=0.2, max_messages=4096))
        ]
        region = t.read_region(0)
    return {"sent": sent, "messages": messages, "stats": t.stats(), "region": region}


@pytest.mark.parametrize("script", [echo_script, write_script], ids=["echo", "writes"])
@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("executor", EXECUTORS)
def test_batches_that_end_early_give_the_same_replies_acks_and_counters(
    executor: str, transport: str, script: Any
) -> None:
    runs = [script_run(executor, transport, s, script) for s in shapes(executor)]
    for run in runs[1:]:
        assert [parse(f) for f in run["sent"]] == [parse(f) for f in runs[0]["sent"]]
    assert_same(runs, ("sent", "messages", "region", "stats"))
    assert runs[0]["stats"]["rx_packets"] > 20


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("executor", EXECUTORS)
def test_atomics_and_immediates_see_the_writes_before_them_in_a_batch(
    executor: str, transport: str
) -> None:
    """A WRITE's placement waits for a batch's execute phase; an atomic reads and writes its
    word in the commit, and a WRITE with Immediate places its own bytes there (the handler
    reads them). So a batch ends before either when a placement is pending: else the
    FETCH_ADD adds to the word before the WRITE (its answer the old value) and the WRITE then
    lands over the sum, and an earlier WRITE lands over the immediate's bytes. Every shape,
    the batch of 1 too, must give what RDMA's order gives (rdma_model)."""
    ops = overlap_ops(transport)
    first_psn: list[int] = []  # the peer's, as each run's script starts

    def script(peer: Peer) -> list[bytes]:
        first_psn.append(peer.psn)
        return overlap_frames(peer, ops)

    for shape in shapes(executor):
        run = script_run(executor, transport, shape, script)
        want = rdma_model(ops, first_psn[-1], REGIONS[0]["length"])
        acks = [parse(f) for f in run["sent"]]
        originals = [(p.psn, p.atomic_ack_orig) for p in acks if p.opcode == 0x12]
        assert originals == want["originals"], shape
        delivered = [(m[0], m[4], m[3]) for m in run["messages"]]
        assert delivered == want["delivered"], shape
        if run["region"] != want["region"]:
            wrong = [
                i
                for i in range(0, len(want["region"]), 8)
                if run["region"][i : i + 8] != want["region"][i : i + 8]
            ]
            raise AssertionError(f"{shape}: region words at offsets {wrong} are not RDMA's")
        atomics = sum(op[0] in ("fetch_add", "compare_swap") for op in ops)
        assert run["stats"]["atomics"] == atomics and run["stats"]["naks_sent"] == 0, shape


@pytest.mark.parametrize("executor", EXECUTORS)
def test_a_page_written_twice_in_one_batch_holds_the_later_frame(executor: str) -> None:
    """Frame 0 (page 0) loses its end, frame 1 (page 1) closes it incomplete, frame 2 writes
    page 0 again at the same offsets: all 26 packets in one batch, whose placements a crew
    of warps carries out at once. Page 0 must hold frame 2's bytes, as it would one packet at
    a time (a race between the two writers of an offset would show in its CRC)."""
    for n in range(5):
        config = merged(frames_config(executor, True, pages=2), {"queues": {"batch": 32}})
        t = Transceiver(config)
        sensor = sensor_for(t, payload=256)
        lost_end = sensor.frame(0, content(100 + n, 2048))
        between = sensor.frame(1, content(1, 2048))
        later = sensor.frame(2, content(2 + n, 2048))
        packets = lost_end.packets[:-1] + between.packets + later.packets
        for p in packets:
            assert t.inject(p)
        with t:
            records = drain_frames(t, len(packets))
        assert [r["frame_number"] for r in records] == [1, 2]
        assert records[1]["ok"] and records[1]["payload_crc"] == zlib.crc32(later.content)
        assert t.stats()["frames_incomplete"] == 1
