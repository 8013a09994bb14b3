"""``bench ops``: the GPU cost of each piece of the engine (roce_transceiver.bench.ops)."""

from __future__ import annotations

import json

import pytest

from roce_transceiver import _core, cli
from roce_transceiver.bench import ops


def _has_gpu() -> bool:
    return bool(_core.cuda_runtime_info()["gpus"])


def test_request_frame_rejects_an_unknown_transport():
    with pytest.raises(ValueError, match="transport 'XRC'"):
        ops.request_frame(32, "XRC")


@pytest.mark.skipif(_has_gpu(), reason="checks the message given where no GPU is visible")
def test_without_a_gpu_the_command_exits_2_and_says_why(capsys):
    assert cli.main(["bench", "ops"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("roce-transceiver: error: bench ops: device_op_costs")
    assert err.count("\n") == 1


def test_repeats_out_of_range_is_a_usage_error(capsys):
    assert cli.main(["bench", "ops", "--repeats", "65"]) == 2
    assert "argument --repeats: 65: out of range 1..64" in capsys.readouterr().err


@pytest.mark.gpu
def test_an_undecodable_frame_is_a_value_error():
    with pytest.raises(ValueError, match="does not decode"):
        _core.device_op_costs(b"\x00" * 20, 4)


@pytest.mark.gpu
@pytest.mark.parametrize("transport", ["UC", "RC"])
def test_every_piece_is_timed_and_the_table_matches_the_json(transport, tmp_path, capsys):
    path = tmp_path / "ops.json"
    result = ops.run(size=32, transport=transport, repeats=8, json_path=str(path))
    assert json.loads(path.read_text()) == json.loads(json.dumps(result))
    assert result["sm_ghz"] > 0.1
    names = [row["op"] for row in result["ops"]]
    assert len(names) == len(set(names)) >= 15
    for row in result["ops"]:
        assert 0 < row["min_cycles"] <= row["median_cycles"], row
    printed = capsys.readouterr().out
    assert all(name in printed for name in names)
