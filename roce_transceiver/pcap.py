"""Classic pcap files (the libpcap format Wireshark and tcpdump read and write).

Reading accepts microsecond (magic 0xa1b2c3d4) and nanosecond (0xa1b23c4d)
files in either byte order; writing produces little-endian files, microsecond
by default. Only link type 1 (Ethernet) is accepted: every frame this project
handles starts with an Ethernet header, and guessing at other link layers would
hand the RoCE parser bytes it cannot make sense of.

Timestamps are floats (seconds since the epoch). A float carries about a
quarter of a microsecond at today's epoch, so nanosecond timestamps round-trip
only to that precision.
"""

from __future__ import annotations

import os
import struct
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from types import TracebackType
from typing import BinaryIO

__all__ = [
    "LINKTYPE_ETHERNET",
    "PcapError",
    "PcapRecord",
    "PcapWriter",
    "iter_pcap",
    "read_pcap",
    "write_pcap",
]

LINKTYPE_ETHERNET = 1
SNAPLEN = 65535

_MAGIC_US = 0xA1B2C3D4
_MAGIC_NS = 0xA1B23C4D
_MAGIC_PCAPNG = 0x0A0D0D0A  # section header block type; same in both byte orders
_FILE_HEADER = struct.Struct("IHHiIII")  # magic, major, minor, thiszone, sigfigs, snaplen, linktype
_RECORD_HEADER = struct.Struct("IIII")  # ts_sec, ts_frac, incl_len, orig_len

PathLike = str | os.PathLike[str]


class PcapError(ValueError):
    """A file that is not a readable Ethernet pcap; the message names file and byte offset."""


@dataclass(frozen=True)
class PcapRecord:
    """One captured frame. ``orig_len`` exceeds ``len(data)`` when the capture truncated it."""

    timestamp: float
    data: bytes
    orig_len: int


def _read_exact(f: BinaryIO, n: int, name: str, what: str, offset: int) -> bytes:
    data = f.read(n)
    if len(data) != n:
        raise PcapError(
            f"{name}: truncated {what} at byte {offset}: need {n} bytes, {len(data)} left"
        )
    return data


@dataclass(frozen=True)
class _Format:
    order: str  # struct byte order of the file, "<" or ">"
    frac_scale: float  # seconds per unit of the timestamp's fraction field


def _read_file_header(f: BinaryIO, name: str) -> _Format:
    header = f.read(_FILE_HEADER.size)
    truncated = PcapError(
        f"{name}: truncated file header at byte 0: "
        f"need {_FILE_HEADER.size} bytes, {len(header)} left"
    )
    if len(header) < 4:
        raise truncated
    # The magic is judged before the length, so that a short file that is no pcap says so.
    (magic_le,) = struct.unpack_from("<I", header)
    (magic_be,) = struct.unpack_from(">I", header)
    if magic_le in (_MAGIC_US, _MAGIC_NS):
        order, magic = "<", magic_le
    elif magic_be in (_MAGIC_US, _MAGIC_NS):
        order, magic = ">", magic_be
    elif magic_le == _MAGIC_PCAPNG:
        raise PcapError(
            f"{name}: pcapng file at byte 0, not classic pcap (convert it: editcap -F pcap IN OUT)"
        )
    else:
        raise PcapError(
            f"{name}: not a pcap file at byte 0: magic 0x{magic_be:08x} "
            "(expected a1b2c3d4 or a1b23c4d in either byte order)"
        )
    if len(header) != _FILE_HEADER.size:
        raise truncated
    _, major, _, _, _, _, network = struct.unpack(order + _FILE_HEADER.format, header)
    if major != 2:
        raise PcapError(f"{name}: unsupported pcap version {major} at byte 4 (expected 2)")
    # The top bits of the link-type word may carry FCS information; the type is the low 16.
    linktype = network & 0xFFFF
    if linktype != LINKTYPE_ETHERNET:
        raise PcapError(
            f"{name}: link type {linktype} at byte 20 is not Ethernet ({LINKTYPE_ETHERNET})"
        )
    return _Format(order, 1e-9 if magic == _MAGIC_NS else 1e-6)


