"""custom.params as a mapping: a C struct of 4-byte little-endian members, and the YAML file's
folder as the place a relative custom.source is read from.

Goal: a mapping packs to exactly the bytes ``struct.pack`` gives for the members in the order
written (int32, uint32 above int32's range, float32, arrays of them, no padding); every value
that cannot be such a member is a ConfigError naming ``custom.params.<key>`` (and the index,
and the YAML line); the list and hex forms are unchanged. End to end on the cpu executor, a
handler reading the struct through its C++ members answers with them (the host compiler's
layout is the oracle that the packing has no padding and the byte order right), and
threshold_count.cu takes its threshold from ``{threshold: N}``.

Oracles: ``struct.pack`` for the bytes; numpy's count of samples above the threshold; the
C++ compiler's own struct layout for the handler's reading.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

import numpy as np
import pytest
from engine_helpers import running

from roce_transceiver.config import load_config
from roce_transceiver.custom_params import MAX_CUSTOM_PARAMS, custom_params_bytes
from roce_transceiver.schema import ConfigError
from roce_transceiver.transceiver import Transceiver

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "handlers"


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    """Every test compiles into its own cache (as tests/test_custom_handler_cpu.py does)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


@pytest.mark.parametrize(
    ("params", "fmt", "values"),
    [
        ({"threshold": 1000}, "<i", (1000,)),
        ({"offset": -7}, "<i", (-7,)),
        ({"low": -(2**31), "high": 2**31 - 1}, "<ii", (-(2**31), 2**31 - 1)),
        ({"mask": 0xFFFF_FFFF, "bit31": 2**31}, "<II", (0xFFFF_FFFF, 2**31)),
        ({"gain": 0.75, "tiny": 1e-3}, "<ff", (0.75, 1e-3)),
        (
            {"n": 3, "weights": [0.5, -1.25, 2.0], "taps": [1, -2, 2**31], "scale": 4.0},
            "<ifffiiIf",
            (3, 0.5, -1.25, 2.0, 1, -2, 2**31, 4.0),
        ),
        ({}, "<", ()),
    ],
    ids=["int", "negative", "int32-range", "uint32", "floats", "struct-with-arrays", "empty"],
)
def test_mapping_packs_as_struct_pack_does(params, fmt, values):
    assert custom_params_bytes(params) == struct.pack(fmt, *values)
    # And through the schema, as the core gets it (COMPUTED custom_params).
    from roce_transceiver.config import core_config

    cfg = load_config({"custom": {"params": params}})
    assert core_config(cfg, "cpu", None)["custom_params"] == struct.pack(fmt, *values)


def test_members_go_in_the_order_written():
    assert custom_params_bytes({"b": 2, "a": 1}) == struct.pack("<ii", 2, 1)


def test_list_and_hex_forms_are_unchanged():
    assert custom_params_bytes([5, 0, 255]) == bytes([5, 0, 255])
    assert custom_params_bytes("e8 03") == b"\xe8\x03"
    assert custom_params_bytes(b"\x01\x02") == b"\x01\x02"


