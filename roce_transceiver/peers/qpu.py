"""The ``qpu`` peer: a quantum controller on the other side of the wire.

It sends requests as SEND Only to the transceiver's QP (syndromes for the ``qec`` handler,
numbered payloads for ``echo``), one at a time or paced at a rate, stamps each, and checks
every answer: corrections against the Python lookup-table decoder, echoes against what was
sent. The report has the round trips (min/p50/p99/max), the throughput, and the requests
that were lost (no answer within the timeout) or answered wrongly.
"""

from __future__ import annotations

import struct
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from roce_transceiver.peers.link import Link
from roce_transceiver.peers.rc_responder import RcResponder
from roce_transceiver.protocol import Packet, psn_add
from roce_transceiver.qec import (
    LookupTableDecoder,
    RotatedSurfaceCode,
    random_syndromes,
    stim_syndromes,
)
from roce_transceiver.stats import Percentiles

__all__ = ["QpuPeer", "QpuReport"]


@dataclass(frozen=True)
class QpuReport:
    sent: int
    received: int
    lost: int  # no answer within the timeout
    wrong: int  # answered, but not with the expected bytes
    bad_icrc: int  # answers whose ICRC did not verify (counted as wrong too)
    elapsed_s: float
    msgs_per_s: float
    rtt_us: Percentiles | None
    samples_us: np.ndarray = field(repr=False, compare=False, default_factory=lambda: np.empty(0))

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["rtt_us"] = self.rtt_us.as_dict() if self.rtt_us else None
        del d["samples_us"]  # the raw round trips: for histograms, not for the report
        return d

    def summary(self) -> str:
        head = f"{self.received}/{self.sent} answered, {self.lost} lost, {self.wrong} wrong"
        if not self.rtt_us:
            return head
        r = self.rtt_us
        return (
            f"{head}; round trip min {r.min:.1f} / p50 {r.p50:.1f} / p99 {r.p99:.1f} / "
            f"max {r.max:.1f} us; {self.msgs_per_s:,.0f} msgs/s"
        )


