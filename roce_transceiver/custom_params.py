"""custom.params as the bytes a user's handler gets (docs/handlers.md): byte values, hex
digits, or a mapping packed as a C struct of 4-byte little-endian members. The schema checks a
value with ``check()``; the Transceiver and Verbs mode pack it with ``custom_params_bytes()``.
"""

from __future__ import annotations

import math
import re
import struct
from collections.abc import Mapping
from typing import Any

from roce_transceiver.schema import quote

__all__ = ["MAX_CUSTOM_PARAMS", "ParamsError", "check", "custom_params_bytes", "pack_params"]

#: custom.params at most: constant data for every call, not a table (a table goes in the source).
MAX_CUSTOM_PARAMS = 4096

_MEMBER_NAME = re.compile(r"[A-Za-z_]\w*")
_INT32, _UINT32 = (-(2**31), 2**31 - 1), (0, 2**32 - 1)


class ParamsError(ValueError):
    """A member of a custom.params mapping that cannot be packed: ``member`` is its place under
    custom.params (``threshold``, ``weights[2]``), the message what is wrong."""

    def __init__(self, member: str, message: str) -> None:
        super().__init__(f"{member}: {message}")
        self.member, self.message = member, message


def _kind(v: Any) -> str:
    """What a value is, for messages: 'an int', 'a float', 'a boolean', 'a list' ..."""
    if isinstance(v, bool):
        return "a boolean"
    if isinstance(v, Mapping):
        return "a mapping"
    name = {int: "int", float: "float", str: "string", list: "list", tuple: "list"}.get(
        type(v), type(v).__name__
    )
    return f"{'an' if name[0] in 'aeiou' else 'a'} {name}"


def _pack_scalar(v: Any, member: str) -> bytes:
    """One 4-byte little-endian member: an int as int32 (uint32 above int32's range), a float
    as float32."""
    if isinstance(v, bool):
        raise ParamsError(member, f"{v!r} is a boolean: write 0 or 1 (an int32)")
    if isinstance(v, int):
        if _INT32[0] <= v <= _INT32[1]:
            return struct.pack("<i", v)
        if _UINT32[0] <= v <= _UINT32[1]:
            return struct.pack("<I", v)
        raise ParamsError(member, f"{quote(v)} fits neither int32 nor uint32 (members are 4 bytes)")
    if isinstance(v, float):
        if not math.isfinite(v):
            raise ParamsError(member, f"{v!r}: must be a finite number")
        try:
            return struct.pack("<f", v)
        except OverflowError:
            raise ParamsError(member, f"{v!r} is outside float32's range") from None
    if isinstance(v, str):
        try:
            float(v)
        except ValueError:
            hint = ""
        else:  # YAML 1.1 reads 1e3 (no dot) as a string
            hint = f" (YAML reads {v} as one: write it with a dot, e.g. 1.0e3)"
        raise ParamsError(member, f"{quote(v)} is a string{hint}: members are ints or floats")
    if isinstance(v, Mapping):
        raise ParamsError(member, "a nested mapping: members are ints, floats or lists of them")
    if v is None:
        raise ParamsError(member, "null: a member needs a value, an int or a float")
    raise ParamsError(member, f"{quote(v)} is {_kind(v)}: members are ints or floats")


def _pack_member(v: Any, member: str) -> bytes:
    """A scalar member, or a list of ints / of floats as a contiguous array of them."""
    if not isinstance(v, (list, tuple)):
        return _pack_scalar(v, member)
    if not v:
        raise ParamsError(member, "an empty list: an array needs at least one value")
    out = bytearray()
    for i, item in enumerate(v):
        if isinstance(item, (list, tuple, Mapping)):
            raise ParamsError(
                f"{member}[{i}]", f"{_kind(item)} in a list: an array holds ints or floats"
            )
        if i and (type(item) is not type(v[0])) and not isinstance(item, bool):
            raise ParamsError(
                f"{member}[{i}]",
                f"{quote(item)} is {_kind(item)}, [0] {_kind(v[0])}: a list is all ints "
                "(int32) or all floats (float32)",
            )
        out += _pack_scalar(item, f"{member}[{i}]")
    return bytes(out)


def pack_params(mapping: Mapping[str, Any]) -> bytes:
    """custom.params as a mapping: a C struct of its members in the order written, each 4
    bytes little-endian (no padding): an int is an int32 (a uint32 above int32's range), a
    float a float32, a list of ints or of floats an array of them. ParamsError names the
    member."""
    out = bytearray()
    for name, value in mapping.items():
        if not isinstance(name, str) or _MEMBER_NAME.fullmatch(name) is None:
            raise ParamsError(_key_name(name), "not a member name (a C identifier)")
        out += _pack_member(value, name)
    return bytes(out)


def _key_name(name: Any) -> str:
    return name if isinstance(name, str) and name.isprintable() and len(name) <= 60 else quote(name)


def custom_params_bytes(v: Any) -> bytes:
    """custom.params as the bytes the handler gets: a list of byte values, a string of hex
    digits (whitespace ignored), a mapping packed as a C struct (pack_params) or, from Python,
    bytes. ValueError (ParamsError for a mapping's member) says what is wrong."""
    if isinstance(v, (bytes, bytearray)):
        return bytes(v)
    if isinstance(v, Mapping):
        return pack_params(v)
    if isinstance(v, str):
        digits = "".join(v.split())
        try:
            return bytes.fromhex(digits)
        except ValueError:
            raise ValueError("not hex digits (two a byte, e.g. '03' or 'e8 03')") from None
    out = bytearray()
    for i, b in enumerate(v):
        if not isinstance(b, int) or isinstance(b, bool) or not 0 <= b <= 255:
            raise ValueError(f"entry {i}: {quote(b)} is not a byte value (0 to 255)")
        out.append(b)
    return bytes(out)


def check(v: Any) -> str | None:
    """byte values, hex digits, or a mapping of 4-byte members (docs/handlers.md); at most
    4096 bytes."""
    if isinstance(v, Mapping):
        return None  # _check_together packs it, naming the member and its line
    try:
        n = len(custom_params_bytes(v))
    except ValueError as e:
        return str(e)
    return f"{n} bytes, at most {MAX_CUSTOM_PARAMS}" if n > MAX_CUSTOM_PARAMS else None
