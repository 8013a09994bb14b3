"""Checkers of the ``messages`` port's records: echoes, QEC corrections, majority votes.

:class:`EchoCheckerOp`: every reply equals its request. :class:`MajorityVoteCheckerOp`: every
reply is the repetition-code correction a Python majority vote gives (the reply format of
examples/handlers/majority_vote.cu). :class:`QecCheckerOp`: every correction
equals the lookup-table decoder's (the table the loop was given, decoded again in Python), and
the first ``sample`` are decoded by pymatching too: a correction that differs from matching's
by a logical operator is a *logical disagreement* (both fix the syndrome; they differ in what
they leave behind); a weight above matching's would mean the table is not minimum weight.
"""

from __future__ import annotations

from typing import Any

from holoscan.core import Fragment, Operator, OperatorSpec

from roce_transceiver.operators.app_config import QEC_CHECK
from roce_transceiver.operators.params import operator_parameters
from roce_transceiver.qec import (
    LookupTableDecoder,
    RotatedSurfaceCode,
    pymatching_replies,
    unpack_correction,
)
from roce_transceiver.repetition import majority_correction
from roce_transceiver.transceiver import Completion

__all__ = ["EchoCheckerOp", "MajorityVoteCheckerOp", "QecCheckerOp"]


class _MessageChecker(Operator):
    def __init__(self, fragment: Fragment, *args: Any, **kwargs: Any) -> None:
        self.records = 0
        self.wrong = 0
        self.no_reply = 0  # the handler sent none, or it was dropped
        self.first_wrong: str | None = None
        super().__init__(fragment, *args, **kwargs)

    def setup(self, spec: OperatorSpec) -> None:
        spec.input("messages")

    def compute(self, op_input: Any, op_output: Any, context: Any) -> None:
        records: list[Completion] = op_input.receive("messages")
        for c in records:
            self.records += 1
            if c.reply_len < 0 or c.reply_dropped:
                self.no_reply += 1
            elif (problem := self.check(c)) is not None:
                self.wrong += 1
                self.first_wrong = self.first_wrong or f"psn {c.psn}: {problem}"

    def check(self, c: Completion) -> str | None:
        raise NotImplementedError

    @property
    def ok(self) -> bool:
        return self.records > 0 and self.wrong == 0 and self.no_reply == 0


class EchoCheckerOp(_MessageChecker):
    """Every record's reply is its request."""

    def check(self, c: Completion) -> str | None:
        if c.reply != c.request:
            return f"reply {c.reply[:16].hex()} is not the request {c.request[:16].hex()}"
        return None


class MajorityVoteCheckerOp(_MessageChecker):
    """Every record's reply is the majority-vote correction of its request
    (:func:`majority_correction`, a code of ``distance`` copies)."""

    def __init__(self, fragment: Fragment, *args: Any, distance: int, **kwargs: Any) -> None:
        if distance < 1 or distance % 2 == 0:
            raise ValueError(f"MajorityVoteCheckerOp: distance {distance} must be odd")
        self.distance = distance
        super().__init__(fragment, *args, **kwargs)

    def check(self, c: Completion) -> str | None:
        if len(c.request) < (self.distance + 7) // 8:
            return f"request {c.request.hex()}: shorter than {self.distance} copies"
        want = majority_correction(c.request, self.distance)
        if c.reply != want:
            return f"correction {c.reply.hex()} of {c.request.hex()}, the majority's {want.hex()}"
        return None


class QecCheckerOp(_MessageChecker):
    """Corrections against the table of ``distance`` (all) and pymatching (the first
    ``sample``: the ``qec_check`` keys, validated)."""

    def __init__(self, fragment: Fragment, *args: Any, distance: int = 3, **params: Any) -> None:
        p, holoscan = operator_parameters(fragment, QEC_CHECK, params, "QecCheckerOp")
        self.code = RotatedSurfaceCode(distance)
        self.decoder = LookupTableDecoder(self.code)
        self.sample: int = p["sample"]
        self._sampled: list[tuple[bytes, bytes]] = []
        self.matching_checked = 0
        self.logical_disagreements = 0
        self.heavier_than_matching = 0
        super().__init__(fragment, *args, **holoscan)

    def check(self, c: Completion) -> str | None:
        want = self.decoder.decode_packed(c.request)
        if c.reply != want:
            return f"correction {c.reply.hex()}, the table says {want.hex()}"
        if len(self._sampled) < self.sample:
            self._sampled.append((c.request, c.reply))
        return None

    def stop(self) -> None:
        if not self._sampled:
            return
        requests = [r for r, _ in self._sampled]
        reference = pymatching_replies(self.code, requests)
        for (_, ours), theirs in zip(self._sampled, reference, strict=True):
            ox, oz = unpack_correction(ours)
            tx, tz = unpack_correction(theirs)
            if int(((ox ^ tx) @ self.code.lz) % 2) or int(((oz ^ tz) @ self.code.lx) % 2):
                self.logical_disagreements += 1
            if int(ox.sum()) > int(tx.sum()) or int(oz.sum()) > int(tz.sum()):
                self.heavier_than_matching += 1
        self.matching_checked = len(self._sampled)

    @property
    def ok(self) -> bool:
        return super().ok and self.heavier_than_matching == 0
