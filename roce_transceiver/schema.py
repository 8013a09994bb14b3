"""A small declarative schema for YAML/dict configuration.

Each key is declared once (type, default, allowed values or range, one line
of documentation); validation walks the user's mapping and raises
:class:`ConfigError` naming the dotted key, and the file and line when the
mapping came from YAML. The same declarations render the configuration
reference (docs/configuration.md).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

__all__ = [
    "ConfigError",
    "Field",
    "LinedDict",
    "Section",
    "line_of",
    "load_yaml_with_lines",
    "render_markdown",
    "validate",
    "with_overrides",
]


class ConfigError(ValueError):
    """A configuration value that cannot be used; the message names key, file and line."""

    def __init__(
        self, message: str, *, key: str, source: str | None = None, line: int | None = None
    ) -> None:
        where = f"{source}:{line}: " if source and line else f"{source}: " if source else ""
        super().__init__(f"{where}{key}: {message}")
        self.key = key
        self.source = source
        self.line = line


@dataclass(frozen=True)
class Field:
    """One leaf key."""

    type: type | tuple[type, ...]
    default: Any
    doc: str
    choices: tuple[Any, ...] | None = None
    minimum: float | None = None
    maximum: float | None = None
    check: Callable[[Any], str | None] | None = None  # returns a problem, or None
    nullable: bool = False


@dataclass(frozen=True)
class Section:
    """A mapping of keys to Fields or nested Sections."""

    doc: str
    keys: Mapping[str, Field | Section] = field(default_factory=dict)


class _LineLoader(yaml.SafeLoader):
    """SafeLoader that remembers the line of every mapping key."""


class _DuplicateKeyError(Exception):
    def __init__(self, key: str, line: int) -> None:
        self.key, self.line = key, line


def _construct_mapping(loader: _LineLoader, node: yaml.MappingNode) -> dict[str, Any]:
    mapping = LinedDict()
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        if key in mapping:
            raise _DuplicateKeyError(str(key), key_node.start_mark.line + 1)
        mapping[key] = loader.construct_object(value_node, deep=True)
        mapping.lines[key] = key_node.start_mark.line + 1
    return mapping


_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


class LinedDict(dict):  # type: ignore[type-arg]
    """A dict that also knows the YAML line of each key."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: dict[Any, int] = {}


