"""The ``sensor`` peer: a Holoscan Sensor Bridge style camera on the other side of the wire.

It turns frames into the packets an HSB FPGA sends (DESIGN.md section 3): UC RDMA WRITE Only
packets of ``payload`` bytes, each with its own RETH into the frame's page, and an end of frame
that is a WRITE Only with Immediate (immediate = psn[19:0] << 12 | page): with metadata, the
128-byte record (hsb.py), either in a packet of its own written at the page's last 128 bytes
(``record="separate"``) or, as HSB's emulator does by default, appended to the last data packet
behind a zero pad to HSB's 128-byte alignment (``record="appended"``, the record landing at
page + round_up(frame bytes, 128)), or, as HSB's bridge and emulator decide per frame
(``record="hsb"``), appended when it fits the packet's payload and in a WRITE with Immediate
of its own at that same place when it does not; without metadata, the last data packet itself.
:mod:`roce_transceiver.peers.bridge` drives a Sensor from a bridge's registers. Faults can
be injected at given rates (loss, reordering, duplication, corrupt ICRC), and every injection is
recorded so a test knows what to expect.
"""

from __future__ import annotations

import random
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from roce_transceiver.hsb import METADATA_BYTES, PAGE_ALIGN, FrameMetadata, imm_encode, jamcrc
from roce_transceiver.peers.link import Addresses

__all__ = ["HSB_SOURCE_PORT", "Faults", "Sensor", "SentFrame"]

HSB_SOURCE_PORT = 12288  # the UDP source port HSB's sensors send from


@dataclass(frozen=True)
class Faults:
    """Rates (0..1) per data packet, and per frame for its end-of-frame packet."""

    loss: float = 0.0
    reorder: float = 0.0  # swapped with the next data packet
    duplicate: float = 0.0
    corrupt: float = 0.0  # ICRC flipped: the engine must drop it
    end_loss: float = 0.0  # the end-of-frame packet lost: the frame never completes

    def any(self) -> bool:
        return any((self.loss, self.reorder, self.duplicate, self.corrupt, self.end_loss))


@dataclass
class SentFrame:
    """One frame as the sensor sent it, and what was done to its packets."""

    frame_number: int
    page: int
    content: bytes
    packets: list[bytes]
    lost: int = 0  # data packets dropped (loss or corrupt ICRC)
    reordered: int = 0
    duplicated: int = 0
    corrupted: int = 0
    end_lost: bool = False  # its end-of-frame packet was dropped
    events: list[str] = field(default_factory=list)

    @property
    def crc32(self) -> int:
        return zlib.crc32(self.content)


