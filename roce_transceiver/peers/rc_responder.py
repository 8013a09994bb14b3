"""An RC responder for what the transceiver sends: the far side of its requester.

A sensor bridge that takes host-to-bridge messages reliably (HSB 2.7's FPGA), or a controller
that must not lose a correction, is an RC responder for the transceiver's replies: it keeps the
PSN it expects, takes packets in order, acknowledges them, and answers the rest by the rules of
IBA 9.7.5 as the transceiver's requester (``qp.retransmit``) expects them:

- the expected PSN: delivered once, ACKed (every packet, or with ``coalesce`` every n-th);
- a PSN behind it (a packet sent again after a lost ACK): not delivered again, ACKed again at
  the last PSN taken, so the requester learns where the responder stands;
- a PSN ahead of it (a packet lost before it): dropped, and with ``nak_on_gap`` answered with
  one NAK PSN sequence error per gap (the requester sends again from there at once); without,
  dropped silently, as a bridge that only ACKs in order does (the requester's timer resends);
- while not ready (``RcFaults.rnr_every`` / ``rnr_burst``): an RNR NAK at the expected PSN.

:class:`RcFaults` adds what a lossy wire and a busy bridge do: packets lost on the way in,
answers lost on the way out, packets swapped, RNR bursts. Everything is seeded.

It works on frames, not on a socket: :meth:`RcResponder.receive` takes one frame and returns
the payloads it delivers and the answers to send; the caller carries them (a Link, the
loopback's inject()).
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass, field
from typing import Any

from roce_transceiver.peers.link import Addresses
from roce_transceiver.protocol import Packet, parse, psn_add, psn_diff

__all__ = ["RcFaults", "RcResponder", "RcResponderStats", "rnr_syndrome"]

ACK = 0x1F  # an ACK with "invalid credit count", as RoCE NICs send
NAK_PSN_SEQUENCE = 0x60


def rnr_syndrome(timer: int) -> int:
    """The AETH syndrome of an RNR NAK asking for IBA table 45's ``timer`` code."""
    if not 0 <= timer <= 31:
        raise ValueError(f"rnr timer {timer}: a 5-bit code, 0 to 31")
    return 0x20 | timer


@dataclass(frozen=True)
class RcFaults:
    """What goes wrong between the requester and this responder."""

    loss: float = 0.0  # a packet from the requester lost before the responder sees it
    answer_loss: float = 0.0  # an ACK or NAK of ours lost on the way back
    reorder: float = 0.0  # a packet held back and seen after the one behind it
    rnr_every: int = 0  # after this many packets taken, the responder is not ready ...
    rnr_burst: int = 0  # ... for this many packets at the expected PSN (RNR NAKs)
    rnr_timer: int = 1  # the code the RNR NAKs carry (1: 10 us)
    seed: int = 1

    def __post_init__(self) -> None:
        for name in ("loss", "answer_loss", "reorder"):
            v = getattr(self, name)
            if not 0.0 <= v < 1.0:
                raise ValueError(f"{name} {v}: a probability, 0 to below 1")
        if self.rnr_every < 0 or self.rnr_burst < 0:
            raise ValueError("rnr_every and rnr_burst: 0 or more")
        rnr_syndrome(self.rnr_timer)


@dataclass
class RcResponderStats:
    taken: int = 0  # packets delivered, each once
    acks: int = 0
    naks: int = 0  # PSN sequence errors
    rnr_naks: int = 0
    duplicates: int = 0  # behind the expected PSN: re-acknowledged, not delivered
    out_of_order: int = 0  # ahead of the expected PSN: dropped
    lost: int = 0  # dropped by RcFaults.loss
    answers_lost: int = 0
    reordered: int = 0
    not_ours: int = 0  # frames that were no RC request to our QP

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


