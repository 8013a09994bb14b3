"""Classic pcap reading and writing (roce_transceiver.pcap).

Goal: files we write open in other tools, files other tools write (microsecond
or nanosecond, little- or big-endian) read back exactly, and damaged files fail
with an error that names the file and the byte offset of the damage.

Oracles: file and record headers packed here with ``struct`` straight from the
libpcap format description (magic, version 2.4, snaplen, link type; then
ts_sec, ts_frac, incl_len, orig_len per record); scapy's independent pcap
reader and writer; and tshark, which must dissect what we write as RoCE.
"""

from __future__ import annotations

import io
import os
import struct
import subprocess
import threading
import tracemalloc

import pytest

from roce_transceiver import protocol
from roce_transceiver.pcap import (
    PcapError,
    PcapRecord,
    PcapWriter,
    iter_pcap,
    read_pcap,
    write_pcap,
)

MAGIC_US = 0xA1B2C3D4
MAGIC_NS = 0xA1B23C4D


def file_header(
    order: str = "<", magic: int = MAGIC_US, linktype: int = 1, snaplen: int = 65535
) -> bytes:
    return struct.pack(order + "IHHiIII", magic, 2, 4, 0, 0, snaplen, linktype)


def record(order: str, sec: int, frac: int, data: bytes, orig_len: int | None = None) -> bytes:
    orig = len(data) if orig_len is None else orig_len
    return struct.pack(order + "IIII", sec, frac, len(data), orig) + data


FRAMES = [
    protocol.build("UC_RDMA_WRITE_ONLY", bytes(range(64)), va=0x1000, rkey=7, psn=0),
    protocol.build("UC_SEND_ONLY", b"abc", dest_qp=2, psn=1),
    protocol.build("RC_ACKNOWLEDGE", syndrome=0x1F, msn=1, psn=2),
]


def test_writer_header_is_little_endian_microsecond_ethernet(tmp_path):
    path = tmp_path / "w.pcap"
    with PcapWriter(path) as w:
        w.write(FRAMES[0], timestamp=1700000000.25)
    raw = path.read_bytes()
    assert raw[:24] == file_header("<", MAGIC_US)
    assert raw[24:40] == struct.pack("<IIII", 1700000000, 250000, len(FRAMES[0]), len(FRAMES[0]))
    assert raw[40:] == FRAMES[0]


def test_writer_nanosecond_header_and_fraction(tmp_path):
    path = tmp_path / "ns.pcap"
    with PcapWriter(path, nanosecond=True) as w:
        w.write(FRAMES[1], timestamp=1.5)
    raw = path.read_bytes()
    assert raw[:24] == file_header("<", MAGIC_NS)
    assert struct.unpack_from("<II", raw, 24) == (1, 500_000_000)


@pytest.mark.parametrize("nanosecond", [False, True])
def test_round_trip_keeps_frames_and_timestamps(tmp_path, nanosecond):
    path = tmp_path / "rt.pcap"
    stamps = [1700000000.0, 1700000000.000125, 1700000001.5]
    count = write_pcap(path, zip(stamps, FRAMES, strict=True), nanosecond=nanosecond)
    assert count == 3
    records = read_pcap(path)
    assert [r.data for r in records] == FRAMES
    assert [r.orig_len for r in records] == [len(f) for f in FRAMES]
    for got, want in zip(records, stamps, strict=True):
        assert got.timestamp == pytest.approx(want, abs=1e-6)


def test_write_pcap_accepts_bare_frames_stamped_now(tmp_path):
    path = tmp_path / "bare.pcap"
    assert write_pcap(path, [FRAMES[0], (5.0, FRAMES[1])]) == 2
    first, second = read_pcap(path)
    assert first.timestamp > 1.6e9  # "now", not zero
    assert second == PcapRecord(5.0, FRAMES[1], len(FRAMES[1]))