class QpuPeer:
    """Requests out over ``link``, answers in, checked and timed.

    ``handler`` is what the transceiver runs: ``echo`` (``size``-byte payloads, the request
    number in the first 4 bytes) or ``qec`` (syndromes of a distance-``distance`` code).
    ``first_psn`` is the PSN the transceiver expects first (its ``qp.rx_psn``).
    ``write_to`` = (va, rkey): send each request as an RDMA WRITE Only with Immediate into
    that registered region of the transceiver (the immediate is the request number) instead
    of a SEND Only; the transceiver answers the written bytes the same way.
    ``pool`` = (requests, answers): qec requests to send in turn instead of sampled ones;
    with ``handler`` ``custom`` (a user's handler) the requests to send, which it must have.
    ``rc``: the transceiver sends its answers reliably (``qp.retransmit``): each frame that
    comes goes through this RC responder, which takes an answer once, in order, and whose
    ACKs and NAKs go back over the link (docs/reliable_replies.md); its faults lose and
    reorder answers and push back with RNR NAKs, and every answer must still come once.
    """

    def __init__(
        self,
        link: Link,
        handler: str = "echo",
        size: int = 32,
        distance: int = 3,
        first_psn: int = 0,
        seed: int = 1,
        write_to: tuple[int, int] | None = None,
        syndromes: str = "random",
        pool: tuple[list[bytes], list[bytes]] | None = None,
        rc: RcResponder | None = None,
    ) -> None:
        if handler not in ("echo", "qec", "custom"):
            raise ValueError(f"handler {handler!r}: must be 'echo', 'qec' or 'custom'")
        if handler == "custom" and pool is None:
            raise ValueError("handler 'custom': the peer needs its pool of (requests, answers)")
        if handler == "echo" and not 4 <= size <= 4096:
            raise ValueError(f"size {size}: must be 4 to 4096 bytes")
        self.link = link
        self.rc = rc
        self.handler = handler
        self.size = size
        self.psn = first_psn
        self.write_to = write_to
        if handler == "custom":
            self._requests, self._expected = pool or ([], [])  # pool: checked above
        elif handler == "qec":
            if pool is not None:
                self._requests, self._expected = pool
            elif syndromes == "stim":  # a circuit sampled by stim, answered by the decoder
                code = RotatedSurfaceCode(distance)
                self._requests = stim_syndromes(code, 1024, 0.01, seed)
                self._expected = [LookupTableDecoder(code).decode_packed(r) for r in self._requests]
            elif syndromes == "random":
                self._requests, self._expected = random_syndromes(distance, 1024, seed=seed)
            else:
                raise ValueError(f"syndromes {syndromes!r}: must be 'random' or 'stim'")
        else:
            rng = np.random.default_rng(seed)
            self._requests = [bytes(rng.integers(0, 256, size, dtype=np.uint8))]
            self._expected = []

    def request(self, i: int) -> tuple[bytes, bytes]:
        """Request ``i`` and the answer it must get."""
        if self.handler != "echo":
            k = i % len(self._requests)
            return self._requests[k], self._expected[k]
        payload = struct.pack("<I", i & 0xFFFFFFFF) + self._requests[0][4:]
        return payload, payload

    def _request_frame(self, i: int, payload: bytes) -> bytes:
        a = self.link.addresses
        if self.write_to is None:
            return a.frame("SEND_ONLY", payload, psn=self.psn)
        va, rkey = self.write_to
        return a.frame(
            "RDMA_WRITE_ONLY_WITH_IMMEDIATE",
            payload,
            psn=self.psn,
            va=va,
            rkey=rkey,
            dma_len=len(payload),
            imm=i & 0xFFFFFFFF,
        )

    def _reliable_answer(self, deadline: float) -> tuple[Packet | None, bytes | None]:
        """The next answer the RC responder takes (frames it drops, duplicates, answers sent
        again: each answered and waited past), by ``deadline`` (perf_counter)."""
        assert self.rc is not None
        while (left := deadline - time.perf_counter()) > 0:
            p = self.link.receive(left)
            if p is None:
                break
            got, answers = self.rc.receive(p)
            for a in answers:
                self.link.send(a)
            if got:  # one at a time: the answer to the request just sent
                return p, got[0]
        return None, None

    def run(
        self, count: int, rate: float | None = None, timeout_s: float = 1.0, first: int = 0
    ) -> QpuReport:
        """Send ``count`` requests, numbered from ``first`` (paced at ``rate`` per second when
        given) and wait for each answer up to ``timeout_s``."""
        if count < 1:
            raise ValueError(f"count {count}: must be at least 1")
        rtts: list[float] = []
        lost = wrong = bad_icrc = 0
        interval = 1.0 / rate if rate else 0.0
        start = time.perf_counter()
        next_send = start
        for i in range(first, first + count):
            if interval:
                while time.perf_counter() < next_send:
                    pass  # pacing: a busy wait keeps the send time exact
                next_send += interval
            payload, expected = self.request(i)
            frame = self._request_frame(i, payload)
            self.psn = psn_add(self.psn, 1)
            t0 = time.perf_counter()
            self.link.send(frame)
            if self.rc is None:
                answer = self.link.receive(timeout_s)
                payload = answer.payload if answer is not None and answer.icrc_ok else None
            else:
                answer, payload = self._reliable_answer(t0 + timeout_s)
            t1 = time.perf_counter()
            if answer is None:
                lost += 1
                continue
            rtts.append((t1 - t0) * 1e6)
            if not answer.icrc_ok:
                bad_icrc += 1
                wrong += 1
            elif payload != expected:
                wrong += 1
        elapsed = time.perf_counter() - start
        received = count - lost
        return QpuReport(
            sent=count,
            received=received,
            lost=lost,
            wrong=wrong,
            bad_icrc=bad_icrc,
            elapsed_s=elapsed,
            msgs_per_s=received / elapsed if elapsed > 0 else 0.0,
            rtt_us=Percentiles.from_samples(rtts, unit="us") if rtts else None,
            samples_us=np.asarray(rtts, dtype=np.float64),
        )
