"""The way from the schema to the engine: one description, and no setting silently ignored.

Goal: every leaf of the transceiver's schema is placed exactly once: taken by the core one for
one under its own dotted name (config.TO_CORE, which is read from the core), read into a
computed core key (config.COMPUTED), consumed by Python
(config.BY_PYTHON: what reaches the core in its place) or named as not reaching the engine
(config.NOT_IN_ENGINE); changing a key that reaches the engine changes what the core gets, at
the keys that say they read it and no other; core_config() gives exactly the keys the core
takes, each of the kind it declares; the core refuses a key missing, unknown or of the wrong
kind, naming it; and a setting that cannot take effect where it is set is refused.

Oracles: the schema's own leaves (a key added later must be placed before this passes);
``_core.engine_config_keys()``, which the core derives from the same list it parses with
(roce_transceiver/core/include/rt/host/transceiver.h, for_each_config_key); the kinds as this
file reads them (an integer kind's range from its width); the Field's own bounds and checks
for the changed values (load_config accepts each).
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from roce_transceiver import _core
from roce_transceiver import transceiver as transceiver_module
from roce_transceiver.config import (
    BY_PYTHON,
    COMPUTED,
    NOT_IN_ENGINE,
    NULL_TO_CORE,
    SCHEMA,
    TO_CORE,
    ConfigError,
    allowed_cores,
    core_config,
    load_config,
)
from roce_transceiver.qec import LookupTableDecoder, RotatedSurfaceCode
from roce_transceiver.schema import Field, leaves
from roce_transceiver.transceiver import Transceiver


def nested(dotted: str, value: Any) -> dict[str, Any]:
    """ "a.b", 1 -> {"a": {"b": 1}}."""
    out: Any = value
    for part in reversed(dotted.split(".")):
        out = {part: out}
    return out


LEAVES = leaves(SCHEMA)
CORE_KINDS = dict(_core.engine_config_keys())
READ_BY = {  # schema key -> the core keys that say they depend on it
    dotted: {dotted} if dotted in TO_CORE else set() for dotted in LEAVES
}
for core_key, computed in COMPUTED.items():
    for dotted in computed.reads:
        READ_BY.setdefault(dotted, set()).add(core_key)
REACHES_ENGINE = sorted(k for k, v in READ_BY.items() if v)


# ---------------------------------------------------------------- one description


def test_the_core_lists_each_key_once():
    keys = [k for k, _ in _core.engine_config_keys()]
    assert len(keys) == len(set(keys)), keys


def test_core_config_gives_exactly_the_keys_the_core_takes():
    assert not set(TO_CORE) & set(COMPUTED), "a core key both taken as it is and computed"
    ours = set(TO_CORE) | set(COMPUTED)
    theirs = set(CORE_KINDS)
    assert (sorted(ours - theirs), sorted(theirs - ours)) == ([], []), (
        "(keys the core does not take, keys it takes that config.py does not give)"
    )
    assert set(core_config(load_config(), "cpu", None)) == theirs


def test_every_schema_leaf_is_placed_exactly_once():
    engine = set(REACHES_ENGINE)
    named = set(BY_PYTHON) | set(NOT_IN_ENGINE)
    assert set(READ_BY) == set(LEAVES), (
        f"reads that are not schema keys: {set(READ_BY) - set(LEAVES)}"
    )
    assert set(NULL_TO_CORE) <= {k for k in TO_CORE if LEAVES[k].nullable}
    assert not set(BY_PYTHON) & set(NOT_IN_ENGINE)
    assert not engine & named, f"placed twice: {sorted(engine & named)}"
    unplaced = set(LEAVES) - engine - named
    assert not unplaced, f"schema keys nothing takes (silently ignored): {sorted(unplaced)}"
    for why in [*BY_PYTHON.values(), *NOT_IN_ENGINE.values()]:
        assert len(why) > 40, why  # says where, or why not


def fits(kind: str, value: Any) -> bool:
    """Does ``value`` hold what the core's ``kind`` says (register_engine.cpp's read())?"""
    if m := re.fullmatch(r"(u?)int(\d+)", kind):
        bits = int(m[2])
        lo, hi = (0, 2**bits - 1) if m[1] else (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
        return isinstance(value, int) and not isinstance(value, bool) and lo <= value <= hi
    if kind == "uint16 or None":
        return value is None or fits("uint16", value)
    if "|" in kind:
        return value in kind.split("|")
    simple = {
        "str": lambda: isinstance(value, str),
        "bool": lambda: isinstance(value, bool),
        "float": lambda: isinstance(value, (int, float)) and not isinstance(value, bool),
        "bytes": lambda: isinstance(value, bytes),
        "mac": lambda: isinstance(value, bytes) and len(value) == 6,
        "ip": lambda: isinstance(value, bytes) and len(value) in (4, 16),
        "regions": lambda: (
            isinstance(value, list)
            and all(
                isinstance(r, tuple) and len(r) == 3 and all(fits("uint64", x) for x in r)
                for r in value
            )
        ),
    }
    assert kind in simple, f"a kind this test does not know: {kind!r}"
    return simple[kind]()


CONFIGS: list[tuple[str, dict[str, Any], bytes | None]] = [
    ("defaults", {}, None),
    (
        "frames_ipv6_vlan_pinned",
        {
            "handler": "frames",
            "regions": [{"va": 1 << 40, "rkey": 9, "length": 4096}],
            "local": {"ip": "fd00::1"},
            "peer": {"ip": "fd00::2"},
            "vlan": 0x2005,
            "cpu_core": min(allowed_cores()),
            "socket": {"capture": "x.pcap"},
        },
        None,
    ),
    ("qec", {"handler": "qec"}, LookupTableDecoder(RotatedSurfaceCode(3)).table_blob()),
]


@pytest.mark.parametrize(("case", "config", "blob"), CONFIGS, ids=[c[0] for c in CONFIGS])
def test_every_value_is_of_the_kind_the_core_declares(case, config, blob):
    out = core_config(load_config(config), "cpu", blob)
    wrong = {k: (CORE_KINDS[k], v) for k, v in out.items() if not fits(CORE_KINDS[k], v)}
    assert wrong == {}
    _core.Transceiver(out).stop()  # and the core takes it


# ---------------------------------------------------------------- each key reaches the core

# Values the generic search below cannot make up (strings with a format, nulls, lists).
ALTERNATIVE: dict[str, Any] = {
    "local.mac": "02:00:00:00:00:09",
    "peer.mac": "02:00:00:00:00:0a",
    "local.ip": "10.0.0.9",
    "peer.ip": "10.0.0.10",
    "socket.interface": "eth9",
    "doca.device": "mlx5_3",
    "socket.capture": "x.pcap",
    "vlan": 5,
    "custom.params": [5],
    "custom.source": "/stat.cu",  # with the frames handler (base()): its statistic
    "cpu_core": min(allowed_cores()),
    "regions": [{"va": 0, "rkey": 1, "length": 64}],
    "frames.slice_bytes": 4096,
}


def base(dotted: str) -> dict[str, Any]:
    """The frames handler on, so that its keys matter (it needs completions)."""
    return {} if dotted == "completions" else {"handler": "frames"}


def another_value(dotted: str, f: Field) -> Any:
    """A value of ``dotted`` other than base()'s that load_config accepts on top of it."""
    if dotted in ALTERNATIVE:
        candidates = [ALTERNATIVE[dotted]]
    elif f.choices:
        candidates = list(f.choices)
    elif f.type is bool:
        candidates = [not f.default]
    elif f.type is float:
        candidates = [f.default * 2, f.default / 2]
    else:
        d = f.default
        candidates = [d + 1, d - 1, d * 2, d // 2, d + 64, f.minimum, f.maximum]
    current = load_config(base(dotted))
    for value in candidates:
        try:
            loaded = load_config({**base(dotted), **nested(dotted, value)})
        except ConfigError:
            continue
        if loaded != current:
            return value
    raise AssertionError(f"{dotted}: no other value found (add one to ALTERNATIVE)")


@pytest.mark.parametrize("dotted", REACHES_ENGINE)
def test_changing_a_key_changes_what_the_core_gets_there_and_only_there(dotted):
    value = another_value(dotted, LEAVES[dotted])
    before = core_config(load_config(base(dotted)), "cpu", None)
    after = core_config(load_config({**base(dotted), **nested(dotted, value)}), "cpu", None)
    changed = {k for k in before if before[k] != after[k]}
    assert changed, f"{dotted}={value!r} reaches nothing the core gets"
    assert changed <= READ_BY[dotted], f"{dotted} changes {changed}, says {READ_BY[dotted]}"
    if dotted in TO_CORE:
        assert after[dotted] == value


class Recorder:
    """Stands in for _core.Transceiver: what the core would have been given."""

    given: list[dict[str, Any]]

    def __init__(self, config: dict[str, Any], nic: Any = None) -> None:
        Recorder.given.append(config)


@pytest.fixture
def recorder(monkeypatch) -> type[Recorder]:
    Recorder.given = []
    monkeypatch.setattr(transceiver_module._core, "Transceiver", Recorder)
    return Recorder


def test_executor_reaches_the_core_resolved(recorder):
    for requested in ("cpu", "auto"):
        t = Transceiver({"executor": requested})
        assert recorder.given[-1]["executor"] == t.executor
        assert t.executor == transceiver_module.pick_executor(requested)[0] != "auto"


def test_qec_distance_reaches_the_core_as_its_table(recorder):
    for distance in (3, 5):
        Transceiver({"executor": "cpu", "handler": "qec", "qec": {"distance": distance}})
        table = LookupTableDecoder(RotatedSurfaceCode(distance)).table_blob()
        assert recorder.given[-1]["qec_blob"] == table
    assert recorder.given[0]["qec_blob"] != recorder.given[1]["qec_blob"]


def test_nic_doca_reaches_the_core_with_its_device_and_sdk(recorder, monkeypatch):
    monkeypatch.setenv("DOCA_PATH", "/nowhere/doca")
    Transceiver({"executor": "cpu", "nic": "doca", "doca": {"device": "mlx5_7"}})
    given = recorder.given[0]
    assert (given["nic"], given["doca.device"]) == ("doca", "mlx5_7")
    assert (given["doca_sdk_path"], given["doca_sdk_path_chosen"]) == ("/nowhere/doca", True)


# ---------------------------------------------------------------- the core's own check


def good() -> dict[str, Any]:
    return core_config(load_config({"executor": "cpu"}), "cpu", None)


def test_the_core_refuses_missing_and_unknown_keys_naming_all_of_them():
    bad = good()
    del bad["queues.batch"], bad["frames.check_crc"]
    bad["bogus"] = 1
    with pytest.raises(ValueError) as e:
        _core.Transceiver(bad)
    assert str(e.value).startswith(
        "engine config: keys missing: 'queues.batch', 'frames.check_crc'; keys unknown: 'bogus' "
    )
    assert "rebuild _core" in str(e.value)


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("queues.rx_depth", -1, "queues.rx_depth=-1: must be an integer from 0 to 4294967295"),
        ("queues.batch", 1 << 32, "queues.batch=4294967296: must be an integer from 0 to"),
        ("qp.pkey", 0x10000, "qp.pkey=65536: must be an integer from 0 to 65535"),
        ("cpu_core", 1 << 31, "cpu_core=2147483648: must be an integer from -2147483648 to"),
        ("check_icrc", 1, "check_icrc=1: must be a bool"),
        ("qp.qpn", True, "qp.qpn=True: must be an integer"),
        ("stop_timeout_s", "5", "stop_timeout_s='5': must be a number"),
        ("socket.mode", b"udp", "socket.mode=b'udp': must be a str"),
        ("executor", "gpu", "executor='gpu': must be one of cpu|cuda"),
        ("far_end", "fpga", "far_end='fpga': must be one of cpu|gpu"),
        ("nic", "rdma", "nic='rdma': must be one of loopback|socket|doca"),
        ("queues.steer", "rss", "queues.steer='rss': must be one of qp|udp_sport"),
        ("qp.transport", "RD", "qp.transport='RD': must be one of RC|UC"),
        ("handler", "lookup", "handler='lookup': must be one of echo|sink|qec|frames|custom"),
        ("local_mac", b"\x02" * 5, "local_mac=b'\\x02\\x02\\x02\\x02\\x02': must be 6 bytes"),
        ("peer_ip", b"\x0a" * 16, "peer_ip=b'\\n\\n"),  # 16 bytes with ip_version 4
        ("ip_version", 5, "ip_version=5: must be 4 or 6"),
        ("vlan", -1, "vlan=-1: must be an integer from 0 to 65535"),
        ("regions", [(0, 1)], "regions[0]=(0, 1): must be a tuple (va, rkey, length)"),
        ("regions", [(0, 1 << 32, 8)], "regions[0].rkey=4294967296: must be an integer"),
        ("qec_blob", "x", "qec_blob='x': must be bytes"),
    ],
)
def test_the_core_refuses_a_value_of_the_wrong_kind_naming_the_key(key, value, message):
    with pytest.raises(ValueError) as e:
        _core.Transceiver({**good(), key: value})
    assert str(e.value).startswith(f"engine config: {message}"), str(e.value)