def test_timestamp_rounding_carries_into_seconds(tmp_path):
    path = tmp_path / "carry.pcap"
    with PcapWriter(path) as w:
        w.write(FRAMES[0], timestamp=9.9999999)  # rounds to 10.000000, not 9 + 1000000 us
    assert struct.unpack_from("<II", path.read_bytes(), 24) == (10, 0)


@pytest.mark.parametrize("order", ["<", ">"], ids=["little-endian", "big-endian"])
@pytest.mark.parametrize(
    ("magic", "frac", "seconds"),
    [(MAGIC_US, 123456, 0.123456), (MAGIC_NS, 123456789, 0.123456789)],
    ids=["microsecond", "nanosecond"],
)
def test_reads_both_magics_in_both_byte_orders(tmp_path, order, magic, frac, seconds):
    path = tmp_path / "in.pcap"
    path.write_bytes(
        file_header(order, magic)
        + record(order, 1700000000, frac, FRAMES[0])
        + record(order, 1700000001, 0, FRAMES[1])
    )
    first, second = read_pcap(path)
    assert first.data == FRAMES[0]
    assert first.timestamp == pytest.approx(1700000000 + seconds, abs=1e-6)
    assert second == PcapRecord(1700000001.0, FRAMES[1], len(FRAMES[1]))


def test_keeps_orig_len_of_a_snaplen_truncated_capture(tmp_path):
    path = tmp_path / "snap.pcap"
    path.write_bytes(file_header() + record("<", 1, 0, FRAMES[0][:60], orig_len=len(FRAMES[0])))
    (rec,) = read_pcap(path)
    assert rec.data == FRAMES[0][:60]
    assert rec.orig_len == len(FRAMES[0])


def test_header_only_file_has_no_records(tmp_path):
    path = tmp_path / "empty.pcap"
    path.write_bytes(file_header())
    assert read_pcap(path) == []


def test_truncated_file_header_names_file_and_offset(tmp_path):
    path = tmp_path / "short.pcap"
    path.write_bytes(file_header()[:10])
    with pytest.raises(PcapError, match=r"short\.pcap: truncated file header at byte 0: "):
        read_pcap(path)
    with pytest.raises(PcapError, match="need 24 bytes, 10 left"):
        read_pcap(path)


def test_truncated_record_header_names_its_offset(tmp_path):
    path = tmp_path / "t.pcap"
    good = record("<", 1, 0, FRAMES[0])
    path.write_bytes(file_header() + good + b"\x01\x02\x03")
    offset = 24 + len(good)
    expected = f"t.pcap: truncated header of record 1 at byte {offset}: need 16 bytes, 3 left"
    with pytest.raises(PcapError, match=expected):
        read_pcap(path)


def test_truncated_record_data_names_its_offset(tmp_path):
    path = tmp_path / "t.pcap"
    path.write_bytes(file_header() + record("<", 1, 0, FRAMES[0])[:-5])
    need = len(FRAMES[0])
    expected = f"truncated data of record 0 at byte 40: need {need} bytes, {need - 5} left"
    with pytest.raises(PcapError, match=expected):
        read_pcap(path)


def test_iter_pcap_yields_good_records_before_the_damage(tmp_path):
    path = tmp_path / "t.pcap"
    path.write_bytes(file_header() + record("<", 1, 0, FRAMES[0]) + b"\x00" * 4)
    records = iter_pcap(path)
    assert next(records).data == FRAMES[0]
    with pytest.raises(PcapError, match="truncated header of record 1"):
        next(records)


