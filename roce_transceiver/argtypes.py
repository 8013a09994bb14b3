"""argparse types for the CLI's numbers: each parses its text and checks its range, so a bad
value is argparse's usual one-line error naming the option, exit status 2:
``roce-transceiver: error: argument --loss: 2: must be 0 to 1``.

``integer(lo, hi)`` and ``real(lo, hi)`` make a type; the presets below are the kinds of value
the commands take. Every float is finite: NaN passes no comparison, so it would slip through a
``value <= 0`` check and then end a loop at once or never, and an infinite wait is Ctrl-C's job.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

__all__ = [
    "COUNT",
    "FRACTION",
    "RATE",
    "RATE_OR_MAX",
    "SECONDS",
    "SECONDS_OR_ZERO",
    "U32_COUNT",
    "integer",
    "integer_list",
    "rate_or_max",
    "real",
    "uint",
]


def integer(
    lo: int,
    hi: int | None = None,
    *,
    multiple_of: int = 1,
    hex_ok: bool = False,
    hex_range: bool = False,
) -> Callable[[str], int]:
    """A type for an integer in ``lo..hi`` (``hi`` None: no upper bound), a multiple of
    ``multiple_of``; ``hex_ok``: 0x hex too; ``hex_range``: the error gives ``hi`` in hex."""

    def parse(text: str) -> int:
        try:
            value = int(text, 0 if hex_ok else 10)
        except ValueError:
            kind = "an integer (decimal or 0x hex)" if hex_ok else "an integer"
            raise argparse.ArgumentTypeError(f"{text!r} is not {kind}") from None
        if hi is None and value < lo:
            raise argparse.ArgumentTypeError(f"{text}: must be at least {lo}")
        if hi is not None and not lo <= value <= hi:
            top = f"{hi:#x}" if hex_range else str(hi)
            raise argparse.ArgumentTypeError(f"{text}: out of range {lo}..{top}")
        if value % multiple_of:
            raise argparse.ArgumentTypeError(f"{text}: must be a multiple of {multiple_of}")
        return value

    parse.__name__ = "integer"  # argparse names the type in some messages
    return parse


def integer_list(lo: int, hi: int) -> Callable[[str], tuple[int, ...]]:
    """A type for a comma-separated list of integers, each in ``lo..hi``."""
    one = integer(lo, hi)

    def parse(text: str) -> tuple[int, ...]:
        return tuple(one(part) for part in text.split(","))

    parse.__name__ = "integer list"
    return parse


def uint(bits: int) -> Callable[[str], int]:
    """A type for a wire field of ``bits`` bits: 0 to 2**bits-1, decimal or 0x hex."""
    return integer(0, (1 << bits) - 1, hex_ok=True, hex_range=True)


def real(lo: float, hi: float | None = None, *, lo_open: bool = False) -> Callable[[str], float]:
    """A type for a finite number in ``lo..hi`` (``lo_open``: more than ``lo``; ``hi`` None:
    no upper bound)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"{text}: not a finite number")
        below = value <= lo if lo_open else value < lo
        if below or (hi is not None and value > hi):
            raise argparse.ArgumentTypeError(f"{text}: must be {_span(lo, hi, lo_open)}")
        return value

    parse.__name__ = "number"
    return parse


def rate_or_max(hi: float) -> Callable[[str], float | None]:
    """A type for a rate: ``max`` (as fast as it goes: None) or a number of things per second,
    more than 0 and at most ``hi``."""
    number = real(0, hi, lo_open=True)

    def parse(text: str) -> float | None:
        if text.strip().lower() == "max":
            return None
        try:
            return number(text)
        except argparse.ArgumentTypeError as e:
            if "is not a number" in str(e):
                raise argparse.ArgumentTypeError(
                    f"{text!r} is not a number of messages/s or 'max'"
                ) from None
            raise

    parse.__name__ = "rate"
    return parse


def _span(lo: float, hi: float | None, lo_open: bool) -> str:
    if hi is None:
        return f"more than {lo:g}" if lo_open else f"at least {lo:g}"
    return f"more than {lo:g} and at most {hi:g}" if lo_open else f"{lo:g} to {hi:g}"


#: Things to send, run or wait for: at least 1.
COUNT = integer(1)
#: A count the far end or a peer keeps in 32 bits.
U32_COUNT = integer(1, 2**32 - 1)
#: A duration or a timeout: more than 0 seconds.
SECONDS = real(0, lo_open=True)
#: A duration that may be none at all (``--linger``).
SECONDS_OR_ZERO = real(0)
#: Something per second: more than 0.
RATE = real(0, lo_open=True)
#: The loopback far end's offered rate: ``max``, or up to 1e9 a second (it paces in whole ns).
RATE_OR_MAX = rate_or_max(1e9)
#: A probability or a fraction: 0 to 1.
FRACTION = real(0, 1)
