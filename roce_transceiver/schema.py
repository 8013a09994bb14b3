"""A small declarative schema for YAML/dict configuration.

Each key is declared once (type, default, allowed values or range, one line
of documentation); validation walks the user's mapping and raises
:class:`ConfigError` naming the dotted key, and the file and line when the
mapping came from YAML. The same declarations render the configuration
reference (docs/configuration.md).
"""

from __future__ import annotations

import math
import reprlib
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
    "given_by_flag",
    "leaves",
    "line_of",
    "load_yaml_with_lines",
    "parse_yaml_value",
    "quote",
    "render_markdown",
    "validate",
    "with_overrides",
]


class ConfigError(ValueError):
    """A configuration value that cannot be used; the message names key, file and line.
    ``line`` is the file's line of the key, or, for a value a command-line flag gave on top of
    the file, that flag (``--set app.count=0``, see :func:`with_overrides`): the message then
    names the flag where it would name file and line, since the file's line says otherwise."""

    def __init__(
        self, message: str, *, key: str, source: str | None = None, line: int | str | None = None
    ) -> None:
        if isinstance(line, str):
            where = f"{line}: "
        else:
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


#: A configuration file is a few KiB; past this it is not one (``/dev/zero``, a capture passed
#: by mistake), and reading on would only grow memory.
MAX_FILE_BYTES = 1 << 20
#: Nesting of mappings and lists. The deepest key of the schema is 3 levels down
#: (``transceiver.socket.capture``, ``regions[0].va``); PyYAML composes and constructs
#: recursively, so a file nested thousands deep would end in RecursionError.
MAX_DEPTH = 32
#: What a document may grow to once its aliases are expanded, counted as one per node plus the
#: characters of every scalar: an alias repeats all it names, so nine lines of aliases can name
#: a billion strings ("billion laughs"). The same bound as the file's size: a document may not
#: expand to more than a file may hold.
MAX_EXPANDED = MAX_FILE_BYTES

#: How PyYAML's constructors fail on a value that does not fit its tag (a 5000-digit int,
#: ``!!bool maybe``, ``!!timestamp 2020-13-45``).
_UNREADABLE = (ValueError, OverflowError, TypeError, KeyError, AttributeError, IndexError)
_STR_TAG = "tag:yaml.org,2002:str"
_MERGE_TAG = "tag:yaml.org,2002:merge"


class _Quoter(reprlib.Repr):
    """reprlib with LinedDict shown as the dict it is (reprlib falls back to the full
    ``repr()`` for types it does not know, which is what must not happen)."""

    def repr_LinedDict(self, x: Any, level: int) -> str:  # reprlib looks methods up by type name
        return self.repr_dict(x, level)


_QUOTER = _Quoter()
_QUOTER.maxlevel = 3
_QUOTER.maxdict = _QUOTER.maxlist = _QUOTER.maxtuple = _QUOTER.maxset = 4
_QUOTER.maxstring = _QUOTER.maxlong = _QUOTER.maxother = 40


def quote(value: Any, limit: int = 100) -> str:
    """``repr(value)`` cut to about ``limit`` characters whatever ``value`` holds: a list that
    aliases expanded to a billion strings is quoted in constant time and memory."""
    try:
        text = _QUOTER.repr(value)
    except ValueError:  # an int past Python's digit limit for str()
        text = f"<int of {value.bit_length()} bits>" if isinstance(value, int) else "<?>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _clip(text: str, limit: int = 160) -> str:
    """A message from elsewhere (PyYAML, int()), on one line and cut to ``limit``."""
    text = text[: limit * 2]
    if not text.isprintable():
        text = text.encode("unicode_escape").decode("ascii")
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _key_text(key: Any) -> str:
    """A key as it goes into a message: itself when short and printable, else quoted."""
    return key if isinstance(key, str) and key.isprintable() and len(key) <= 60 else quote(key)


class _Refused(Exception):
    """The loader refuses the document: what, the dotted key it is at, and its line."""

    def __init__(self, message: str, key: str, line: int | None) -> None:
        super().__init__(message)
        self.message, self.key, self.line = message, key, line


# The dotted key of a node as a linked chain (parent chain, part): one tuple per node
# rather than a copy of the whole path, so memory stays linear in the file.
_Chain = tuple[Any, str] | None


def _dotted(chain: _Chain, under: str = "") -> str:
    """The dotted key of a chain (``regions[0].va``), under ``under`` (a command line's
    ``--set KEY``); cut in the middle past 100 characters (a path 32 levels deep)."""
    parts: list[str] = []
    while chain is not None:
        chain, part = chain
        parts.append(part)
    text = under
    for part in reversed(parts):
        text += part if part.startswith("[") or not text else f".{part}"
    if len(text) > 100:
        text = f"{text[:60]}...{text[-37:]}"
    return text or "(top)"


