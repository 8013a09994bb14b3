"""Hostile configuration files: each refused as one ConfigError naming file, line and key, in
bounded time and memory, and through the CLI as one line on stderr with exit status 2.

Goal: what a hostile or careless user can put in a YAML file (bytes that are not UTF-8,
nesting thousands deep, a list as a key, an alias bomb, NaN, a NUL byte in a path, a core
the process cannot run on) never ends in a traceback, a hang or unbounded memory, and never
passes silently. Both loaders are checked, the transceiver's (``load_config``) and the apps'
(``load_app_config``): they share schema.py's YAML loading, so both get the limits.

Oracles: the line and byte offset the test itself put the bad input at; the schema's own
leaves (every float key, every string key), so a key added later is covered; tracemalloc for
memory; ``/proc/self/task/*/status`` (the kernel's view) for where the cpu executor's thread
runs.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import CLI
from hypothesis import given, settings
from hypothesis import strategies as st

from roce_transceiver import config as config_module
from roce_transceiver.config import SCHEMA, ConfigError, load_config
from roce_transceiver.operators.app_config import APP_SCHEMA, load_app_config
from roce_transceiver.schema import (
    MAX_DEPTH,
    MAX_FILE_BYTES,
    leaves,
    load_yaml_with_lines,
    parse_yaml_value,
    quote,
)
from roce_transceiver.transceiver import Transceiver, TransceiverError

LOADERS = {"load_config": load_config, "load_app_config": load_app_config}


def write(tmp_path: Path, content: str | bytes, name: str = "hostile.yaml") -> Path:
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    return path


def refused(load: Any, path: Path) -> ConfigError:
    with pytest.raises(ConfigError) as e:
        load(path)
    message = str(e.value)
    assert "\n" not in message and len(message) < 400, message
    assert message.startswith(str(path)), message
    return e.value


LOAD_IN_CHILD = """
import json, sys, time, tracemalloc
from roce_transceiver.operators.app_config import load_app_config
from roce_transceiver.config import ConfigError, load_config
load = {"load_config": load_config, "load_app_config": load_app_config}[sys.argv[1]]
tracemalloc.start()
began = time.monotonic()
try:
    load(sys.argv[2])
    out = {"error": None}
except ConfigError as e:
    out = {"error": str(e), "key": e.key, "line": e.line}