def test_a_record_longer_than_the_snap_length_is_refused_without_reading_it(tmp_path):
    # A damaged length of 2**32-1 once made the reader allocate 4 GiB (MemoryError).
    path = tmp_path / "huge.pcap"
    huge = struct.pack("<IIII", 1, 0, 0xFFFFFFFF, 0xFFFFFFFF)
    path.write_bytes(file_header() + record("<", 1, 0, FRAMES[1]) + huge + b"x" * 100)
    offset = 24 + 16 + len(FRAMES[1])
    expected = (
        rf"huge\.pcap: record 1 at byte {offset}: captured length 4294967295 "
        r"is more than the file's snap length 65535"
    )
    tracemalloc.start()
    try:
        with pytest.raises(PcapError, match=expected):
            read_pcap(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20, f"reading allocated {peak} bytes"


def test_a_record_may_not_exceed_the_files_own_snap_length(tmp_path):
    path = tmp_path / "snap.pcap"
    path.write_bytes(file_header(snaplen=64) + record("<", 1, 0, FRAMES[0]))
    with pytest.raises(PcapError, match=f"captured length {len(FRAMES[0])} is more than .* 64$"):
        read_pcap(path)


@pytest.mark.parametrize("snaplen", [0, 0xFFFFFFFF])
def test_a_header_without_a_usable_snap_length_bounds_records_by_libpcaps_maximum(
    tmp_path, snaplen
):
    path = tmp_path / "nosnap.pcap"
    jumbo = bytes(70000)  # above 65535, so only the 262144 maximum admits it
    too_long = struct.pack("<IIII", 2, 0, 262145, 262145)
    path.write_bytes(file_header(snaplen=snaplen) + record("<", 1, 0, jumbo) + too_long)
    records = iter_pcap(path)
    assert next(records).data == jumbo
    expected = (
        "record 1 at byte 70040: captured length 262145 is more than 262144, "
        f"the largest snap length \\(the file header gives {snaplen}\\)"
    )
    with pytest.raises(PcapError, match=expected):
        next(records)


def test_a_record_longer_than_what_the_file_has_left_is_refused_before_reading(tmp_path):
    path = tmp_path / "short.pcap"
    header = struct.pack("<IIII", 1, 0, 200000, 200000)
    path.write_bytes(file_header(snaplen=262144) + header + b"y" * 10)
    tracemalloc.start()
    try:
        with pytest.raises(
            PcapError, match="truncated data of record 0 at byte 40: need 200000 bytes, 10 left"
        ):
            read_pcap(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 200000, f"reading allocated {peak} bytes for a 10-byte remainder"


def _pipe_with(data: bytes) -> tuple[int, threading.Thread]:
    """The read end of a pipe that a thread fills with ``data`` and then closes."""
    read_fd, write_fd = os.pipe()

    def feed() -> None:
        with open(write_fd, "wb") as w:
            w.write(data)

    writer = threading.Thread(target=feed)
    writer.start()
    return read_fd, writer


def test_reads_a_pipe_by_its_path_as_dev_stdin_is(tmp_path):
    # Larger than a pipe's buffer, so the reader really reads while the writer writes.
    frames = [protocol.build("UC_SEND_ONLY", bytes(4000), psn=i) for i in range(40)]
    data = file_header() + b"".join(record("<", i, 0, f) for i, f in enumerate(frames))
    read_fd, writer = _pipe_with(data)
    try:
        records = read_pcap(f"/dev/fd/{read_fd}")
    finally:
        os.close(read_fd)  # a reader that gave up: the writer fails at once, no hang
        writer.join(timeout=10)
    assert not writer.is_alive()
    assert [r.data for r in records] == frames


def test_reads_a_binary_stream_and_leaves_it_open():
    stream = io.BytesIO(file_header() + b"".join(record("<", 1, 0, f) for f in FRAMES))
    assert [r.data for r in read_pcap(stream)] == FRAMES
    assert not stream.closed


def test_a_stream_of_unknown_length_is_still_bounded_by_the_snap_length():
    huge = struct.pack("<IIII", 1, 0, 0xFFFFFFFF, 0xFFFFFFFF)
    stream = io.BufferedReader(io.BytesIO(file_header() + huge + b"z" * 10))  # no fileno
    with pytest.raises(PcapError, match="record 0 at byte 24: captured length 4294967295"):
        read_pcap(stream)


def test_an_iterator_left_unfinished_closes_its_file(tmp_path):
    path = tmp_path / "t.pcap"
    write_pcap(path, FRAMES)
    records = iter_pcap(path)
    assert next(records).data == FRAMES[0]
    records.close()  # type: ignore[attr-defined]
    with pytest.raises(StopIteration):
        next(records)
    # Dropped without close(): collected quietly (ResourceWarning is an error in this suite).
    abandoned = iter_pcap(path)
    next(abandoned)
    del abandoned


def test_iter_pcap_checks_the_file_header_before_iterating(tmp_path):
    path = tmp_path / "not.pcap"
    path.write_bytes(b"hello, this is not a capture file")
    with pytest.raises(PcapError, match=r"not\.pcap: not a pcap file at byte 0: magic 0x68656c6c"):
        iter_pcap(path)


def test_wrong_link_type_is_refused(tmp_path):
    path = tmp_path / "raw.pcap"
    path.write_bytes(file_header(linktype=101) + record("<", 1, 0, FRAMES[0][14:]))
    with pytest.raises(PcapError, match=r"link type 101 at byte 20 is not Ethernet \(1\)"):
        read_pcap(path)


def test_pcapng_is_named_as_such(tmp_path):
    path = tmp_path / "x.pcapng"
    path.write_bytes(struct.pack("<IIIHHq", 0x0A0D0D0A, 28, 0x1A2B3C4D, 1, 0, -1) + b"\x00" * 8)
    with pytest.raises(PcapError, match="pcapng file"):
        read_pcap(path)


def test_pcap_error_is_a_value_error():
    assert issubclass(PcapError, ValueError)


def test_writer_refuses_frames_over_the_snaplen(tmp_path):
    with PcapWriter(tmp_path / "big.pcap") as w, pytest.raises(ValueError, match="snaplen 65535"):
        w.write(b"\x00" * 65536, timestamp=1.0)


def test_scapy_reads_what_we_write_and_we_read_what_it_writes(tmp_path):
    from scapy.layers.l2 import Ether  # registers link type 1 with scapy's reader
    from scapy.utils import PcapWriter as ScapyWriter
    from scapy.utils import rdpcap

    ours = tmp_path / "ours.pcap"
    write_pcap(ours, [(1700000000.5 + i, f) for i, f in enumerate(FRAMES)], nanosecond=True)
    theirs = rdpcap(str(ours))
    assert [bytes(p) for p in theirs] == FRAMES
    assert [float(p.time) for p in theirs] == pytest.approx(
        [1700000000.5, 1700000001.5, 1700000002.5]
    )

    scapy_file = tmp_path / "scapy.pcap"
    with ScapyWriter(str(scapy_file), nano=True, linktype=1) as w:
        for i, frame in enumerate(FRAMES):
            pkt = Ether(frame)
            pkt.time = 1700000000 + i
            w.write(pkt)
    assert [r.data for r in read_pcap(scapy_file)] == FRAMES
    assert [r.timestamp for r in read_pcap(scapy_file)] == [1700000000, 1700000001, 1700000002]


@pytest.mark.tshark
def test_tshark_dissects_what_we_write(tmp_path, tshark_path):
    path = tmp_path / "tshark.pcap"
    write_pcap(path, [(1700000000.25 + i, f) for i, f in enumerate(FRAMES)], nanosecond=True)
    fields = ["frame.time_epoch", "frame.len", "infiniband.bth.opcode", "infiniband.bth.psn"]
    out = subprocess.run(
        [tshark_path, "-r", str(path), "-T", "fields", *(a for f in fields for a in ("-e", f))],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    rows = [line.split("\t") for line in out.splitlines()]
    assert [(float(t), int(n), int(op), int(psn)) for t, n, op, psn in rows] == [
        (1700000000.25, len(FRAMES[0]), 0x2A, 0),
        (1700000001.25, len(FRAMES[1]), 0x24, 1),
        (1700000002.25, len(FRAMES[2]), 0x11, 2),
    ]