class _LineLoader(yaml.SafeLoader):
    """SafeLoader that remembers the line of every mapping key and refuses, while it
    composes, what would exhaust the stack or memory: nesting past MAX_DEPTH, a document
    whose aliases expand past MAX_EXPANDED, keys that are not strings, duplicate keys."""

    keep_lines = True

    def __init__(self, stream: str, under: str = "") -> None:
        super().__init__(stream)
        self.under = under  # the dotted key the document is the value of ("" for a file)
        self._depth = 0
        self._chain: _Chain = None

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node:
        event = self.peek_event()
        line = event.start_mark.line + 1
        outer = self._chain
        if isinstance(parent, yaml.MappingNode) and isinstance(index, yaml.ScalarNode):
            self._chain = (outer, _key_text(index.value))
        elif isinstance(parent, yaml.SequenceNode):
            self._chain = (outer, f"[{index}]")
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise _Refused(
                    f"nested deeper than {MAX_DEPTH} levels of mappings and lists",
                    _dotted(self._chain, self.under),
                    line,
                )
            node: yaml.Node = super().compose_node(parent, index)
            self._weigh(node, line, alias=isinstance(event, yaml.AliasEvent))
            if isinstance(parent, yaml.MappingNode) and index is None:
                self._check_key(node, line)
            if isinstance(node, yaml.MappingNode) and not isinstance(event, yaml.AliasEvent):
                node.rt_chain = self._chain  # for the constructor's messages
                self._check_duplicates(node)
        finally:
            self._depth -= 1
            self._chain = outer
        return node

    def _weigh(self, node: yaml.Node, line: int, *, alias: bool) -> None:
        """The node's size with every alias expanded; aliases reuse their anchor's."""
        if alias:
            if not hasattr(node, "rt_weight"):
                raise _Refused(
                    "an alias inside what its anchor names (a recursive structure)",
                    _dotted(self._chain, self.under),
                    line,
                )
            weight = node.rt_weight
        elif isinstance(node, yaml.ScalarNode):
            weight = 1 + len(node.value)
        elif isinstance(node, yaml.SequenceNode):
            weight = 1 + sum(item.rt_weight for item in node.value)
        else:
            weight = 1 + sum(k.rt_weight + v.rt_weight for k, v in node.value)
        if weight > MAX_EXPANDED:
            raise _Refused(
                f"expands to more than {MAX_EXPANDED} nodes and characters once its aliases "
                "are expanded (an alias repeats everything it names)",
                _dotted(self._chain, self.under),
                line,
            )
        node.rt_weight = weight

    def _check_key(self, node: yaml.Node, line: int) -> None:
        if isinstance(node, yaml.ScalarNode) and node.tag == _STR_TAG:
            return
        if node.tag == _MERGE_TAG:
            problem = "merge keys (<<) are not supported: write the keys out"
        elif isinstance(node, yaml.ScalarNode):
            kind = node.tag.rsplit(":", 1)[-1]
            problem = f"a key must be a string, not {kind} ({_key_text(node.value)})"
        else:
            kind = "a list" if isinstance(node, yaml.SequenceNode) else "a mapping"
            problem = f"a key must be a string, not {kind}"
        raise _Refused(problem, _dotted(self._chain, self.under), line)

    def _check_duplicates(self, node: yaml.MappingNode) -> None:
        seen: set[str] = set()
        for key_node, _ in node.value:
            if key_node.value in seen:
                key = _key_text(key_node.value)
                raise _Refused(
                    "duplicate key",
                    _dotted((self._chain, key), self.under),
                    key_node.start_mark.line + 1,
                )
            seen.add(key_node.value)

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep=deep)
        except _UNREADABLE as e:
            tag = node.tag.rsplit(":", 1)[-1]
            what = quote(node.value, 60) if isinstance(node, yaml.ScalarNode) else node.id
            # KeyError and AttributeError (!!bool maybe, !!timestamp x) say nothing useful.
            why = f": {_clip(str(e))}" if isinstance(e, (ValueError, OverflowError)) else ""
            raise _Refused(
                f"{what} cannot be read as {tag}{why}", "", node.start_mark.line + 1
            ) from None


class _ValueLoader(_LineLoader):
    """The same limits for a value given on the command line (``--set KEY=VALUE``): plain
    dicts, since lines of the flag's text would be taken for lines of the file."""

    keep_lines = False


def _construct_mapping(loader: _LineLoader, node: yaml.Node) -> dict[str, Any]:
    if not isinstance(node, yaml.MappingNode):  # !!map on a list or a scalar
        raise _Refused(f"!!map on a {node.id}", "", node.start_mark.line + 1)
    mapping = LinedDict() if loader.keep_lines else {}
    chain = getattr(node, "rt_chain", None)
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        try:
            mapping[key] = loader.construct_object(value_node, deep=True)
        except _Refused as e:
            if not e.key:  # the innermost mapping names it
                e.key = _dotted((chain, _key_text(key)), loader.under)
            raise
        if isinstance(mapping, LinedDict):
            mapping.lines[key] = key_node.start_mark.line + 1
    return mapping