@pytest.mark.parametrize(
    ("params", "key", "says"),
    [
        ({"on": True}, "custom.params.on", "True is a boolean: write 0 or 1"),
        ({"big": 2**32}, "custom.params.big", "4294967296 fits neither int32 nor uint32"),
        ({"neg": -(2**31) - 1}, "custom.params.neg", "fits neither int32 nor uint32"),
        ({"huge": 1e39}, "custom.params.huge", "outside float32's range"),
        ({"x": float("inf")}, "custom.params.x", "must be a finite number"),
        ({"inner": {"a": 1}}, "custom.params.inner", "a nested mapping"),
        ({"name": "abc"}, "custom.params.name", "'abc' is a string"),
        ({"none": None}, "custom.params.none", "null: a member needs a value"),
        ({"w": []}, "custom.params.w", "an empty list"),
        ({"w": [1, 2, 0.5]}, "custom.params.w[2]", "0.5 is a float, [0] an int: a list is all"),
        ({"w": [0.5, 1]}, "custom.params.w[1]", "1 is an int, [0] a float"),
        ({"w": [1, False]}, "custom.params.w[1]", "False is a boolean"),
        ({"w": [1, [2]]}, "custom.params.w[1]", "a list in a list"),
        ({"w": [1, 2**33]}, "custom.params.w[1]", "fits neither int32 nor uint32"),
        ({"2x": 1}, "custom.params.2x", "not a member name"),
        ({"a": list(range(MAX_CUSTOM_PARAMS // 4 + 1))}, "custom.params", "4100 bytes packed"),
    ],
)
def test_member_that_cannot_be_packed_is_named(params, key, says):
    with pytest.raises(ConfigError) as e:
        load_config({"handler": "custom", "custom": {"source": "x.cu", "params": params}})
    assert e.value.key == key, str(e.value)
    assert says in str(e.value)
    assert "\n" not in str(e.value)


def test_member_error_in_yaml_names_file_line_and_index(tmp_path):
    path = tmp_path / "t.yaml"
    lines = [
        "handler: custom",
        "custom:",
        "  source: |",
        "    RT_HD int handle(const rt::CustomCall&) { return 0; }",
        "  params:",
        "    threshold: 1000",
        "    gains: [0.5, 2]",
    ]
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ConfigError) as e:
        load_config(path)
    assert (e.value.key, e.value.line) == ("custom.params.gains[1]", 7), str(e.value)
    assert str(e.value).startswith(f"{path}:7: custom.params.gains[1]: 2 is an int, [0] a float")
    # In an app's file the key is the whole dotted path.
    from roce_transceiver.operators.app_config import load_app_config

    app = tmp_path / "app.yaml"
    app.write_text("transceiver:\n" + "".join(f"  {line}\n" for line in lines))
    with pytest.raises(ConfigError) as e:
        load_app_config(app)
    assert (e.value.key, e.value.line) == ("transceiver.custom.params.gains[1]", 8), str(e.value)


# A handler that reads its parameters as the struct they are and answers with its members,
# each written out byte by byte (little-endian) from the typed value it read.
STRUCT_HANDLER = r"""
#include "rt/handlers/custom.h"

struct Params {
  int32_t offset;
  float scale;
  uint32_t mask;
  int32_t table[3];
  float gains[2];
};
static_assert(sizeof(Params) == 32, "4-byte members, no padding");

namespace {
RT_HD void put(uint8_t* p, const void* v) {
  const uint8_t* b = static_cast<const uint8_t*>(v);
  for (int i = 0; i < 4; ++i) p[i] = b[i];
}
}  // namespace

// reply: offset + request[0] (int32), scale * gains[1] (float), mask ^ request[0] (uint32),
// table[request[0] % 3] (int32)
RT_HD int handle(const rt::CustomCall& call) {
  if (call.params_bytes != sizeof(Params) || call.request_len < 1 || call.reply_capacity < 16)
    return rt::kHandlerError;
  const Params& p = *reinterpret_cast<const Params*>(call.params);
  const uint32_t r = call.request[0];
  const int32_t a = p.offset + int32_t(r);
  const float b = p.scale * p.gains[1];
  const uint32_t c = p.mask ^ r;
  const int32_t d = p.table[r % 3];
  put(call.reply, &a);
  put(call.reply + 4, &b);
  put(call.reply + 8, &c);
  put(call.reply + 12, &d);
  return 16;
}
"""


def test_handler_reads_a_mapping_as_its_struct_end_to_end(tmp_path):
    params = {
        "offset": -100,
        "scale": 1.5,
        "mask": 0xF0F0_F0F0,
        "table": [7, -8, 2**31 - 1],
        "gains": [0.25, -3.0],
    }
    (tmp_path / "struct_params.cu").write_text(STRUCT_HANDLER)
    payloads = [bytes([i, 0xAA]) for i in range(40)]
    expected = [
        struct.pack(
            "<ifIi",
            -100 + i,
            1.5 * -3.0,
            0xF0F0_F0F0 ^ i,
            params["table"][i % 3],  # type: ignore[index]
        )
        for i in range(40)
    ]
    custom = {"source": str(tmp_path / "struct_params.cu"), "params": params}
    with running("cpu", "RC", handler="custom", custom=custom) as t:
        r = t.roundtrip(payloads=payloads, expected=expected, count=len(payloads), timeout=30)
        assert (r.status, r.received, r.wrong) == ("done", len(payloads), 0)


def test_threshold_count_takes_its_threshold_from_a_mapping_in_yaml(tmp_path):
    """The example reads params[0..1] as a uint16: {threshold: N} packs N as an int32 whose
    first two bytes are that uint16. The file names the example relative to its own folder."""
    threshold = 1234
    config = tmp_path / "conf" / "threshold.yaml"
    config.parent.mkdir()
    rel = Path(os.path.relpath(EXAMPLES / "threshold_count.cu", config.parent))
    config.write_text(
        "executor: cpu\nhandler: custom\n"
        f"custom:\n  source: {rel}\n  entry: threshold_count\n  state_bytes: 8\n"
        f"  params: {{threshold: {threshold}}}\n"
    )
    rng = np.random.default_rng(3)
    frames = [rng.integers(0, 2500, 48, dtype=np.uint16) for _ in range(60)]
    payloads = [f.astype("<u2").tobytes() for f in frames]
    expected = [
        np.array([int((f > threshold).sum()), f.size], "<u4").tobytes()
        + np.array([i + 1], "<u8").tobytes()
        for i, f in enumerate(frames)
    ]
    assert not rel.is_absolute()
    with Transceiver(config) as t:
        assert t.config["custom"]["source"] == str(EXAMPLES / "threshold_count.cu")
        r = t.roundtrip(payloads=payloads, expected=expected, count=len(payloads), timeout=30)
        assert (r.status, r.received, r.wrong) == ("done", len(payloads), 0)


# ---------------------------------------------------------------- custom.source from a file


def test_relative_source_in_yaml_is_read_from_the_files_folder(tmp_path, monkeypatch):
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "h.cu").write_text("// the handler\n")
    config = tmp_path / "conf" / "t.yaml"
    config.write_text("handler: custom\ncustom:\n  source: h.cu\n")
    monkeypatch.chdir(tmp_path)  # not the file's folder: h.cu is not here
    assert load_config(config)["custom"]["source"] == str(tmp_path / "conf" / "h.cu")
    # Given relative to the working directory, the file's path works too (and is made absolute).
    assert load_config(Path("conf/t.yaml"))["custom"]["source"] == str(tmp_path / "conf/h.cu")
    # An absolute path and the source text stay as they are; so does a mapping's relative path.
    config.write_text(f"handler: custom\ncustom:\n  source: {tmp_path / 'conf' / 'h.cu'}\n")
    assert load_config(config)["custom"]["source"] == str(tmp_path / "conf" / "h.cu")
    config.write_text("handler: custom\ncustom:\n  source: |\n    // text\n")
    assert load_config(config)["custom"]["source"] == "// text\n"
    assert load_config({"handler": "custom", "custom": {"source": "h.cu"}})["custom"] == {
        "source": "h.cu",
        "entry": "handle",
        "state_bytes": 0,
        "params": "",
    }


def test_override_source_is_the_working_directorys(tmp_path, monkeypatch):
    (tmp_path / "conf").mkdir()
    (tmp_path / "mine.cu").write_text("// the handler\n")
    config = tmp_path / "conf" / "t.yaml"
    config.write_text("handler: custom\ncustom:\n  source: absent.cu\n")
    monkeypatch.chdir(tmp_path)
    cfg = load_config(config, {"custom.source": "mine.cu"})
    assert cfg["custom"]["source"] == str(tmp_path / "mine.cu")


def test_missing_source_in_yaml_names_the_file_line_and_key(tmp_path):
    config = tmp_path / "t.yaml"
    config.write_text("# a comment\nhandler: custom\ncustom:\n  entry: e\n  source: nope.cu\n")
    with pytest.raises(ConfigError) as e:
        load_config(config)
    assert (e.value.key, e.value.line, e.value.source) == ("custom.source", 5, str(config))
    assert str(e.value) == (
        f"{config}:5: custom.source: 'nope.cu': no such file ({tmp_path / 'nope.cu'}: a "
        "relative path is read from the folder of the YAML file that gives it)"
    )
    (tmp_path / "nope.cu").mkdir()
    with pytest.raises(ConfigError, match=r":5: custom\.source: 'nope.cu': is not a file"):
        load_config(config)
    # Not the handler: the key is unused, and not checked (as every custom.* key).
    config.write_text("custom:\n  source: gone.cu\n")
    assert load_config(config)["custom"]["source"] == str(tmp_path / "gone.cu")
