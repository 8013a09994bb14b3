"""StatsSinkOp: keeps the latest counters from RoceTransceiverOp's ``stats`` port."""

from __future__ import annotations

from typing import Any

from holoscan.core import Fragment, Operator, OperatorSpec

__all__ = ["StatsSinkOp"]


class StatsSinkOp(Operator):
    def __init__(self, fragment: Fragment, *args: Any, **kwargs: Any) -> None:
        self.latest: dict[str, int] = {}
        self.updates = 0
        super().__init__(fragment, *args, **kwargs)

    def setup(self, spec: OperatorSpec) -> None:
        spec.input("stats")

    def compute(self, op_input: Any, op_output: Any, context: Any) -> None:
        self.latest = op_input.receive("stats")
        self.updates += 1

    @property
    def final(self) -> bool:
        return bool(self.latest.get("final"))