_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


class LinedDict(dict):  # type: ignore[type-arg]
    """A dict that also knows the YAML line of each key, or the flag that gave it (a str:
    :func:`with_overrides`)."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: dict[Any, int | str] = {}


def _read_text(p: Path) -> str:
    """The file's text: at most MAX_FILE_BYTES, UTF-8, or a ConfigError saying where not."""
    try:
        with p.open("rb") as f:
            raw = f.read(MAX_FILE_BYTES + 1)
    except OSError as e:
        raise ConfigError(f"cannot read: {e.strerror}", key="(file)", source=str(p)) from None
    except ValueError as e:  # a NUL byte in the path
        raise ConfigError(f"cannot read: {e}", key="(file)", source=quote(str(p))) from None
    if len(raw) > MAX_FILE_BYTES:
        raise ConfigError(
            f"larger than {MAX_FILE_BYTES} bytes: not a configuration file",
            key="(file)",
            source=str(p),
        )
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(
            f"not UTF-8: byte 0x{raw[e.start]:02x} at offset {e.start} ({e.reason})",
            key="(file)",
            source=str(p),
            line=raw.count(b"\n", 0, e.start) + 1,
        ) from None


def _char(c: int | bytes) -> str:
    return f"0x{c:02x}" if isinstance(c, int) else quote(c)


def _parse(
    text: str, loader: type[_LineLoader], source: str | None, key: str, *, under: str = ""
) -> Any:
    """One YAML document from ``text`` under the loader's limits; every refusal and YAML
    error a ConfigError with the line (``key`` names the document when no key inside does;
    ``under`` is the dotted key the document is the value of)."""
    try:
        parser = loader(text, under)  # a SafeLoader subclass: no arbitrary objects
        try:
            return parser.get_single_data()
        finally:
            parser.dispose()
    except _Refused as e:
        raise ConfigError(e.message, key=e.key or key, source=source, line=e.line) from None
    except yaml.reader.ReaderError as e:  # a character YAML does not allow (NUL, controls)
        line = text.count("\n", 0, e.position) + 1 if isinstance(e.position, int) else None
        raise ConfigError(
            f"not valid YAML: character {_char(e.character)} at character {e.position}: {e.reason}",
            key=key,
            source=source,
            line=line,
        ) from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        problem = getattr(e, "problem", None) or str(e)
        raise ConfigError(
            f"not valid YAML: {_clip(str(problem))}",
            key=key,
            source=source,
            line=mark.line + 1 if mark else None,
        ) from None
    except ValueError as e:  # a value outside any mapping, e.g. a 5000-digit int
        raise ConfigError(f"cannot be read: {_clip(str(e))}", key=key, source=source) from None


def load_yaml_with_lines(path: str | Path) -> dict[str, Any]:
    """Parse a YAML file; mappings remember their keys' lines for error messages. The file
    is refused (ConfigError naming file, line and key) when it is not UTF-8, larger than
    MAX_FILE_BYTES, nested deeper than MAX_DEPTH, expands past MAX_EXPANDED through its
    aliases, or has a key that is not a string."""
    p = Path(path)
    data = _parse(_read_text(p), _LineLoader, str(p), "(file)")
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError("the top level must be a mapping", key="(file)", source=str(p), line=1)
    return data


def parse_yaml_value(text: str, *, key: str) -> Any:
    """A value given as YAML on the command line (``--set KEY=VALUE``), under the same limits
    as a file; errors name ``key``."""
    if len(text) > MAX_FILE_BYTES:
        raise ConfigError(f"longer than {MAX_FILE_BYTES} characters", key=key)
    return _parse(text, _ValueLoader, None, key, under=key)


def _copy(data: Mapping[str, Any]) -> LinedDict:
    """A deep copy that keeps the YAML line numbers of every mapping."""
    out = LinedDict()
    out.update({k: _copy(v) if isinstance(v, Mapping) else v for k, v in data.items()})
    out.lines.update(getattr(data, "lines", {}))
    return out