def load_yaml_with_lines(path: str | Path) -> dict[str, Any]:
    """Parse a YAML file; mappings remember their keys' lines for error messages."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as e:
        raise ConfigError(f"cannot read: {e.strerror}", key="(file)", source=str(p)) from None
    try:
        data = yaml.load(text, Loader=_LineLoader)  # a SafeLoader subclass: no arbitrary objects
    except _DuplicateKeyError as e:
        raise ConfigError("duplicate key", key=e.key, source=str(p), line=e.line) from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        raise ConfigError(
            f"not valid YAML: {getattr(e, 'problem', e)}",
            key="(file)",
            source=str(p),
            line=mark.line + 1 if mark else None,
        ) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError("the top level must be a mapping", key="(file)", source=str(p), line=1)
    return data


def _copy(data: Mapping[str, Any]) -> LinedDict:
    """A deep copy that keeps the YAML line numbers of every mapping."""
    out = LinedDict()
    out.update({k: _copy(v) if isinstance(v, Mapping) else v for k, v in data.items()})
    out.lines.update(getattr(data, "lines", {}))
    return out


def with_overrides(data: Mapping[str, Any], overrides: Mapping[str, Any]) -> LinedDict:
    """A copy of ``data`` (its line numbers kept) with dotted keys set on top (command-line
    flags: ``{"queues.rx_depth": 64}``); sections a key names are made where missing."""
    merged = _copy(data)
    for dotted, value in overrides.items():
        node = merged
        *parents, leaf = dotted.split(".")
        for i, part in enumerate(parents):
            if node.get(part) is None:
                node[part] = LinedDict()
            elif not isinstance(node[part], Mapping):
                where = ".".join(parents[: i + 1])
                raise ConfigError(
                    f"is {node[part]!r}, not a mapping: cannot set {dotted}", key=where
                )
            node = node[part]
        node[leaf] = value
    return merged


def line_of(data: Mapping[str, Any], dotted: str) -> int | None:
    """The YAML line of a dotted key, when the mapping came from a file."""
    *parents, leaf = dotted.split(".")
    node: Any = data
    for part in parents:
        node = node.get(part) if isinstance(node, Mapping) else None
    return getattr(node, "lines", {}).get(leaf) if isinstance(node, Mapping) else None


def _type_name(t: type | tuple[type, ...]) -> str:
    types = t if isinstance(t, tuple) else (t,)
    return " or ".join(x.__name__ for x in types)


def _check_leaf(f: Field, value: Any, key: str, source: str | None, line: int | None) -> Any:
    def fail(msg: str) -> ConfigError:
        return ConfigError(msg, key=key, source=source, line=line)

    if value is None:
        if f.nullable:
            return None
        raise fail(f"must be {_type_name(f.type)}, not null")
    types = f.type if isinstance(f.type, tuple) else (f.type,)
    if isinstance(value, bool) and bool not in types:
        raise fail(f"must be {_type_name(f.type)}, not a boolean ({value!r})")
    if not isinstance(value, types):
        if float in types and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        else:
            raise fail(f"must be {_type_name(f.type)}, not {type(value).__name__} ({value!r})")
    if f.choices is not None and value not in f.choices:
        allowed = ", ".join(repr(c) for c in f.choices)
        raise fail(f"{value!r} is not one of {allowed}")
    if f.minimum is not None and value < f.minimum:
        raise fail(f"{value!r} is below the minimum {f.minimum!r}")
    if f.maximum is not None and value > f.maximum:
        raise fail(f"{value!r} is above the maximum {f.maximum!r}")
    if f.check is not None and (problem := f.check(value)) is not None:
        raise fail(f"{value!r}: {problem}")
    return value


def validate(
    section: Section, data: Mapping[str, Any] | None, *, prefix: str = "", source: str | None = None
) -> dict[str, Any]:
    """Defaults filled in, every key checked; unknown keys are errors naming their line."""
    data = data or {}
    if not isinstance(data, Mapping):
        raise ConfigError(
            f"must be a mapping, not {type(data).__name__}", key=prefix or "(top)", source=source
        )
    lines: dict[Any, int] = getattr(data, "lines", {})
    out: dict[str, Any] = {}
    for key in data:
        if key not in section.keys:
            known = ", ".join(section.keys)
            raise ConfigError(
                f"unknown key (known here: {known})",
                key=f"{prefix}{key}",
                source=source,
                line=lines.get(key),
            )
    for key, spec in section.keys.items():
        dotted = f"{prefix}{key}"
        if isinstance(spec, Section):
            sub = data.get(key)
            if sub is not None and not isinstance(sub, Mapping):
                raise ConfigError(
                    f"must be a mapping of keys ({', '.join(spec.keys)}), not {sub!r}",
                    key=dotted,
                    source=source,
                    line=lines.get(key),
                )
            out[key] = validate(spec, sub, prefix=f"{dotted}.", source=source)
        elif key in data:
            out[key] = _check_leaf(spec, data[key], dotted, source, lines.get(key))
        else:
            out[key] = spec.default
    return out


def _number(v: float | None) -> str:
    if v is None:
        return ""
    if isinstance(v, int):
        return f"{v:#x}" if v >= 0x1000 else str(v)
    return f"{v:g}"


def _allowed(f: Field) -> str:
    parts = []
    if f.choices is not None:
        parts.append(" / ".join(f"`{c}`" for c in f.choices))
    if f.minimum is not None or f.maximum is not None:
        parts.append(f"{_number(f.minimum)} .. {_number(f.maximum)}")
    if f.check is not None and f.check.__doc__:
        parts.append(f.check.__doc__.strip().rstrip("."))
    if f.nullable:
        parts.append("or `null`")
    return "; ".join(parts)


def render_markdown(section: Section, prefix: str = "") -> str:
    """One table row per key: dotted name, type, default, allowed values, meaning."""
    rows: list[str] = []

    def walk(sec: Section, pre: str) -> None:
        for key, spec in sec.keys.items():
            if isinstance(spec, Section):
                walk(spec, f"{pre}{key}.")
                continue
            default = "`null`" if spec.default is None else f"`{spec.default!r}`"
            rows.append(
                f"| `{pre}{key}` | {_type_name(spec.type)} | {default} | {_allowed(spec)} "
                f"| {spec.doc} |"
            )

    walk(section, prefix)
    head = "| key | type | default | allowed | meaning |\n|---|---|---|---|---|\n"
    return head + "\n".join(rows) + "\n"