out["elapsed"] = time.monotonic() - began
out["peak"] = tracemalloc.get_traced_memory()[1]
print(json.dumps(out))
"""


def load_in_child(loader: str, path: str, cwd: Path) -> dict[str, Any]:
    """``loader(path)`` in a child process held to 2 GiB of address space and 60 s (what
    used to grow without bound fails there, not in the test runner): the ConfigError it
    raised, its time and its tracemalloc peak."""
    proc = subprocess.run(
        [CLI[0], "-c", LOAD_IN_CHILD, loader, path],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=cwd,
        preexec_fn=_limits,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    result: dict[str, Any] = json.loads(proc.stdout)
    assert result["error"] is not None and "\n" not in result["error"], result
    return result


def nested(dotted: str, value: Any) -> dict[str, Any]:
    *parents, leaf = dotted.split(".")
    out: dict[str, Any] = {leaf: value}
    for part in reversed(parents):
        out = {part: out}
    return out


def alias_bomb(levels: int, *, mapping: bool = False, section: str = "") -> str:
    """Billion laughs under ``regions`` (in ``section``, if one is named): each level repeats
    the one before nine times, so the last names 9**levels strings in ``levels + 1`` lines."""
    if mapping:
        first = "{" + ", ".join(f"k{i}: lol" for i in range(9)) + "}"
        more = lambda i: "{" + ", ".join(f"k{j}: *l{i - 1}" for j in range(9)) + "}"  # noqa: E731
    else:
        first = "[" + ", ".join(["lol"] * 9) + "]"
        more = lambda i: "[" + ", ".join([f"*l{i - 1}"] * 9) + "]"  # noqa: E731
    lines = ["regions:", f"  - &l0 {first}"]
    lines += [f"  - &l{i} {more(i)}" for i in range(1, levels + 1)]
    if section:
        lines = [f"{section}:"] + [f"  {line}" for line in lines]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- not UTF-8


@pytest.mark.parametrize("loader", LOADERS)
def test_a_file_that_is_not_utf8_names_the_offset_and_line_of_the_first_bad_byte(tmp_path, loader):
    raw = b"# caf\xc3\xa9 is UTF-8\nexecutor: cpu\nhandler: ech\xff\n"
    e = refused(LOADERS[loader], write(tmp_path, raw))
    assert (e.key, e.line) == ("(file)", 3)
    offset = raw.index(b"\xff")
    assert f"not UTF-8: byte 0xff at offset {offset}" in str(e)


def test_a_character_yaml_refuses_is_one_line_with_its_line(tmp_path):
    # PyYAML's own message for a control character spans two lines and has no line number.
    e = refused(load_config, write(tmp_path, "executor: cpu\nhandler: e\x01cho\n"))
    assert e.line == 2 and "character 0x01" in str(e)


def test_a_file_larger_than_any_configuration_is_refused_without_reading_it_all(tmp_path):
    e = refused(load_config, write(tmp_path, "#" * (MAX_FILE_BYTES + 1)))
    assert f"larger than {MAX_FILE_BYTES} bytes" in str(e)


def test_an_endless_file_is_refused_in_bounded_memory(tmp_path):
    result = load_in_child("load_config", "/dev/zero", tmp_path)
    assert "larger than" in result["error"] and result["peak"] < 4 * MAX_FILE_BYTES


def test_a_path_with_a_nul_byte_is_a_config_error():
    with pytest.raises(ConfigError, match="cannot read"):
        load_config("configs/a\0b.yaml")


# ---------------------------------------------------------------- nesting


@pytest.mark.parametrize("loader", LOADERS)
@pytest.mark.parametrize(
    "value",
    ["[" * 5000 + "]" * 5000, "{k: " * 5000 + "}" * 5000],
    ids=["lists", "mappings"],
)
def test_nesting_5000_deep_is_refused_naming_key_and_line(tmp_path, loader, value):
    e = refused(LOADERS[loader], write(tmp_path, f"executor: cpu\nregions:\n  {value}\n"))
    assert e.line == 3 and e.key.startswith("regions"), str(e)
    assert f"nested deeper than {MAX_DEPTH} levels" in str(e)


def test_nesting_up_to_the_limit_loads_one_more_is_refused(tmp_path):
    # The top-level mapping is level 1, the list under ``a`` level 2, ...
    at_limit = write(tmp_path, "a: " + "[" * (MAX_DEPTH - 1) + "]" * (MAX_DEPTH - 1) + "\n")
    data: Any = load_yaml_with_lines(at_limit)["a"]
    for _ in range(MAX_DEPTH - 2):
        (data,) = data
    assert data == []
    over = write(tmp_path, "a: " + "[" * MAX_DEPTH + "]" * MAX_DEPTH + "\n", "over.yaml")
    with pytest.raises(ConfigError, match="nested deeper"):
        load_yaml_with_lines(over)


# ---------------------------------------------------------------- keys


@pytest.mark.parametrize("loader", LOADERS)
@pytest.mark.parametrize(
    ("text", "key", "line", "says"),
    [
        ("executor: cpu\n? [1, 2]\n: x\n", "(top)", 2, "not a list"),
        ("queues:\n  rx_depth: 64\n  [1]: 64\n", "queues", 3, "not a list"),
        ("queues:\n  {a: 1}: 64\n", "queues", 2, "not a mapping"),
        ("qp:\n  1: 64\n", "qp", 2, "not int (1)"),
        ("qp:\n  on: 64\n", "qp", 2, "not bool"),
        ("qp:\n  ~: 64\n", "qp", 2, "not null"),
        ("base: &b {qpn: 5}\nqp:\n  <<: *b\n", "qp", 3, "merge keys"),
    ],
    ids=["list_top", "list_nested", "mapping", "int", "bool", "null", "merge"],
)
def test_a_key_that_is_not_a_string_is_refused_naming_where(
    tmp_path, loader, text, key, line, says
):
    e = refused(LOADERS[loader], write(tmp_path, text))
    assert (e.key, e.line) == (key, line), str(e)
    assert says in str(e)


def test_a_duplicate_key_is_named_by_its_dotted_key(tmp_path):
    e = refused(load_config, write(tmp_path, "qp:\n  qpn: 5\n  qpn: 6\n"))
    assert (e.key, e.line) == ("qp.qpn", 3) and "duplicate key" in str(e)


def test_an_unknown_key_that_is_huge_or_unprintable_is_quoted_short(tmp_path):
    # An explicit key (``? ...``): YAML allows an implicit one 1024 characters at most.
    e = refused(load_config, write(tmp_path, f'? "bad\\nkey{"x" * 10_000}"\n: 1\n'))
    assert e.key.startswith("'bad\\nkey") and len(e.key) <= 100, e.key


def test_app_name_of_the_wrong_type_is_a_config_error(tmp_path):
    e = refused(load_app_config, write(tmp_path, "app:\n  name: [1]\n"))
    assert (e.key, e.line) == ("app.name", 2) and "must be str, not list" in str(e)


# ---------------------------------------------------------------- aliases


@pytest.mark.parametrize("loader", LOADERS)
@pytest.mark.parametrize("mapping", [False, True], ids=["lists", "mappings"])
def test_an_alias_bomb_is_refused_quickly_in_bounded_memory(tmp_path, loader, mapping):
    # Under transceiver.regions, a key both loaders know: 9**9 strings once expanded.
    path = write(tmp_path, alias_bomb(9, mapping=mapping, section="transceiver"))
    result = load_in_child(loader, str(path), tmp_path)
    assert result["error"].startswith(f"{path}:"), result
    assert "once its aliases are expanded" in result["error"]
    assert result["key"].startswith("transceiver.regions[") and result["line"], result
    assert result["elapsed"] < 5.0 and result["peak"] < 16 << 20, result


def test_a_large_aliased_value_within_the_budget_is_quoted_short(tmp_path):
    # Nine regions, some 9**5 strings: under the expansion limit, so the schema sees it; its
    # message quotes it in a few dozen characters (it used to repr() the whole expansion).
    path = write(tmp_path, alias_bomb(4) + "  - *l3\n" * 4)
    e = refused(load_config, path)
    assert e.key == "regions" and "at most 8 regions" in str(e)


def test_a_recursive_alias_is_refused(tmp_path):
    e = refused(load_config, write(tmp_path, "regions: &r [1, *r]\n"))
    assert e.key == "regions[1]" and "recursive" in str(e)


def test_quote_is_bounded_whatever_the_value_holds():
    level: list[Any] = ["lol"] * 9
    for _ in range(8):
        level = [level] * 9  # 9**9 strings, shared
    began = time.monotonic()
    text = quote(level)
    assert len(text) <= 100 and time.monotonic() - began < 1.0
    assert len(quote("x" * 10**7)) <= 100 and len(quote(10**5000)) <= 100


# ---------------------------------------------------------------- numbers


FLOATS = [(f"transceiver.{k}", f) for k, f in leaves(SCHEMA).items() if f.type is float]
FLOATS += [(k, f) for k, f in leaves(APP_SCHEMA).items() if f.type is float]


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
@pytest.mark.parametrize("key", [k for k, _ in FLOATS])
def test_every_float_key_refuses_non_finite_values(key, value):
    with pytest.raises(ConfigError) as e:
        load_app_config(nested(key, value))
    assert e.value.key == key and "must be a finite number" in str(e.value)


@pytest.mark.parametrize("text", [".nan", ".inf", "-.inf", ".NaN"])
def test_stop_timeout_nan_from_yaml_names_file_line_and_key(tmp_path, text):
    e = refused(load_config, write(tmp_path, f"executor: cpu\nstop_timeout_s: {text}\n"))
    assert (e.key, e.line) == ("stop_timeout_s", 2)


def test_an_int_too_large_for_a_float_key_is_a_config_error():
    with pytest.raises(ConfigError, match=r"stop_timeout_s: .* too large"):
        load_config({"stop_timeout_s": 10**400})


def test_an_int_of_5000_digits_names_its_key_and_line(tmp_path):
    e = refused(load_config, write(tmp_path, f"qp:\n  transport: RC\n  qpn: {'1' * 5000}\n"))
    assert (e.key, e.line) == ("qp.qpn", 3) and "cannot be read as int" in str(e)


@pytest.mark.parametrize(
    ("config", "key"),
    [
        ({"doca": {"gid_index": 256}}, "doca.gid_index"),
        ({"handler": "frames", "qp": {"transport": "UC"}, "frames": {"va": 2**64}}, "frames.va"),
        (
            {"handler": "frames", "qp": {"transport": "UC"}, "frames": {"va": 2**64 - 4096}},
            "frames.va",
        ),
        ({"regions": [{"va": 2**64 - 8, "rkey": 1, "length": 64}]}, "regions"),
    ],
    ids=["gid_index_above_8_bits", "frames_va_above_64_bits", "frames_past_2_64", "region_wraps"],
)
def test_addresses_and_indexes_past_their_width_are_refused(config, key):
    # frames.va 2**64 used to reach pybind11 ("Unable to cast Python instance").
    with pytest.raises(ConfigError) as e:
        load_config(config)
    assert e.value.key == key


# ---------------------------------------------------------------- NUL bytes


STRINGS = [f"transceiver.{k}" for k, f in leaves(SCHEMA).items() if f.type is str]
STRINGS += [k for k, f in leaves(APP_SCHEMA).items() if f.type is str]


@pytest.mark.parametrize("key", STRINGS)
def test_every_string_key_refuses_a_nul_byte(key):
    # The C++ core and the OS take a string up to its first NUL: "/tmp/cap\0ture" would
    # write /tmp/cap.
    with pytest.raises(ConfigError) as e:
        load_app_config(nested(key, "/tmp/cap\0ture"))
    assert e.value.key == key and "NUL byte (at index 8)" in str(e.value)


def test_a_nul_escape_in_a_yaml_path_names_file_line_and_key(tmp_path):
    text = 'executor: cpu\nsocket:\n  mode: udp\n  capture: "/tmp/cap\\0ture.pcap"\n'
    e = refused(load_config, write(tmp_path, text))
    assert (e.key, e.line) == ("socket.capture", 4)


def test_a_command_line_value_gets_the_files_limits():
    with pytest.raises(ConfigError, match=r"^--set x\[0\]\[0\].*: nested deeper"):
        parse_yaml_value("[" * 5000 + "]" * 5000, key="--set x")
    with pytest.raises(ConfigError, match=r"--set x: not valid YAML"):
        parse_yaml_value("{a: [", key="--set x")
    value = parse_yaml_value("{rx_depth: 64}", key="--set queues")
    assert value == {"rx_depth": 64} and not hasattr(value, "lines")


# ---------------------------------------------------------------- cpu_core


def test_cpu_core_outside_the_affinity_mask_is_refused():
    allowed = os.sched_getaffinity(0)
    beyond = max(allowed) + 1
    with pytest.raises(ConfigError) as e:
        load_config({"cpu_core": beyond})
    assert e.value.key == "cpu_core" and "not a core this process may run on" in str(e.value)


def test_cpu_core_excluded_by_taskset_is_refused_in_that_process(tmp_path):
    allowed = sorted(os.sched_getaffinity(0))
    if len(allowed) < 2:
        pytest.skip(f"needs two usable cores to leave one out; this process has {allowed}")
    code = (
        "import os; from roce_transceiver.config import load_config, ConfigError\n"
        f"os.sched_setaffinity(0, {{{allowed[0]}}})\n"
        f"try: load_config({{'cpu_core': {allowed[1]}}})\n"
        "except ConfigError as e: print(e)\n"
    )
    proc = subprocess.run(
        [CLI[0], "-c", code], capture_output=True, text=True, timeout=60, check=False, cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == (
        f"cpu_core: {allowed[1]}: not a core this process may run on (cores {allowed[0]})"
    )


def _thread_cores() -> dict[int, str]:
    """Each thread of this process: its Cpus_allowed_list, as the kernel reports it."""
    out = {}
    for task in Path("/proc/self/task").iterdir():
        for line in (task / "status").read_text().splitlines():
            if line.startswith("Cpus_allowed_list:"):
                out[int(task.name)] = line.split(":", 1)[1].strip()
    return out


def test_cpu_core_pins_the_loop_thread_there():
    core = max(os.sched_getaffinity(0))
    before = set(_thread_cores())
    with Transceiver({"executor": "cpu", "cpu_core": core}) as t:
        new = {tid: cores for tid, cores in _thread_cores().items() if tid not in before}
        assert str(core) in new.values(), new
        r = t.roundtrip(count=4, size=16, timeout=5.0)
        assert (r.status, r.received, r.wrong) == ("done", 4, 0), r


def test_a_failed_pinning_is_an_error_at_start_naming_the_core(monkeypatch):
    # The mask check passed (here: faked, as when a cpuset shrinks between load and start),
    # but the kernel refuses the pinning: start() says so; the loop does not run elsewhere.
    missing = os.cpu_count() or 1  # a core this machine does not have
    monkeypatch.setattr(config_module, "allowed_cores", lambda: set(range(missing + 1)))
    t = Transceiver({"executor": "cpu", "cpu_core": missing})
    with pytest.raises(TransceiverError, match=rf"start\(\): cpu_core={missing}: cannot pin"):
        t.start()
    assert not t.running
    t.stop()


def test_cpu_core_past_cpu_setsize_is_refused_before_anything_runs(monkeypatch):
    # CPU_SET on a core past the set would write out of bounds.
    monkeypatch.setattr(config_module, "allowed_cores", lambda: {5000})
    with pytest.raises(TransceiverError, match=r"cpu_core=5000: must be below \d+"):
        Transceiver({"executor": "cpu", "cpu_core": 5000})


# ---------------------------------------------------------------- the CLI


def _limits() -> None:
    # Address space, not resident size: an alias bomb that expands hits it at once.
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
    # The stack Holoscan asks for (as `make demo` sets it), or it warns on stderr when an
    # app is imported.
    _, hard = resource.getrlimit(resource.RLIMIT_STACK)
    if hard == resource.RLIM_INFINITY or hard >= 32 << 20:
        resource.setrlimit(resource.RLIMIT_STACK, (32 << 20, hard))


def cli_refuses(argv: list[str], cwd: Path, *fragments: str, limit_s: float = 30) -> str:
    """``roce-transceiver ARGV`` ends within ``limit_s`` and 2 GiB of address space, with
    status 2 and one line on stderr holding ``fragments``."""
    began = time.monotonic()
    proc = subprocess.run(
        [*CLI, *argv],
        capture_output=True,
        text=True,
        timeout=limit_s * 2,
        check=False,
        cwd=cwd,
        preexec_fn=_limits,
    )
    err = proc.stderr
    assert proc.returncode == 2, err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    for fragment in fragments:
        assert fragment in err, err
    assert time.monotonic() - began < limit_s
    return err


HOSTILE: dict[str, tuple[str | bytes, tuple[str, ...]]] = {
    "not_utf8": (b"executor: cpu\nhandler: \xff\n", (":2: (file): not UTF-8", "offset 23")),
    "deep": ("regions:\n  " + "[" * 5000 + "]" * 5000 + "\n", (":2: regions[0]", "deeper")),
    "list_key": ("executor: cpu\n? [1, 2]\n: x\n", (":2: (top): a key must be a string",)),
    "alias_bomb": (alias_bomb(9), (": regions[", "once its aliases are expanded")),
    "nan": ("executor: cpu\nstop_timeout_s: .nan\n", (":2: stop_timeout_s: must be a finite",)),
    "nul": ('socket:\n  capture: "/tmp/a\\0b"\n', (":2: socket.capture:", "NUL byte")),
    "cpu_core": ("executor: cpu\ncpu_core: 100000\n", (":2: cpu_core: 100000: not a core",)),
}


@pytest.mark.parametrize("case", HOSTILE)
def test_echo_refuses_a_hostile_config_in_one_line(tmp_path, case):
    content, fragments = HOSTILE[case]
    path = write(tmp_path, content)
    cli_refuses(["echo", "--config", str(path), "--seconds", "5"], tmp_path, *fragments)


@pytest.mark.parametrize("case", ["not_utf8", "deep", "alias_bomb", "nul"])
def test_listen_refuses_a_hostile_config_in_one_line(tmp_path, case):
    content, fragments = HOSTILE[case]
    path = write(tmp_path, content)
    cli_refuses(["listen", "--config", str(path), "--seconds", "5"], tmp_path, *fragments)


RUN_HOSTILE = {
    **{k: HOSTILE[k] for k in ("not_utf8", "deep", "list_key", "alias_bomb")},
    "app_name_list": ("app:\n  name: [1]\n", (":2: app.name: [1] is not an app",)),
    "app_a_list": ("app: [1]\n", (":1: app: [1], not a mapping",)),
}


@pytest.mark.parametrize("case", RUN_HOSTILE)
def test_run_refuses_a_hostile_config_in_one_line(tmp_path, case):
    content, fragments = RUN_HOSTILE[case]
    path = write(tmp_path, content)
    cli_refuses(["run", str(path)], tmp_path, *fragments)


def test_run_refuses_nan_in_an_app_key_through_the_app(tmp_path):
    pytest.importorskip("holoscan", reason="run hands the file to the app, which needs Holoscan")
    path = write(tmp_path, "app:\n  name: qec_loop\n  timeout_s: .nan\n")
    err = cli_refuses(["run", str(path)], tmp_path, limit_s=60)
    assert err == f"qec_loop: error: {path}:3: app.timeout_s: must be a finite number, not nan\n"


def test_an_apps_set_flag_gets_the_files_limits(tmp_path):
    pytest.importorskip("holoscan", reason="the apps need Holoscan")
    path = write(tmp_path, "app:\n  name: qec_loop\n")
    deep = "[" * 5000 + "]" * 5000
    argv = ["run", str(path), "--set", f"transceiver.regions={deep}"]
    err = cli_refuses(argv, tmp_path, limit_s=60)
    assert err.startswith("qec_loop: error: --set transceiver.regions[0][0]"), err
    assert "nested deeper" in err


# ---------------------------------------------------------------- fuzz

TOKENS = [
    *("a", "regions", "qp", "qpn", "app", "name", "transceiver", "stop_timeout_s"),
    *(":", " ", "\n", "  ", "- ", "[", "]", "{", "}", ",", "&x ", "*x", "? ", "<<", "#", "|"),
    *("!!map ", "!!seq ", "!!set ", "!!omap ", "!!str ", "!!int ", "!!float ", "!!binary "),
    *("!!timestamp ", "!!bool ", "!!null ", "!foo ", "%YAML 1.1\n", "---\n", "...\n"),
    *(".nan", "1", "-1", "2020-13-45", '"\\0"', "'x'", "~", "on", "9" * 30, "1.0e+400", "\t"),
]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(TOKENS), min_size=1, max_size=30).map("".join))
def test_any_yaml_is_a_config_or_one_config_error(tmp_path_factory, text):
    path = tmp_path_factory.getbasetemp() / "fuzz.yaml"
    path.write_text(text)
    for load in (load_config, load_app_config, lambda p: parse_yaml_value(text, key="--set k")):
        try:
            load(path)
        except ConfigError as e:
            assert "\n" not in str(e), str(e)