def with_overrides(
    data: Mapping[str, Any], overrides: Mapping[str, Any], flags: Mapping[str, str] | None = None
) -> LinedDict:
    """A copy of ``data`` (its line numbers kept) with dotted keys set on top (command-line
    flags: ``{"queues.rx_depth": 64}``); sections a key names are made where missing. Each key
    set (and each key of a mapping set) is located by its flag, ``flags[dotted]``
    (``"--set queues.rx_depth=64"``; default ``"override queues.rx_depth=64"``), in place of
    the file's line, which holds the value it replaced: errors name the flag (ConfigError), and
    :func:`given_by_flag` tells a path given there, which is the working directory's."""
    merged = _copy(data)
    for dotted, value in overrides.items():
        label = (flags or {}).get(dotted) or f"override {dotted}={quote(value, 60)}"
        node = merged
        *parents, leaf = dotted.split(".")
        for i, part in enumerate(parents):
            if node.get(part) is None:
                node[part] = LinedDict()
                node.lines[part] = label
            elif not isinstance(node[part], Mapping):
                where = ".".join(parents[: i + 1])
                raise ConfigError(
                    f"is {quote(node[part])}, not a mapping: cannot set {dotted}",
                    key=where,
                    line=label,
                )
            node = node[part]
        node[leaf] = _given(value, label)
        node.lines[leaf] = label
    return merged


def _given(value: Any, label: str) -> Any:
    """A value a flag gave: a mapping's keys (all the way down) located by the flag."""
    if not isinstance(value, Mapping):
        return value
    out = LinedDict()
    for k, v in value.items():
        out[k] = _given(v, label)
        out.lines[k] = label
    return out


def given_by_flag(data: Mapping[str, Any], dotted: str) -> bool:
    """Whether a dotted key's value came from a flag (:func:`with_overrides`), not the file."""
    return isinstance(line_of(data, dotted), str)


def line_of(data: Mapping[str, Any], dotted: str) -> int | str | None:
    """The YAML line of a dotted key, when the mapping came from a file; the flag that gave
    it, when one did (:func:`with_overrides`)."""
    *parents, leaf = dotted.split(".")
    node: Any = data
    for part in parents:
        node = node.get(part) if isinstance(node, Mapping) else None
    return getattr(node, "lines", {}).get(leaf) if isinstance(node, Mapping) else None


def _type_name(t: type | tuple[type, ...]) -> str:
    types = t if isinstance(t, tuple) else (t,)
    return " or ".join(x.__name__ for x in types)


def _check_leaf(f: Field, value: Any, key: str, source: str | None, line: int | str | None) -> Any:
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
            try:
                value = float(value)
            except OverflowError:
                raise fail(f"{quote(value)} is too large for a float") from None
        else:
            raise fail(f"must be {_type_name(f.type)}, not {type(value).__name__} ({quote(value)})")
    # nan compares false with every bound, so a range check alone would let it through.
    if isinstance(value, float) and not math.isfinite(value):
        raise fail(f"must be a finite number, not {value!r}")
    if isinstance(value, str) and "\0" in value:
        # The C++ side takes the string up to its first NUL: a path would be cut short.
        raise fail(f"{quote(value)} holds a NUL byte (at index {value.index(chr(0))})")
    if f.choices is not None and value not in f.choices:
        allowed = ", ".join(repr(c) for c in f.choices)
        raise fail(f"{quote(value)} is not one of {allowed}")
    if f.minimum is not None and value < f.minimum:
        raise fail(f"{quote(value)} is below the minimum {f.minimum!r}")
    if f.maximum is not None and value > f.maximum:
        raise fail(f"{quote(value)} is above the maximum {f.maximum!r}")
    if f.check is not None and (problem := f.check(value)) is not None:
        raise fail(f"{quote(value)}: {problem}")
    return value


def leaves(section: Section, prefix: str = "") -> dict[str, Field]:
    """Every leaf under ``section`` by its dotted key, in declaration order."""
    out: dict[str, Field] = {}
    for key, spec in section.keys.items():
        dotted = f"{prefix}{key}"
        out |= leaves(spec, f"{dotted}.") if isinstance(spec, Section) else {dotted: spec}
    return out


def validate(
    section: Section, data: Mapping[str, Any] | None, *, prefix: str = "", source: str | None = None
) -> dict[str, Any]:
    """Defaults filled in, every key checked; unknown keys are errors naming their line."""
    data = data or {}
    if not isinstance(data, Mapping):
        raise ConfigError(
            f"must be a mapping, not {type(data).__name__}", key=prefix or "(top)", source=source
        )
    lines: dict[Any, int | str] = getattr(data, "lines", {})
    out: dict[str, Any] = {}
    for key in data:
        if key not in section.keys:
            known = ", ".join(section.keys)
            raise ConfigError(
                f"unknown key (known here: {known})",
                key=f"{prefix}{_key_text(key)}",
                source=source,
                line=lines.get(key),
            )
    for key, spec in section.keys.items():
        dotted = f"{prefix}{key}"
        if isinstance(spec, Section):
            sub = data.get(key)
            if sub is not None and not isinstance(sub, Mapping):
                raise ConfigError(
                    f"must be a mapping of keys ({', '.join(spec.keys)}), not {quote(sub)}",
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
