"""The ``sensor`` peer: a Holoscan Sensor Bridge style camera on the other side of the wire.

It turns frames into the packets an HSB FPGA sends (DESIGN.md section 3): UC RDMA WRITE Only
packets of ``payload`` bytes, each with its own RETH into the frame's page, and an end of frame
that is a WRITE Only with Immediate (immediate = psn[19:0] << 12 | page): with metadata, a
separate packet carrying the 128-byte record (written at the page's last 128 bytes); without,
the last data packet itself. Faults can be injected at given rates (loss, reordering,
duplication, corrupt ICRC), and every injection is recorded so a test knows what to expect.
"""

from __future__ import annotations

import random
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field

from roce_transceiver.hsb import METADATA_BYTES, FrameMetadata, imm_encode
from roce_transceiver.peers.link import Addresses
from roce_transceiver.protocol import psn_add

__all__ = ["Faults", "Sensor", "SentFrame"]


@dataclass(frozen=True)
class Faults:
    """Rates (0..1) per data packet; the end-of-frame packet is never faulted."""

    loss: float = 0.0
    reorder: float = 0.0  # swapped with the next data packet
    duplicate: float = 0.0
    corrupt: float = 0.0  # ICRC flipped: the engine must drop it

    def any(self) -> bool:
        return any((self.loss, self.reorder, self.duplicate, self.corrupt))


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
        faults: Faults | None = None,
        seed: int = 1,
    ) -> None:
        if addresses.transport != "UC":
            raise ValueError("an HSB sensor speaks UC (qp.transport: UC)")
        if payload < 4 or payload % 4:
            raise ValueError(f"payload {payload}: a positive multiple of 4 bytes")
        self.addresses = addresses
        self.va, self.rkey = va, rkey
        self.page_bytes, self.pages = page_bytes, pages
        self.payload = payload
        self.metadata = metadata
        self.psn = first_psn
        self.faults = faults or Faults()
        self._rng = random.Random(seed)

    @property
    def max_frame_bytes(self) -> int:
        return self.page_bytes - (METADATA_BYTES if self.metadata else 0)

    def _next_psn(self) -> int:
        psn = self.psn
        self.psn = psn_add(psn, 1)
        return psn

    def _write(self, op: str, data: bytes, va: int, psn: int, **extra: int) -> bytes:
        return self.addresses.frame(
            op, data, psn=psn, va=va, rkey=self.rkey, dma_len=len(data), **extra
        )

    def frame(self, frame_number: int, content: bytes) -> SentFrame:
        """The packets of one frame written to page ``frame_number % pages``, faults applied."""
        if not 0 < len(content) <= self.max_frame_bytes:
            raise ValueError(f"a frame is 1 to {self.max_frame_bytes} bytes, not {len(content)}")
        page = frame_number % self.pages
        base = self.va + page * self.page_bytes
        chunks = [content[i : i + self.payload] for i in range(0, len(content), self.payload)]
        data: list[bytes] = []
        for k, chunk in enumerate(chunks):
            psn = self._next_psn()
            last = k == len(chunks) - 1 and not self.metadata
            if last:
                imm = imm_encode(psn, page)
                data.append(
                    self._write(
                        "RDMA_WRITE_ONLY_WITH_IMMEDIATE",
                        chunk,
                        base + k * self.payload,
                        psn,
                        imm=imm,
                    )
                )
            else:
                data.append(self._write("RDMA_WRITE_ONLY", chunk, base + k * self.payload, psn))
        end: list[bytes] = []
        if self.metadata:
            psn = self._next_psn()
            record = FrameMetadata(
                psn=psn,
                crc32=zlib.crc32(content),
                bytes_written=len(content),
                frame_number=frame_number,
            ).pack()
            end.append(
                self._write(
                    "RDMA_WRITE_ONLY_WITH_IMMEDIATE",
                    record,
                    base + self.page_bytes - METADATA_BYTES,
                    psn,
                    imm=imm_encode(psn, page),
                )
            )
        elif data:  # the last data packet is the end of the frame: never faulted
            end.append(data.pop())
        sent = SentFrame(frame_number, page, content, [])
        sent.packets = self._faulted(data, sent) + end
        return sent

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
