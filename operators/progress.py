"""Progress lines on stderr for long runs: at most one per period, and nothing when it is 0."""

from __future__ import annotations

import sys
import time

__all__ = ["Progress"]


class Progress:
    def __init__(self, what: str, total: int, period_s: float) -> None:
        self.what, self.total, self.period_s = what, total, period_s
        self.start = time.monotonic()
        self._next = self.start + period_s

    def update(self, done: int, extra: str = "") -> None:
        now = time.monotonic()
        if not self.period_s or now < self._next or done >= self.total:
            return
        self._next = now + self.period_s
        rate = done / (now - self.start) if now > self.start else 0.0
        tail = f", {extra}" if extra else ""
        print(
            f"{self.what}: {done}/{self.total} ({100 * done / self.total:.0f} %), "
            f"{rate:,.0f}/s{tail}",
            file=sys.stderr,
            flush=True,
        )
