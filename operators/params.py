"""Operator parameters the Holoscan way, checked by the project's schema.

A Holoscan app reads its YAML with ``app.config(file)`` and gives each operator its section,
``RoceTransceiverOp(self, name="roce", **self.kwargs("roce"))``; or it passes Python keyword
arguments. Either way the operator validates what it got against its part of the schema
(operators/app_config.py) and a bad value is a ``ConfigError`` naming the key. When the values
are a section of the fragment's config file, the error names that file, the section's dotted
key and the line, as the project's apps do: :func:`locate` finds the section.

Holoscan converts YAML scalars on its own (a quoted ``"123"`` comes back as the int 123), so the
section is found by its keys and by values as Holoscan would read them, and then validated as
the file writes it (our loader, exact types and lines). Values the caller changed after
``kwargs()`` match no section: they are validated as given, with no file to name.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from roce_transceiver.schema import ConfigError, Section, load_yaml_with_lines, validate

__all__ = ["Located", "config_file", "locate", "operator_parameters", "validated"]


@dataclass(frozen=True)
class Located:
    """A section of a config file: where it is, and its data as the file writes it (lines)."""

    source: str
    key: str  # dotted, from the top of the file
    data: Mapping[str, Any]

    @property
    def prefix(self) -> str:
        return f"{self.key}."


def config_file(fragment: Any) -> str | None:
    """The file ``fragment.config(...)`` loaded, or None (none, or not a Holoscan fragment)."""
    try:
        path = fragment.config().config_file
    except (AttributeError, RuntimeError, TypeError):
        return None
    return path if isinstance(path, str) and path and os.path.isfile(path) else None


_loaded: dict[tuple[str, int, int], Mapping[str, Any]] = {}


def _load(path: str) -> Mapping[str, Any]:
    st = os.stat(path)
    key = (os.path.realpath(path), st.st_mtime_ns, st.st_size)
    if key not in _loaded:
        _loaded.clear()  # one file at a time is what a graph's composition reads
        _loaded[key] = load_yaml_with_lines(Path(path))
    return _loaded[key]


def _scalar_as_holoscan(value: Any) -> Any:
    """A string as Holoscan's YAML reading may return it (a number or a bool if it reads as
    one); anything else as it is."""
    if not isinstance(value, str):
        return value
    low = value.strip().lower()
    if low in ("true", "false"):
        return low == "true"
    try:
        return int(low, 0)
    except ValueError:
        pass
    try:
        f = float(low)
    except ValueError:
        return value
    return f if math.isfinite(f) else value


def _same(given: Any, written: Any) -> bool:
    """Whether ``given`` (from Holoscan's kwargs, or the caller) is what the file writes."""
    if isinstance(written, Mapping):
        return (
            isinstance(given, Mapping)
            and set(given) == set(written)
            and all(_same(given[k], written[k]) for k in written)
        )
    if isinstance(written, (list, tuple)):
        return (
            isinstance(given, (list, tuple))
            and len(given) == len(written)
            and all(_same(g, w) for g, w in zip(given, written, strict=True))
        )
    if isinstance(given, bool) or isinstance(written, bool):
        w = _scalar_as_holoscan(written) if isinstance(written, str) else written
        return type(given) is type(w) and given == w
    if given == written:
        return True
    return isinstance(written, str) and _scalar_as_holoscan(written) == given


def locate(fragment: Any, params: Mapping[str, Any], name: str | None = None) -> Located | None:
    """The section of ``fragment``'s config file that ``params`` are (Holoscan's ``kwargs()`` of
    it), or None. Top-level sections are tried, then those one level down; several that match
    are told apart by ``name`` (the operator's, as Holoscan's examples name sections)."""
    path = config_file(fragment)
    if path is None or not params:
        return None
    try:
        data = _load(path)
    except (ConfigError, OSError):
        return None  # Holoscan read it; ours refuses it: validate the values as given
    found: list[tuple[str, Mapping[str, Any]]] = []
    for key, value in data.items():
        if isinstance(value, Mapping):
            if _same(params, value):
                found.append((str(key), value))
            for sub, inner in value.items():
                if isinstance(inner, Mapping) and _same(params, inner):
                    found.append((f"{key}.{sub}", inner))
    if len(found) > 1 and name is not None:
        found = [f for f in found if f[0].split(".")[-1] == name] or found
    if len(found) != 1:
        return None
    return Located(path, found[0][0], found[0][1])


def validated(
    fragment: Any,
    section: Section,
    params: Mapping[str, Any],
    *,
    name: str | None,
    what: str,
) -> tuple[dict[str, Any], Located | None]:
    """``params`` checked against ``section``, defaults filled in, and the section of the
    fragment's config file they are (None: not one). Errors name the key, and the file and line
    where ``params`` are such a section; else the operator (``what``) in place of the file."""
    where = locate(fragment, params, name)
    if where is not None:
        return validate(section, where.data, prefix=where.prefix, source=where.source), where
    return validate(section, dict(params), source=what), None


def operator_parameters(
    fragment: Any, section: Section, params: dict[str, Any], cls: str
) -> tuple[dict[str, Any], dict[str, Any]]:
    """An operator's keyword arguments split: ``(its parameters validated against section,
    what goes to Holoscan's Operator)``; ``name`` is Holoscan's, the rest are ours (an unknown
    one is an error, never passed on)."""
    name = params.pop("name", None)
    what = f"{cls} {name!r}" if name else cls
    values, _ = validated(fragment, section, params, name=name, what=what)
    return values, ({"name": name} if name is not None else {})