@dataclass
class RcResponder:
    """The responder's rules over frames; ``expected_psn`` is the requester's first PSN."""

    addresses: Addresses  # our side (the peer's): answers go from it to the transceiver
    expected_psn: int = 0
    faults: RcFaults = field(default_factory=RcFaults)
    nak_on_gap: bool = True
    coalesce: int = 1  # ACK every n-th packet taken (and every packet that asks when 1)
    stats: RcResponderStats = field(default_factory=RcResponderStats)

    def __post_init__(self) -> None:
        if self.coalesce < 1:
            raise ValueError(f"coalesce {self.coalesce}: 1 or more")
        self._rng = random.Random(self.faults.seed)
        self._held: bytes | Packet | None = None  # a packet the reorder fault holds back
        self._nak_sent = False  # one NAK per gap (IBA C9-110)
        self._msn = 0
        self._since_rnr = 0
        self._rnr_left = 0
        self._unacked = 0

    def receive(self, frame: bytes | Packet) -> tuple[list[bytes], list[bytes]]:
        """One frame from the transceiver (its bytes, or as a Link decoded it): (payloads
        delivered in order, answers to send)."""
        delivered: list[bytes] = []
        answers: list[bytes] = []
        f = self.faults
        if f.loss and self._rng.random() < f.loss:
            self.stats.lost += 1
            return delivered, answers
        frames: list[bytes | Packet] = [frame]
        if self._held is not None:  # the held one comes after this one
            frames.append(self._held)
            self._held = None
        elif f.reorder and self._rng.random() < f.reorder:
            self.stats.reordered += 1
            self._held = frame
            return delivered, answers
        for fr in frames:
            self._take(fr, delivered, answers)
        kept = []
        for a in answers:
            if f.answer_loss and self._rng.random() < f.answer_loss:
                self.stats.answers_lost += 1
            else:
                kept.append(a)
        return delivered, kept

    def flush(self) -> tuple[list[bytes], list[bytes]]:
        """A packet the reorder fault still holds, seen now (the wire has gone quiet)."""
        if self._held is None:
            return [], []
        held, self._held = self._held, None
        delivered: list[bytes] = []
        answers: list[bytes] = []
        self._take(held, delivered, answers)
        return delivered, answers

    def _take(self, frame: bytes | Packet, delivered: list[bytes], answers: list[bytes]) -> None:
        if isinstance(frame, Packet):
            p = frame
        else:
            try:
                p = parse(frame)
            except ValueError:
                self.stats.not_ours += 1
                return
        if (
            not p.icrc_ok
            or p.dest_qp != self.addresses.own_qpn
            or p.opcode >> 5 != 0  # RC requests only
            or p.opcode & 0x1F > 0x05  # SENDs (the transceiver's replies and host sends)
        ):
            self.stats.not_ours += 1
            return
        d = psn_diff(p.psn, self.expected_psn)
        if d < 0:  # sent again after a lost ACK: acknowledge where we stand
            self.stats.duplicates += 1
            answers.append(self._answer(ACK, psn_add(self.expected_psn, -1)))
            self.stats.acks += 1
            return
        if d > 0:
            self.stats.out_of_order += 1
            if self.nak_on_gap and not self._nak_sent:
                self._nak_sent = True
                answers.append(self._answer(NAK_PSN_SEQUENCE, self.expected_psn))
                self.stats.naks += 1
            return
        f = self.faults
        if self._rnr_left == 0 and f.rnr_every and f.rnr_burst and self._since_rnr >= f.rnr_every:
            self._rnr_left = f.rnr_burst
            self._since_rnr = 0
        if self._rnr_left:
            self._rnr_left -= 1
            self.stats.rnr_naks += 1
            answers.append(self._answer(rnr_syndrome(f.rnr_timer), p.psn))
            return
        self._nak_sent = False
        self.expected_psn = psn_add(self.expected_psn, 1)
        self._msn = (self._msn + 1) & 0xFFFFFF
        self._since_rnr += 1
        self.stats.taken += 1
        delivered.append(p.payload)
        self._unacked += 1
        if self._unacked >= self.coalesce or (self.coalesce == 1 and p.ack_req):
            self._unacked = 0
            answers.append(self._answer(ACK, p.psn))
            self.stats.acks += 1

    def _answer(self, syndrome: int, psn: int) -> bytes:
        return self.addresses.frame(
            "ACKNOWLEDGE", b"", psn=psn & 0xFFFFFF, syndrome=syndrome, msn=self._msn
        )

    def report(self) -> dict[str, Any]:
        return {"expected_psn": self.expected_psn, **self.stats.as_dict()}
