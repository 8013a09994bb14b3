"""Classic pcap files (the libpcap format Wireshark and tcpdump read and write).

Reading accepts microsecond (magic 0xa1b2c3d4) and nanosecond (0xa1b23c4d)
files in either byte order, from a path or a stream (a pipe, ``/dev/stdin``: the
file is read once, front to back, never seeked); writing produces little-endian
files, microsecond by default. A record may capture at most the file header's
snap length, and no more than the file has left: a damaged length is an error
that names the file, the record and its byte offset, never a read of gigabytes.

Only link type 1 (Ethernet) is accepted: every frame this project handles starts
with an Ethernet header, and guessing at other link layers would hand the RoCE
parser bytes it cannot make sense of.

Timestamps are floats (seconds since the epoch). A float carries about a
quarter of a microsecond at today's epoch, so nanosecond timestamps round-trip
only to that precision.
"""

from __future__ import annotations

import os
import stat
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
#: libpcap's largest snap length (MAXIMUM_SNAPLEN): a file header that gives none (0) or more
#: bounds its records by this instead, as libpcap and Wireshark do.
MAX_SNAPLEN = 262144

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


@dataclass(frozen=True)
class _Format:
    order: str  # struct byte order of the file, "<" or ">"
    frac_scale: float  # seconds per unit of the timestamp's fraction field
    snaplen: int  # the file header's snap length: no record captures more


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
    _, major, _, _, _, snaplen, network = struct.unpack(order + _FILE_HEADER.format, header)
    if major != 2:
        raise PcapError(f"{name}: unsupported pcap version {major} at byte 4 (expected 2)")
    # The top bits of the link-type word may carry FCS information; the type is the low 16.
    linktype = network & 0xFFFF
    if linktype != LINKTYPE_ETHERNET:
        raise PcapError(
            f"{name}: link type {linktype} at byte 20 is not Ethernet ({LINKTYPE_ETHERNET})"
        )
    return _Format(order, 1e-9 if magic == _MAGIC_NS else 1e-6, snaplen)


def _size_left(f: BinaryIO) -> int | None:
    """Bytes from the position of ``f`` to the end of its file; None for a stream (pipe,
    terminal, socket) or an object without a file descriptor, whose length is not known."""
    try:
        st = os.fstat(f.fileno())
        return st.st_size - f.tell() if stat.S_ISREG(st.st_mode) else None
    except (OSError, ValueError):  # io.UnsupportedOperation is both
        return None


class _Records(Iterator[PcapRecord]):
    """The records after the file header, read front to back from one file object (so a pipe
    works); the file, when opened here, is closed at the end, on an error, by ``close()`` or
    when the iterator is collected unfinished."""

    def __init__(self, f: BinaryIO, name: str, fmt: _Format, *, owned: bool) -> None:
        self._file: BinaryIO | None = f
        self._owned = owned
        self._name = name
        self._header = struct.Struct(fmt.order + _RECORD_HEADER.format)
        self._frac_scale = fmt.frac_scale
        if 0 < fmt.snaplen <= MAX_SNAPLEN:
            self._limit, self._limit_text = fmt.snaplen, f"the file's snap length {fmt.snaplen}"
        else:
            self._limit = MAX_SNAPLEN
            self._limit_text = (
                f"{MAX_SNAPLEN}, the largest snap length (the file header gives {fmt.snaplen})"
            )
        self._left = _size_left(f)  # None: a stream, only the snap length bounds a record
        self._index = 0
        self._offset = _FILE_HEADER.size

    def __next__(self) -> PcapRecord:
        if self._file is None:
            raise StopIteration
        try:
            record = self._read(self._file)
        except BaseException:
            self.close()
            raise
        if record is None:
            self.close()
            raise StopIteration
        return record

    def _read(self, f: BinaryIO) -> PcapRecord | None:
        name, index, offset, size = self._name, self._index, self._offset, self._header.size
        head = f.read(size)
        if not head:
            return None
        if len(head) != size:
            raise PcapError(
                f"{name}: truncated header of record {index} at byte {offset}: "
                f"need {size} bytes, {len(head)} left"
            )
        ts_sec, ts_frac, incl_len, orig_len = self._header.unpack(head)
        if incl_len > self._limit:
            raise PcapError(
                f"{name}: record {index} at byte {offset}: captured length {incl_len} "
                f"is more than {self._limit_text}"
            )
        if self._left is not None:
            self._left -= size
            if incl_len > self._left:
                # Known before reading: the length is damaged or the file cut short.
                raise PcapError(
                    f"{name}: truncated data of record {index} at byte {offset + size}: "
                    f"need {incl_len} bytes, {self._left} left"
                )
            self._left -= incl_len
        data = f.read(incl_len)
        if len(data) != incl_len:
            raise PcapError(
                f"{name}: truncated data of record {index} at byte {offset + size}: "
                f"need {incl_len} bytes, {len(data)} left"
            )
        self._index += 1
        self._offset += size + incl_len
        return PcapRecord(ts_sec + ts_frac * self._frac_scale, data, orig_len)

    def close(self) -> None:
        """Stop reading; closes the file if it was opened here. Safe to call twice."""
        f, self._file = self._file, None
        if f is not None and self._owned:
            f.close()

    def __del__(self) -> None:
        self.close()


def iter_pcap(source: PathLike | BinaryIO) -> Iterator[PcapRecord]:
    """The records of a pcap file, read one by one, from a path or a binary stream.

    The file header is checked now (OSError, PcapError), so a caller learns that a
    file is not a pcap before it consumes anything; a damaged record raises
    PcapError when the iteration reaches it. The file is read once, front to back
    (``/dev/stdin`` or a pipe works); a stream given by the caller stays open.
    """
    if isinstance(source, (str, os.PathLike)):
        name = os.fspath(source)
        f: BinaryIO = open(source, "rb")  # noqa: SIM115 (owned by the iterator)
        owned = True
    else:
        f, owned = source, False
        name = str(getattr(source, "name", "<stream>"))
    try:
        fmt = _read_file_header(f, name)
    except BaseException:
        if owned:
            f.close()
        raise
    return _Records(f, name, fmt, owned=owned)


def read_pcap(source: PathLike | BinaryIO) -> list[PcapRecord]:
    """All records of a pcap file or stream; PcapError names the file, record and byte
    offset of a problem."""
    return list(iter_pcap(source))


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