def _records(path: PathLike, name: str, fmt: _Format) -> Iterator[PcapRecord]:
    record = struct.Struct(fmt.order + _RECORD_HEADER.format)
    offset = _FILE_HEADER.size
    with open(path, "rb") as f:
        f.seek(offset)
        while True:
            head = f.read(record.size)
            if not head:
                return
            if len(head) != record.size:
                raise PcapError(
                    f"{name}: truncated record header at byte {offset}: "
                    f"need {record.size} bytes, {len(head)} left"
                )
            ts_sec, ts_frac, incl_len, orig_len = record.unpack(head)
            data = _read_exact(f, incl_len, name, "record data", offset + record.size)
            yield PcapRecord(ts_sec + ts_frac * fmt.frac_scale, data, orig_len)
            offset += record.size + incl_len


def iter_pcap(path: PathLike) -> Iterator[PcapRecord]:
    """The records of a pcap file, read one by one.

    The file header is checked now (OSError, PcapError), so a caller learns that a
    file is not a pcap before it consumes anything; a damaged record raises
    PcapError when the iteration reaches it.
    """
    name = os.fspath(path)
    # The header is read with its own open(): a generator that is never started would
    # leave an already-open file to the garbage collector.
    with open(path, "rb") as f:
        fmt = _read_file_header(f, name)
    return _records(path, name, fmt)


def read_pcap(path: PathLike) -> list[PcapRecord]:
    """All records of a pcap file; PcapError names the file and byte offset of a problem."""
    return list(iter_pcap(path))


class PcapWriter:
    """Write Ethernet frames to a little-endian pcap file.

    >>> with PcapWriter("out.pcap") as w:  # doctest: +SKIP
    ...     w.write(frame, timestamp=1700000000.5)
    """

    def __init__(self, path: PathLike, *, nanosecond: bool = False) -> None:
        self.path = os.fspath(path)
        self.nanosecond = nanosecond
        self._frac_per_s = 1_000_000_000 if nanosecond else 1_000_000
        self._file: BinaryIO = open(path, "wb")  # noqa: SIM115 (owned until close())
        magic = _MAGIC_NS if nanosecond else _MAGIC_US
        self._file.write(
            struct.pack("<" + _FILE_HEADER.format, magic, 2, 4, 0, 0, SNAPLEN, LINKTYPE_ETHERNET)
        )

    def write(self, frame: bytes | bytearray | memoryview, timestamp: float | None = None) -> None:
        """Append one frame; ``timestamp`` defaults to now."""
        data = bytes(frame)
        if len(data) > SNAPLEN:
            raise ValueError(f"frame of {len(data)} bytes: longer than the snaplen {SNAPLEN}")
        ts = time.time() if timestamp is None else timestamp
        if not 0 <= ts < 2**32:
            raise ValueError(f"timestamp={ts}: out of range 0..2**32 seconds")
        sec = int(ts)
        frac = round((ts - sec) * self._frac_per_s)
        if frac == self._frac_per_s:  # rounding reached the next second
            sec, frac = sec + 1, 0
        self._file.write(struct.pack("<" + _RECORD_HEADER.format, sec, frac, len(data), len(data)))
        self._file.write(data)

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> PcapWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def write_pcap(
    path: PathLike,
    frames: Iterable[bytes | tuple[float, bytes]],
    *,
    nanosecond: bool = False,
) -> int:
    """Write frames (bare, stamped now, or ``(timestamp, frame)`` pairs); returns the count."""
    count = 0
    with PcapWriter(path, nanosecond=nanosecond) as w:
        for item in frames:
            if isinstance(item, tuple):
                w.write(item[1], item[0])
            else:
                w.write(item)
            count += 1
    return count