class Sensor:
    """Frames in, packets out: ``frame(n, content)`` is the packets of frame ``n``."""

    def __init__(
        self,
        addresses: Addresses,
        *,
        va: int,
        rkey: int,
        page_bytes: int,
        pages: int,
        payload: int = 1024,
        metadata: bool = True,
        first_psn: int = 0,
        psn_bits: int = 24,
        record: str = "separate",
        faults: Faults | None = None,
        seed: int = 1,
        record_crc: str = "jamcrc",
        page_bits: int = 12,
    ) -> None:
        if addresses.transport != "UC":
            raise ValueError("an HSB sensor speaks UC (qp.transport: UC)")
        if payload < 4 or payload % 4:
            raise ValueError(f"payload {payload}: a positive multiple of 4 bytes")
        if psn_bits not in (20, 24):
            raise ValueError(f"psn_bits {psn_bits}: 24, or 20 as HSB's emulator counts")
        if record not in ("separate", "appended", "hsb"):
            raise ValueError(f"record {record!r}: 'separate', 'appended' or 'hsb'")
        if record_crc not in ("jamcrc", "zero"):
            raise ValueError(f"record_crc {record_crc!r}: 'jamcrc', or 'zero' as HSB's emulator")
        if page_bits not in (8, 12):
            raise ValueError(f"page_bits {page_bits}: 12, or 8 as HSB IP before 0x2603")
        self.addresses = addresses
        self.va, self.rkey = va, rkey
        self.page_bytes, self.pages = page_bytes, pages
        self.payload = payload
        self.metadata = metadata
        self.record = record
        self.record_crc = record_crc
        self.page_bits = page_bits
        self.psn_bits = psn_bits
        self.psn = first_psn & ((1 << psn_bits) - 1)
        self.faults = faults or Faults()
        self._rng = random.Random(seed)

    @classmethod
    def for_config(
        cls, cfg: dict[str, Any], addresses: Addresses | None = None, **kw: Any
    ) -> Sensor:
        """The sensor a transceiver configured by ``cfg`` (a loaded config) expects: its
        frames section's pages, rkey and metadata mode, its QP's first PSN, and ``addresses``
        (default: the transceiver's peer, sending from HSB's source port 12288). ``kw``:
        the other parameters (payload, faults, record, ...)."""
        fr = cfg["frames"]
        kw.setdefault("first_psn", cfg["qp"]["rx_psn"])
        kw.setdefault("metadata", fr["metadata"])
        return cls(
            addresses or Addresses.mirror(cfg, own_port=HSB_SOURCE_PORT),
            va=fr["va"],
            rkey=fr["rkey"],
            page_bytes=fr["page_bytes"],
            pages=fr["pages"],
            **kw,
        )

    @property
    def max_frame_bytes(self) -> int:
        if not self.metadata:
            return self.page_bytes
        room = self.page_bytes - METADATA_BYTES
        return room - room % PAGE_ALIGN if self.record != "separate" else room

    def _next_psn(self) -> int:
        psn = self.psn
        self.psn = (psn + 1) % (1 << self.psn_bits)
        return psn

    def _write(self, op: str, data: bytes, va: int, psn: int, **extra: int) -> bytes:
        return self.addresses.frame(
            op, data, psn=psn, va=va, rkey=self.rkey, dma_len=len(data), **extra
        )

    def _imm(self, psn: int, page: int) -> int:
        """The end-of-frame immediate. With 8 page bits (HSB IP before 0x2603) bits 11:8 are
        not the page's: set here, so that a receiver reading 12 bits finds another page."""
        imm = imm_encode(psn, page)
        return imm if self.page_bits == 12 else imm | 0xF00

    def frame(self, frame_number: int, content: bytes) -> SentFrame:
        """The packets of one frame written to page ``frame_number % pages``, faults applied."""
        if not 0 < len(content) <= self.max_frame_bytes:
            raise ValueError(f"a frame is 1 to {self.max_frame_bytes} bytes, not {len(content)}")
        page = frame_number % self.pages
        base = self.va + page * self.page_bytes
        chunks = [content[i : i + self.payload] for i in range(0, len(content), self.payload)]
        record = b""
        if self.metadata:
            record = FrameMetadata(
                crc=jamcrc(content) if self.record_crc == "jamcrc" else 0,
                bytes_written=len(content),
                frame_number=frame_number & 0xFFFF,
            ).pack()
        appended = self.metadata and self.record == "appended"
        at_frame_end = self.metadata and self.record != "separate"  # the record's place
        if self.metadata and self.record == "hsb":
            last = len(chunks[-1]) + (-len(content) % PAGE_ALIGN) + METADATA_BYTES
            appended = last <= self.payload
        data: list[bytes] = []
        end: list[bytes] = []
        for k, chunk in enumerate(chunks):
            psn = self._next_psn()
            va = base + k * self.payload
            if k < len(chunks) - 1 or (self.metadata and not appended):
                data.append(self._write("RDMA_WRITE_ONLY", chunk, va, psn))
                continue
            # The last data packet is the end of the frame (never faulted).
            if appended:  # behind a zero pad, the record: page + round_up(frame bytes, 128)
                pad = -len(content) % PAGE_ALIGN
                chunk = chunk + bytes(pad) + self._with_psn(record, psn)
            end.append(
                self._write(
                    "RDMA_WRITE_ONLY_WITH_IMMEDIATE", chunk, va, psn, imm=self._imm(psn, page)
                )
            )
        if self.metadata and not appended:
            psn = self._next_psn()
            at = -(-len(content) // PAGE_ALIGN) * PAGE_ALIGN if at_frame_end else None
            end.append(
                self._write(
                    "RDMA_WRITE_ONLY_WITH_IMMEDIATE",
                    self._with_psn(record, psn),
                    base + (self.page_bytes - METADATA_BYTES if at is None else at),
                    psn,
                    imm=self._imm(psn, page),
                )
            )
        sent = SentFrame(frame_number, page, content, [])
        sent.packets = self._faulted(data, sent)
        if end and self.faults.end_loss and self._rng.random() < self.faults.end_loss:
            sent.end_lost = True
            sent.events.append("lost end")
        else:
            sent.packets += end
        return sent

    @staticmethod
    def _with_psn(record: bytes, psn: int) -> bytes:
        """The record with its psn field (bytes 4..7): the end-of-frame packet's PSN."""
        return record[:4] + psn.to_bytes(4, "big") + record[8:]

    def _faulted(self, packets: list[bytes], sent: SentFrame) -> list[bytes]:
        if not self.faults.any():
            return packets
        f, rng = self.faults, self._rng
        out: list[bytes] = []
        i = 0
        while i < len(packets):
            p = packets[i]
            if rng.random() < f.loss:
                sent.lost += 1
                sent.events.append(f"lost {i}")
            elif rng.random() < f.corrupt:
                out.append(p[:-4] + bytes(b ^ 0xFF for b in p[-4:]))
                sent.corrupted += 1
                sent.lost += 1
                sent.events.append(f"corrupt {i}")
            elif rng.random() < f.reorder and i + 1 < len(packets):
                out += [packets[i + 1], p]
                sent.reordered += 1
                sent.events.append(f"swap {i} {i + 1}")
                i += 1
            else:
                out.append(p)
                if rng.random() < f.duplicate:
                    out.append(p)
                    sent.duplicated += 1
                    sent.events.append(f"dup {i}")
            i += 1
        return out

    def frames(self, count: int, frame_bytes: int, first: int = 0) -> Iterator[SentFrame]:
        """``count`` frames of a counting pattern (a different start per frame)."""
        for n in range(first, first + count):
            pattern = bytes((n * 7 + i) & 0xFF for i in range(256))
            yield self.frame(n, (pattern * (frame_bytes // 256 + 1))[:frame_bytes])
