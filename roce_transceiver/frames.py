"""Frames from the frames handler: HSB-style sensor frames, handed over without a copy.

A :class:`Frame` describes one frame the engine assembled in a page (frame buffer): its
number, page, byte count, PSN range, packets lost, the CRC-32 of its bytes and, with
metadata, the sensor's CRC and PTP time. ``data`` views the page (host memory: a read-only
numpy array over the page itself; pages in GPU memory: a copy) and ``array()`` is the frame
where it lies (a cupy array over GPU memory, no copy, on the cuda executor). The page stays the
host's until :meth:`Frame.release` gives it back; until then the engine drops (and counts)
any frame the sensor writes into it, and never waits.

A frame holds a share of the memory its page lies in, and so does every array taken from it:
after ``Transceiver.stop()`` both still read the frame's bytes (nothing writes the page any
more), and the memory goes with the last of them. ``release()`` after stop() does nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from roce_transceiver import _core

__all__ = ["RECORD_FIELDS", "RECORD_NAMES", "SLICE_FIELDS", "SLICE_NAMES", "Frame", "Slice"]

#: The frame record as the engine hands it over, in Frame's order: (name, kind), the kind
#: "int", "bool" or "int?" (None where the frame has no metadata). The core's one table of it
#: (register_engine.cpp); Frame's own fields begin with these (tests/test_frame_record.py).
RECORD_FIELDS: tuple[tuple[str, str], ...] = tuple(
    (str(name), str(kind)) for name, kind in _core.FRAME_RECORD_FIELDS
)
RECORD_NAMES: tuple[str, ...] = tuple(name for name, _ in RECORD_FIELDS)
#: The slice record (frames.slice_bytes) as the engine hands it over, in Slice's order.
SLICE_FIELDS: tuple[tuple[str, str], ...] = tuple(
    (str(name), str(kind)) for name, kind in _core.SLICE_RECORD_FIELDS
)
SLICE_NAMES: tuple[str, ...] = tuple(name for name, _ in SLICE_FIELDS)


@dataclass
class Frame:
    frame_number: int
    page: int
    bytes: int
    crc32: int  # of the page's first ``bytes`` bytes, zlib's
    metadata_crc: int | None  # the record's CRC field as sent (JAMCRC: ~crc32); None: no metadata
    has_metadata: bool  # metadata mode: the frame should end with its record
    crc_ok: bool  # its record came and the record's CRC matches the page's
    crc_checked: bool  # metadata mode with frames.check_crc: crc_ok is part of ok
    bytes_ok: bool  # its record came and its byte count matches what arrived
    page_match: bool  # the end-of-frame immediate named the page the data went to
    psn_first: int
    psn_last: int
    packets: int
    packets_lost: int
    ptp_s: int
    ptp_ns: int
    rx_first_ns: int
    rx_last_ns: int
    done_ns: int = 0  # when the engine recorded it (its clock: %globaltimer on the GPU)
    queue: int = 0  # the queue (queues.count) whose stream it came on
    # The stream's statistic (custom.source with handler frames): the bytes the user handler
    # returned for this frame; None without one or when it returned kNoReply.
    result: bytes | None = None
    result_error: bool = False  # the statistic failed (kHandlerError, or past its capacity)
    on_device: bool = False  # its page is in GPU memory (array() is a cupy array over it)
    _data: Callable[[], np.ndarray] = field(repr=False, compare=False, default=lambda: np.empty(0))
    # A cupy array over the page, keeping `owner` (or the page's memory) alive: the one wrap.
    _device: Callable[[object | None], Any] = field(
        repr=False, compare=False, default=lambda owner: None
    )
    _release: Callable[[], None] = field(repr=False, compare=False, default=lambda: None)
    released: bool = field(default=False, compare=False)
    # The record's values as the core handed them over (RECORD_NAMES' order), when it did.
    _record: tuple[Any, ...] = field(repr=False, compare=False, default=())

    def record(self) -> tuple[Any, ...]:
        """The frame's record, its values in RECORD_NAMES' order (a graph's metadata)."""
        return self._record or tuple(getattr(self, name) for name in RECORD_NAMES)

    @property
    def ok(self) -> bool:
        """Whole and intact: no packet lost, the immediate named the page, and with metadata
        the record came, its byte count matches and (``frames.check_crc``) so does its CRC."""
        return (
            self.packets_lost == 0
            and self.page_match
            and (self.bytes_ok or not self.has_metadata)
            and (self.crc_ok or not self.crc_checked)
        )

    @property
    def data(self) -> np.ndarray:
        """The frame's bytes (uint8). Valid until :meth:`release`, and after the transceiver
        stopped (the page's memory lives as long as the frame or the array does)."""
        if self.released:
            raise ValueError(f"frame {self.frame_number}: page {self.page} was released")
        return self._data()

    def array(self, owner: object | None = None) -> Any:
        """The frame where it lies, without a copy: a cupy array over the page in GPU memory
        (cuda executor; needs cupy), else the numpy view of ``data``. Valid as ``data`` is.
        ``owner``: what the cupy array keeps alive in place of the page's share of memory (an
        object that holds this frame, say one that releases the page when collected)."""
        if self.released:
            raise ValueError(f"frame {self.frame_number}: page {self.page} was released")
        return self._device(owner) if self.on_device else self._data()

    def release(self) -> None:
        """Give the page back to the engine. Idempotent; after stop() it does nothing."""
        if not self.released:
            self.released = True
            self._release()

    def as_dict(self) -> dict[str, Any]:
        """The frame's record (every field but the page's handles) and ``ok``; and
        ``metadata_crc32``, metadata_crc's name before 2026-12-01, for readers of listen's JSON
        that still ask for it (the record's CRC as sent: JAMCRC, not zlib's crc32)."""
        out = {f.name: getattr(self, f.name) for f in fields(self) if not f.name.startswith("_")}
        del out["released"], out["on_device"]  # the handle's state, not the frame's
        return {**out, "ok": self.ok, "metadata_crc32": self.metadata_crc}


@dataclass
class Slice:
    """A part of a frame handed over before the frame (``frames.slice_bytes``): the page's
    bytes ``[offset, offset + bytes)``, slice ``slice`` of the frame (``offset = slice *
    slice_bytes``), recorded once the frame's packets passed its end, its last one at the
    frame's end right before the frame. ``whole``: every packet that carried its bytes
    arrived. ``frame_number``: the frames recorded before its frame (its frame's number when
    the stream has no metadata).

    The page is the engine's while the frame goes on: a slice does not hold it. Its bytes stay
    as they are until the frame's page is given back after the frame (or, for a frame that
    never ends, until the sensor writes that page again); read them before."""

    frame_number: int
    slice: int
    page: int
    offset: int
    bytes: int
    whole: bool
    last: bool  # the frame's last slice, recorded at its end
    rx_last_ns: int
    done_ns: int = 0  # when the engine recorded it (its clock)
    queue: int = 0
    on_device: bool = False  # its page is in GPU memory (array() is a cupy array over it)
    _data: Callable[[], np.ndarray] = field(repr=False, compare=False, default=lambda: np.empty(0))
    _device: Callable[[object | None], Any] = field(
        repr=False, compare=False, default=lambda owner: None
    )

    @property
    def data(self) -> np.ndarray:
        """The slice's bytes (uint8): a read-only view of the page in host memory, a copy of
        it from GPU memory."""
        return self._data()

    def array(self, owner: object | None = None) -> Any:
        """The slice where it lies, without a copy: a cupy array over the page in GPU memory
        (cuda executor; needs cupy), else the numpy view of ``data``."""
        return self._device(owner) if self.on_device else self._data()

    def as_dict(self) -> dict[str, Any]:
        """The slice's record (every field but the page's handles)."""
        out = {f.name: getattr(self, f.name) for f in fields(self) if not f.name.startswith("_")}
        del out["on_device"]
        return out