def test_a_long_value_is_quoted_short():
    with pytest.raises(ValueError) as e:
        _core.Transceiver({**good(), "qec_blob": "x" * 10_000})
    assert len(str(e.value)) < 200, str(e.value)


# ---------------------------------------------------------------- no setting silently ignored

UDP = {"nic": "socket", "socket": {"mode": "udp"}}


@pytest.mark.parametrize(
    ("config", "key", "message"),
    [
        (
            {**UDP, "socket": {"mode": "udp", "interface": "eth0"}},
            "socket.interface",
            "socket.mode 'udp' binds to local.ip, not to an interface",
        ),
        ({**UDP, "vlan": 5}, "vlan", "socket.mode 'udp' leaves the Ethernet header to the kernel"),
        (
            {"executor": "cuda", "cpu_core": 0},
            "cpu_core",
            "pins the cpu executor's thread; executor 'cuda' has none",
        ),
    ],
)
def test_a_setting_that_cannot_take_effect_is_refused(config, key, message):
    with pytest.raises(ConfigError) as e:
        load_config(config)
    assert (e.value.key, str(e.value)) == (key, f"{key}: " + str(e.value).split(": ", 1)[1])
    assert message in str(e.value)
    with pytest.raises(ConfigError, match=re.escape(f"{key}: {message}")):
        Transceiver(config)


