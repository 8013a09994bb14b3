"""Argument checks for the public Python API, before anything reaches ``_core``.

pybind11 answers a value it cannot convert with a TypeError that lists C++ signatures, or a
``RuntimeError: Unable to cast ...``, and a C++ index past a buffer with an IndexError; none
names the argument. These checks do, in one shape: ``where: name=value: what was expected``,
a TypeError for a value of the wrong type, a ValueError for one out of range.
"""

from __future__ import annotations

import math
import operator
from typing import Any

__all__ = ["check_bool", "check_buffer", "check_buffers", "check_int", "check_real"]


def check_int(
    where: str, name: str, value: Any, lo: int | None = None, hi: int | None = None
) -> int:
    """``value`` as a Python int in ``lo..hi`` (None: no bound on that side; with both None,
    only the type is checked and the range is left to the core, which names the field's
    width); anything with ``__index__`` counts (numpy integers too), floats and strings do
    not."""
    try:
        number = operator.index(value)
    except TypeError:
        raise TypeError(
            f"{where}: {name}={value!r}: expected an int, got {type(value).__name__}"
        ) from None
    if lo is not None and hi is None and number < lo:
        raise ValueError(f"{where}: {name}={number}: must be at least {lo}")
    if lo is not None and hi is not None and not lo <= number <= hi:
        raise ValueError(f"{where}: {name}={number}: out of range {lo}..{hi}")
    return number


def check_real(
    where: str,
    name: str,
    value: Any,
    lo: float,
    hi: float | None = None,
    *,
    lo_open: bool = False,
) -> float:
    """``value`` as a finite float in ``lo..hi`` (``lo_open``: more than ``lo``); NaN and the
    infinities are refused, since no wait, rate or duration of this package means them."""
    number: float | None
    try:
        number = float(value) if not isinstance(value, (str, bytes, bool)) else None
    except OverflowError:  # an int too large for a float: out of range, not of the wrong type
        number = math.inf
    except (TypeError, ValueError):
        number = None
    if number is None:
        raise TypeError(f"{where}: {name}={value!r}: expected a number, got {type(value).__name__}")
    below = number <= lo if lo_open else number < lo
    if not math.isfinite(number) or below or (hi is not None and number > hi):
        raise ValueError(f"{where}: {name}={value!r}: must be {_span(lo, hi, lo_open)}")
    return number


def _span(lo: float, hi: float | None, lo_open: bool) -> str:
    if hi is None:
        return f"finite and more than {lo:g}" if lo_open else f"finite and at least {lo:g}"
    return f"more than {lo:g} and at most {hi:g}" if lo_open else f"{lo:g} .. {hi:g}"


def check_bool(where: str, name: str, value: Any) -> bool:
    """``value`` as a bool: True, False, or an integer 0 or 1."""
    if isinstance(value, bool):
        return value
    dtype = getattr(value, "dtype", None)
    if getattr(dtype, "kind", None) == "b" and getattr(value, "ndim", 1) == 0:
        return bool(value)  # a numpy bool, which has no __index__
    try:
        number = operator.index(value)
    except TypeError:
        raise TypeError(
            f"{where}: {name}={value!r}: expected a bool, got {type(value).__name__}"
        ) from None
    if number not in (0, 1):
        raise ValueError(f"{where}: {name}={number}: expected a bool (True, False, 0 or 1)")
    return bool(number)


def check_buffer(where: str, name: str, value: Any) -> memoryview:
    """``value`` as a contiguous memoryview: bytes, bytearray, memoryview or any other buffer
    (a numpy array); a str, an int (``bytes(5)`` is five zeros) or None is a TypeError."""
    if isinstance(value, (str, int)) or value is None:
        raise TypeError(
            f"{where}: {name}: expected a bytes-like object, got {type(value).__name__}"
        )
    try:
        view = memoryview(value)
    except TypeError:
        raise TypeError(
            f"{where}: {name}: expected a bytes-like object, got {type(value).__name__}"
        ) from None
    # The core reads a buffer as one run of bytes: a strided view (a numpy slice with a step)
    # is copied into logical order first, or the core would read the bytes between.
    return view if view.c_contiguous else memoryview(view.tobytes())


def check_buffers(where: str, name: str, value: Any) -> list[bytes] | None:
    """``value``, a sequence of bytes-like objects, as a new list of bytes (None stays None);
    a single bytes or str where the list belongs is a TypeError, not a list of its items."""
    if value is None:
        return None
    if isinstance(value, (bytes, bytearray, memoryview, str)) or not hasattr(value, "__iter__"):
        raise TypeError(
            f"{where}: {name}: expected a list of bytes-like objects, got {type(value).__name__}"
        )
    return [bytes(check_buffer(where, f"{name}[{i}]", item)) for i, item in enumerate(value)]
