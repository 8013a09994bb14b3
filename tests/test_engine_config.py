"""The transceiver's configuration: defaults, validation, YAML, overrides, executor pick.

Goal: every key has a default and the defaults build a working transceiver;
every kind of bad value is refused with a ConfigError whose message names the
dotted key (and, from YAML, the file and the line of that key); a YAML file
may hold the keys at its top level or under ``transceiver:``; dotted overrides
apply on top; executor "auto" says what it picked and why, and "cuda" on a
machine without a GPU fails with the runtime's reason.

Oracles: the dotted key and line the test itself put the bad value at (YAML
files are written here, line by line); the schema's documented bounds in
roce_transceiver/config.py (powers of two, 64-byte multiples, 24-bit QPNs and
PSNs); ``_core.cuda_runtime_info()`` for whether a GPU is visible.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from engine_helpers import Peer, collect_n, wait_counters

from roce_transceiver import _core
from roce_transceiver.config import SCHEMA, ConfigError, load_config
from roce_transceiver.protocol import parse
from roce_transceiver.schema import Section, leaves
from roce_transceiver.transceiver import Transceiver, TransceiverError


def get(cfg: dict[str, Any], dotted: str) -> Any:
    for part in dotted.split("."):
        cfg = cfg[part]
    return cfg


# ---------------------------------------------------------------- defaults


def test_defaults_fill_every_key_and_match_the_documented_values():
    cfg = load_config()
    assert cfg == load_config({}) == load_config(None, {})
    for dotted, f in leaves(SCHEMA).items():
        assert get(cfg, dotted) == f.default, dotted
    # The values other parts of the project rely on (DESIGN section 3 and 4).
    assert cfg["executor"] == "auto" and cfg["handler"] == "echo"
    assert cfg["qp"]["transport"] == "RC" and cfg["qp"]["pkey"] == 0xFFFF
    assert (cfg["qp"]["rx_psn"], cfg["qp"]["tx_psn"]) == (0, 0)
    assert cfg["queues"]["slot_bytes"] == 2048
    assert cfg["check_icrc"] is True and cfg["completions"] is True


def test_defaults_build_and_run_a_transceiver():
    with Transceiver(None, {"executor": "cpu"}) as t:
        r = t.roundtrip(count=4, size=16, timeout=5.0)
        assert (r.status, r.received, r.wrong) == ("done", 4, 0), r


def test_an_empty_yaml_file_is_all_defaults(tmp_path):
    path = tmp_path / "empty.yaml"
    path.write_text("# nothing set\n")
    assert load_config(path) == load_config()


# ---------------------------------------------------------------- bad values


def _too_many_regions() -> list[dict[str, int]]:
    return [{"va": i << 20, "rkey": i, "length": 64} for i in range(9)]


BAD: list[tuple[str, dict[str, Any], str]] = [
    # (case, config, the dotted key the message must name)
    ("unknown_top_level", {"bogus": 1}, "bogus"),
    ("unknown_nested", {"queues": {"rx_dpeth": 64}}, "queues.rx_dpeth"),
    ("unknown_nested_deep", {"qp": {"transport": "RC", "qkey": 1}}, "qp.qkey"),
    ("section_not_a_mapping", {"qp": 17}, "qp"),
    ("wrong_type_str_for_int", {"queues": {"rx_depth": "64"}}, "queues.rx_depth"),
    ("wrong_type_int_for_str", {"executor": 1}, "executor"),
    ("wrong_type_float_for_int", {"qp": {"qpn": 17.0}}, "qp.qpn"),
    ("bool_for_int", {"queues": {"tx_depth": True}}, "queues.tx_depth"),
    ("bool_for_int_nested", {"qp": {"rx_psn": False}}, "qp.rx_psn"),
    ("int_for_bool", {"check_icrc": 1}, "check_icrc"),
    ("null_not_nullable", {"queues": {"batch": None}}, "queues.batch"),
    ("not_a_choice", {"qp": {"transport": "UD"}}, "qp.transport"),
    ("not_a_choice_handler", {"handler": "lookup"}, "handler"),
    ("qec_distance", {"qec": {"distance": 7}}, "qec.distance"),
    ("qpn_above_24_bits", {"qp": {"qpn": 0x1000000}}, "qp.qpn"),
    ("qpn_zero", {"qp": {"peer_qpn": 0}}, "qp.peer_qpn"),
    ("psn_above_24_bits", {"qp": {"tx_psn": 1 << 24}}, "qp.tx_psn"),
    ("pkey_above_16_bits", {"qp": {"pkey": 0x10000}}, "qp.pkey"),
    ("batch_zero", {"queues": {"batch": 0}}, "queues.batch"),
    ("depth_below_minimum", {"queues": {"rx_depth": 1}}, "queues.rx_depth"),
    ("depth_above_maximum", {"queues": {"tx_depth": 1 << 17}}, "queues.tx_depth"),
    ("depth_not_power_of_two", {"queues": {"rx_depth": 100}}, "queues.rx_depth"),
    ("host_depth_not_power_of_two", {"queues": {"host_tx_depth": 48}}, "queues.host_tx_depth"),
    (
        "completion_depth_not_power_of_two",
        {"queues": {"completion_depth": 1000}},
        "queues.completion_depth",
    ),
    ("slot_bytes_not_multiple_of_64", {"queues": {"slot_bytes": 1000}}, "queues.slot_bytes"),
    ("slot_bytes_below_minimum", {"queues": {"slot_bytes": 64}}, "queues.slot_bytes"),
    (
        "completion_slot_not_multiple_of_64",
        {"queues": {"completion_slot_bytes": 200}},
        "queues.completion_slot_bytes",
    ),
    ("udp_sport_zero", {"local": {"udp_sport": 0}}, "local.udp_sport"),
    ("vlan_above_16_bits", {"vlan": 0x10000}, "vlan"),
    ("stop_timeout_too_short", {"stop_timeout_s": 0.0}, "stop_timeout_s"),
    ("cpu_core_negative", {"cpu_core": -1}, "cpu_core"),
    ("mac_five_octets", {"local": {"mac": "02:00:00:00:00"}}, "local.mac"),
    ("mac_not_hex", {"peer": {"mac": "02:00:00:00:00:zz"}}, "peer.mac"),
    ("mac_one_digit_octets", {"peer": {"mac": "2:0:0:0:0:2"}}, "peer.mac"),
    ("ip_octet_too_big", {"local": {"ip": "10.0.0.256"}}, "local.ip"),
    ("ip_not_an_address", {"peer": {"ip": "peer.example"}}, "peer.ip"),
    ("ipv4_local_ipv6_peer", {"peer": {"ip": "fe80::2"}}, "peer.ip"),
    ("ipv6_local_ipv4_peer", {"local": {"ip": "fd00::1"}}, "peer.ip"),
    ("far_end_gpu_executor_cpu", {"far_end": "gpu", "executor": "cpu"}, "far_end"),
    ("regions_not_a_list", {"regions": {"va": 0, "rkey": 1, "length": 8}}, "regions"),
    ("region_missing_key", {"regions": [{"va": 0, "rkey": 1}]}, "regions"),
    ("region_extra_key", {"regions": [{"va": 0, "rkey": 1, "length": 8, "lkey": 2}]}, "regions"),
    ("region_negative_va", {"regions": [{"va": -1, "rkey": 1, "length": 8}]}, "regions"),
    ("region_va_above_64_bits", {"regions": [{"va": 1 << 64, "rkey": 1, "length": 8}]}, "regions"),
    (
        "region_rkey_above_32_bits",
        {"regions": [{"va": 0, "rkey": 1 << 32, "length": 8}]},
        "regions",
    ),
    ("region_bool_rkey", {"regions": [{"va": 0, "rkey": True, "length": 8}]}, "regions"),
    ("region_str_length", {"regions": [{"va": 0, "rkey": 1, "length": "8"}]}, "regions"),
    ("region_zero_length", {"regions": [{"va": 0, "rkey": 1, "length": 0}]}, "regions"),
    (
        "region_rkey_twice",
        {"regions": [{"va": 0, "rkey": 5, "length": 8}, {"va": 64, "rkey": 5, "length": 8}]},
        "regions",
    ),
    ("region_not_a_mapping", {"regions": [[0, 1, 8]]}, "regions"),
    ("regions_more_than_8", {"regions": _too_many_regions()}, "regions"),
]


@pytest.mark.parametrize(("case", "config", "key"), BAD, ids=[b[0] for b in BAD])
def test_bad_value_raises_config_error_naming_the_dotted_key(case, config, key):
    with pytest.raises(ConfigError) as e:
        load_config(config)
    assert e.value.key == key
    assert str(e.value).startswith(f"{key}: "), str(e.value)
    assert isinstance(e.value, ValueError)
    # A Transceiver refuses it the same way, before it allocates anything.
    with pytest.raises(ConfigError, match=re.escape(f"{key}: ")):
        Transceiver(config)


def test_unknown_key_message_lists_the_known_ones():
    with pytest.raises(ConfigError, match=r"queues\.rx_dpeth: unknown key .*rx_depth"):
        load_config({"queues": {"rx_dpeth": 64}})


@pytest.mark.parametrize(("case", "config", "key"), BAD, ids=[b[0] for b in BAD])
def test_bad_value_as_dotted_override_names_the_key(case, config, key):
    # The same values, given as CLI-style overrides on top of a valid config.
    with pytest.raises(ConfigError) as e:
        load_config({}, _flatten(config))
    assert e.value.key == key


SECTIONS = {k for k, v in SCHEMA.keys.items() if isinstance(v, Section)}


def _flatten(config: dict[str, Any]) -> dict[str, Any]:
    """{"queues": {"rx_depth": 1}} -> {"queues.rx_depth": 1}; other values stay whole."""
    out: dict[str, Any] = {}
    for k, v in config.items():
        if k in SECTIONS and isinstance(v, dict):
            out |= {f"{k}.{kk}": vv for kk, vv in v.items()}
        else:
            out[k] = v
    return out


# ---------------------------------------------------------------- YAML


def write_yaml(tmp_path: Path, text: str, name: str = "config.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


YAML_BAD: list[tuple[str, str, str, int]] = [
    # (case, YAML, dotted key, 1-based line of that key)
    ("unknown_top_level", "handler: echo\nbogus: 1\n", "bogus", 2),
    ("unknown_nested", "queues:\n  rx_depth: 64\n  tx_dpeth: 64\n", "queues.tx_dpeth", 3),
    ("wrong_type", "qp:\n  transport: RC\n  qpn: seventeen\n", "qp.qpn", 3),
    ("bool_for_int", "# a comment\nqueues:\n\n  batch: yes\n", "queues.batch", 4),
    ("out_of_range", "qp:\n  rx_psn: 16777216\n", "qp.rx_psn", 2),
    ("not_power_of_two", "queues:\n  completion_depth: 1000\n", "queues.completion_depth", 2),
    ("slot_bytes", "queues:\n  slot_bytes: 2000\n", "queues.slot_bytes", 2),
    ("bad_mac", "local:\n  ip: 10.0.0.1\n  mac: 02-00-00-00-00\n", "local.mac", 3),
    ("bad_ip", "peer:\n  ip: 10.0.0.999\n", "peer.ip", 2),
    ("section_not_mapping", "executor: cpu\nqp: 17\n", "qp", 2),
    (
        "bad_regions",
        "regions:\n  - {va: 0, rkey: 1, length: 64}\n  - {va: 64, rkey: 1, length: 64}\n",
        "regions",
        1,
    ),
    ("ipv4_local_ipv6_peer", "local:\n  ip: 10.0.0.1\npeer:\n  ip: fd00::2\n", "peer.ip", 4),
    ("far_end_gpu_executor_cpu", "executor: cpu\nfar_end: gpu\n", "far_end", 2),
]


@pytest.mark.parametrize(("case", "text", "key", "line"), YAML_BAD, ids=[b[0] for b in YAML_BAD])
def test_bad_yaml_value_names_file_line_and_key(tmp_path, case, text, key, line):
    path = write_yaml(tmp_path, text)
    with pytest.raises(ConfigError) as e:
        load_config(path)
    assert (e.value.key, e.value.source, e.value.line) == (key, str(path), line), str(e.value)
    assert str(e.value).startswith(f"{path}:{line}: {key}: "), str(e.value)


def test_yaml_transceiver_section_is_the_config(tmp_path):
    path = write_yaml(
        tmp_path,
        "app:\n  name: demo\n"
        "transceiver:\n"
        "  executor: cpu\n"
        "  handler: echo\n"
        "  qp:\n"
        "    transport: UC\n"
        "    tx_psn: 100\n"
        "  queues:\n"
        "    rx_depth: 64\n",
    )
    cfg = load_config(path)
    assert cfg["qp"]["transport"] == "UC" and cfg["queues"]["rx_depth"] == 64
    with Transceiver(path) as t:
        assert t.executor == "cpu"
        peer = Peer(t)
        assert t.inject(peer.next("SEND_ONLY", b"from yaml"))
        (reply,) = [parse(f) for f in collect_n(t, 1)]
        assert (reply.opcode_name, reply.psn, reply.payload) == ("UC_SEND_ONLY", 100, b"from yaml")


def test_yaml_error_in_transceiver_section_names_its_line(tmp_path):
    path = write_yaml(tmp_path, "app: {}\ntransceiver:\n  queues:\n    batch: 0\n")
    with pytest.raises(ConfigError, match=re.escape(f"{path}:4: queues.batch: ")):
        load_config(path)


def test_yaml_transceiver_section_not_a_mapping(tmp_path):
    path = write_yaml(tmp_path, "a: 1\ntransceiver: [1, 2]\n")
    with pytest.raises(ConfigError, match=re.escape(f"{path}:2: transceiver: ")):
        load_config(path)


def test_yaml_duplicate_key_names_its_line(tmp_path):
    path = write_yaml(tmp_path, "executor: cpu\nhandler: echo\nexecutor: cuda\n")
    with pytest.raises(ConfigError, match=re.escape(f"{path}:3: executor: duplicate key")):
        load_config(path)


def test_yaml_syntax_error_names_file_and_line(tmp_path):
    path = write_yaml(tmp_path, "queues:\n  rx_depth: 64\n  tx_depth: [64\n")
    with pytest.raises(ConfigError, match=re.escape(str(path)) + r":\d+: \(file\): not valid YAML"):
        load_config(path)


def test_yaml_top_level_not_a_mapping(tmp_path):
    path = write_yaml(tmp_path, "- executor: cpu\n")
    with pytest.raises(ConfigError, match=re.escape(f"{path}:1: ")):
        load_config(path)


def test_missing_yaml_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "absent.yaml")


# ---------------------------------------------------------------- overrides


def test_dotted_overrides_apply_on_top_of_a_dict():
    cfg = load_config(
        {"queues": {"rx_depth": 64}, "qp": {"transport": "RC"}},
        {"queues.tx_depth": 32, "qp.transport": "UC", "handler": "sink", "vlan": 5},
    )
    assert cfg["queues"]["rx_depth"] == 64 and cfg["queues"]["tx_depth"] == 32
    assert cfg["qp"]["transport"] == "UC" and cfg["handler"] == "sink" and cfg["vlan"] == 5


def test_dotted_overrides_apply_on_top_of_yaml_and_keep_its_lines(tmp_path):
    path = write_yaml(tmp_path, "executor: cpu\nqp:\n  transport: RC\n  qpn: 0\n")
    with pytest.raises(ConfigError, match=re.escape(f"{path}:4: qp.qpn: ")):
        load_config(path, {"qp.transport": "UC"})
    cfg = load_config(path, {"qp.qpn": 33, "qp.transport": "UC"})
    assert (cfg["qp"]["qpn"], cfg["qp"]["transport"]) == (33, "UC")


def test_overrides_do_not_modify_the_callers_mapping():
    base = {"queues": {"rx_depth": 64}}
    load_config(base, {"queues.rx_depth": 128})
    assert base == {"queues": {"rx_depth": 64}}


def test_overrides_reach_the_engine():
    with Transceiver({"executor": "cpu"}, {"qp.tx_psn": 0xABCDEF, "qp.transport": "UC"}) as t:
        peer = Peer(t)
        assert t.inject(peer.next("SEND_ONLY", b"o"))
        (reply,) = [parse(f) for f in collect_n(t, 1)]
        assert (reply.opcode_name, reply.psn) == ("UC_SEND_ONLY", 0xABCDEF)


def test_int_is_accepted_for_a_float_key():
    assert load_config({"stop_timeout_s": 2})["stop_timeout_s"] == 2.0


# ---------------------------------------------------------------- executor


def test_executor_auto_picks_by_gpu_and_says_why():
    info = _core.cuda_runtime_info()
    t = Transceiver({"executor": "auto"})
    if info["gpus"]:
        assert t.executor == "cuda"
        assert "auto picked cuda" in t.executor_reason
        assert info["gpus"][0]["name"] in t.executor_reason
    else:
        assert t.executor == "cpu"
        assert "auto picked cpu" in t.executor_reason
        assert (info["error"] or "no GPU visible") in t.executor_reason


def test_executor_cpu_says_as_configured():
    t = Transceiver({"executor": "cpu"})
    assert (t.executor, t.executor_reason) == ("cpu", "executor: cpu (as configured)")


def test_executor_cuda_without_gpu_raises_with_the_reason():
    info = _core.cuda_runtime_info()
    if info["gpus"]:
        pytest.skip(f"a GPU is visible ({info['gpus'][0]['name']}): this checks the no-GPU path")
    with pytest.raises(TransceiverError, match="executor 'cuda' cannot run here") as e:
        Transceiver({"executor": "cuda"})
    assert info["error"] and info["error"] in str(e.value)


def test_far_end_gpu_with_auto_executor_and_no_gpu_raises():
    info = _core.cuda_runtime_info()
    if info["gpus"]:
        pytest.skip(f"a GPU is visible ({info['gpus'][0]['name']}): this checks the no-GPU path")
    with pytest.raises(TransceiverError, match="far_end 'gpu' needs the cuda executor"):
        Transceiver({"executor": "auto", "far_end": "gpu"})


def test_epoch_stats_are_zeros_on_the_cpu_executor_and_name_each_figure() -> None:
    """The cuda executor's epoch figures (docs/gpu_sharing.md) have the same keys everywhere;
    the cpu executor has no epochs. Its crew of one takes batches (engine/batch.h): after
    stop(), their depth (queues.batch, a power of two up to 32) and count; no cycle clock."""
    with Transceiver({"executor": "cpu", "express": False, "queues": {"batch": 20}}) as t:
        peer = Peer(t)
        for _ in range(6):
            assert t.inject(peer.next("SEND_ONLY", b"x" * 32))
        wait_counters(t, rx_packets=6)
    stats = t.epoch_stats()
    epochs = (
        "epochs",
        "gap_total_ns",
        "gap_max_ns",
        "warmup_total_ns",
        "warmup_max_ns",
        "first_pass_total_ns",
        "first_pass_max_ns",
    )
    assert {k: stats[k] for k in epochs} == dict.fromkeys(epochs, 0)
    assert stats["batch_depth"] == 16 and stats["batch_cycles"] == (0, 0, 0, 0)
    assert stats["classify_cycles"] == (0, 0, 0, 0, 0)
    assert stats["commit_cycles"] == (0, 0, 0)
    assert stats["blocks"] == 1  # a thread a queue
    assert stats["batch_frames"] <= 6 and set(stats) == {
        *epochs,
        "blocks",
        "batch_depth",
        "batches",
        "batch_frames",
        "batch_cycles",
        "classify_cycles",
        "commit_cycles",
    }