def test_a_refused_setting_names_its_file_and_line(tmp_path):
    path = tmp_path / "udp.yaml"
    path.write_text("nic: socket\nsocket:\n  mode: udp\nvlan: 7\n")
    with pytest.raises(ConfigError) as e:
        load_config(path)
    assert (e.value.source, e.value.line, e.value.key) == (str(path), 4, "vlan")


def test_the_same_settings_stay_accepted_where_they_work():
    load_config({"nic": "socket", "socket": {"mode": "packet", "interface": "eth0"}, "vlan": 5})
    load_config({"vlan": 5})  # the loopback's far end tags its frames too
    load_config({**UDP, "socket": {"mode": "udp", "interface": None}})
    load_config({"executor": "cpu", "cpu_core": min(allowed_cores())})


def test_cpu_core_where_auto_picks_cuda_is_refused():
    cfg = load_config({"executor": "auto", "cpu_core": min(allowed_cores())})
    with pytest.raises(ConfigError) as e:
        core_config(cfg, "cuda", None)
    assert e.value.key == "cpu_core"
    assert "executor 'auto' runs cuda here" in str(e.value)
    assert core_config(cfg, "cpu", None)["cpu_core"] == min(allowed_cores())


# ---------------------------------------------------------------- the core's bounds, once


def test_the_schemas_maxima_for_the_cores_arrays_are_the_cores():
    assert LEAVES["queues.count"].maximum == _core.LIMITS["queues"]
    assert LEAVES["frames.pages"].maximum == _core.LIMITS["pages"]
    region = {"va": 0, "length": 64}
    most = [{**region, "rkey": i} for i in range(_core.LIMITS["regions"])]
    load_config({"regions": most})
    with pytest.raises(ConfigError, match=f"at most {_core.LIMITS['regions']} regions$"):
        load_config({"regions": [*most, {**region, "rkey": 99}]})


def test_the_frames_pages_take_a_region_of_their_own():
    region = {"va": 0, "length": 64}
    most = [{**region, "rkey": 100 + i} for i in range(_core.LIMITS["regions"])]
    with pytest.raises(ConfigError, match="regions: the frames' pages are a region of their own"):
        load_config({"handler": "frames", "regions": most})
    load_config({"handler": "frames", "regions": most[:-1]})


@pytest.mark.parametrize("passes", [1, 1 << 16])
def test_an_engine_settles_after_any_number_of_idle_passes(passes):
    """queues.settle_passes at its bounds: every request answered, the counters published."""
    cfg = {"executor": "cpu", "queues": {"settle_passes": passes}}
    with Transceiver(cfg) as t:
        r = t.roundtrip(count=20, size=16, timeout=5.0)
        assert (r.sent, r.received, r.wrong) == (20, 20, 0)
