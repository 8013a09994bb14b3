"""The apps' YAML: one schema for every key, errors that name the key and the line, the
shipped configs valid (the deployment one too), and ``roce-transceiver run``'s dispatch.

Oracles: line numbers counted in the text the test writes; the embedded defaults of each app
against its file in configs/ (the file documents what the app does with no file).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from app_helpers import ROOT, run_app
from cli_helpers import CLI

from roce_transceiver.operators.app_config import APPS, ConfigError, load_app_config

CONFIGS = ROOT / "configs"


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "app.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("text", "key", "line", "says"),
    [
        ("app:\n  name: qec_loop\n  cuont: 5\n", "app.cuont", 3, "unknown key"),
        ("app:\n  count: many\n", "app.count", 2, "must be int"),
        ("peer:\n  size: 2\n", "peer.size", 2, "below the minimum"),
        (
            "transceiver:\n  queues:\n    rx_depth: 100\n",
            "transceiver.queues.rx_depth",
            3,
            "power of two",
        ),
        ("app:\n  scheduler: fast\n", "app.scheduler", 2, "is not one of"),
        ("\n\npeer:\n  link: udp\n", "peer.link", 4, "transceiver.nic 'socket'"),
        (
            "transceiver:\n  nic: socket\n  socket: {mode: udp}\npeer:\n  link: namespace\n",
            "peer.link",
            5,
            "leave transceiver.nic at 'loopback'",
        ),
        (
            "transceiver:\n  far_end: gpu\n  executor: cpu\n",
            "transceiver.far_end",
            2,
            "needs executor 'cuda'",
        ),
    ],
)
def test_errors_name_key_and_line(tmp_path, text, key, line, says):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as e:
        load_app_config(path)
    assert e.value.key == key and e.value.line == line, str(e.value)
    assert says in str(e.value) and str(path) in str(e.value)


def test_app_reading_anothers_file_is_an_error(tmp_path):
    path = write(tmp_path, "app:\n  name: qec_loop\n")
    with pytest.raises(ConfigError, match="for 'qec_loop', not for 'sensor_stream'"):
        load_app_config(path, app="sensor_stream")


@pytest.mark.parametrize(
    "name", ["roundtrip_latency", "sensor_stream", "qec_loop", "sensor_stream_distributed"]
)
def test_shipped_config_is_the_embedded_default(name):
    import importlib

    module = importlib.import_module(f"roce_transceiver.apps.{name}")
    from_file = load_app_config(CONFIGS / f"{name}.yaml", app=name)
    assert from_file == load_app_config(module.DEFAULTS, app=name)


def test_custom_handler_config_is_the_embedded_default_and_the_same_source():
    """The file names the checkout's example from its folder, the embedded default the
    package's copy (installed beside it for runs without a checkout): the same text."""
    from roce_transceiver.apps import custom_handler

    from_file = load_app_config(CONFIGS / "custom_handler.yaml", app="custom_handler")
    embedded = load_app_config(custom_handler.DEFAULTS, app="custom_handler")
    file_source = Path(from_file["transceiver"]["custom"].pop("source"))
    embedded_source = Path(embedded["transceiver"]["custom"].pop("source"))
    assert from_file == embedded
    assert file_source == ROOT / "examples" / "handlers" / "majority_vote.cu"
    assert embedded_source.read_bytes() == file_source.read_bytes()


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("*.yaml")), ids=lambda p: p.name)
def test_every_shipped_config_validates(path):
    cfg = load_app_config(path)
    assert cfg["app"]["name"] in APPS


def test_deployment_config_says_what_is_missing(tmp_path):
    cfg = load_app_config(CONFIGS / "igx_thor_cx7.yaml")
    assert cfg["transceiver"]["nic"] == "doca" and cfg["transceiver"]["executor"] == "cuda"
    proc = subprocess.run(
        [*CLI, "run", str(CONFIGS / "igx_thor_cx7.yaml"), "--output-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    err = proc.stderr
    assert "nic 'doca' cannot start here" in err
    assert "no DOCA SDK found at" in err
    assert "ibv_get_device_list found no device" in err or "libibverbs did not load" in err
    assert "NICs that work here: loopback" in err


def test_run_dispatches_on_app_name(tmp_path):
    path = write(
        tmp_path,
        "app:\n  name: roundtrip_latency\n  count: 100\ntransceiver:\n  executor: cpu\n"
        "latency:\n  floor: false\n",
    )
    proc = subprocess.run(
        [*CLI, "run", str(path), "--output-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "roundtrip latency (echo)" in proc.stdout and "100/100 answered" in proc.stdout


def test_run_names_a_wrong_app_and_its_line(tmp_path):
    path = write(tmp_path, "# a comment\napp:\n  name: nope\n")
    proc = subprocess.run(
        [*CLI, "run", str(path)], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 2
    assert f"{path}:3: app.name: 'nope' is not an app" in proc.stderr
    assert "roundtrip_latency" in proc.stderr


def test_app_bad_file_is_exit_2_with_line(tmp_path):
    path = write(tmp_path, "app:\n  count: -1\n")
    proc, summary = run_app("qec_loop", tmp_path, "--config", str(path))
    assert proc.returncode == 2 and summary is None
    assert f"{path}:2: app.count: -1 is below the minimum" in proc.stderr


def test_app_help_lists_the_options():
    proc = subprocess.run(
        [sys.executable, str(ROOT / "apps" / "sensor_stream.py"), "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0
    for option in ("--config", "--count", "--executor", "--scheduler", "--set"):
        assert option in proc.stdout


def test_override_into_a_value_that_is_not_a_section_is_an_error():
    from roce_transceiver.config import load_config

    with pytest.raises(ConfigError, match=r"queues: is 5, not a mapping: cannot set queues.rx"):
        load_config({"queues": 5}, {"queues.rx_depth": 64})
    cfg = load_app_config({"app": {"count": 3}}, {"peer.size": 64, "app.count": 7})
    assert (cfg["peer"]["size"], cfg["app"]["count"]) == (64, 7)


def test_sensor_payload_whose_packets_a_slot_cannot_hold_names_the_key_and_the_most(tmp_path):
    """The socket NIC would count every such packet too long and deliver none: refused."""
    path = write(
        tmp_path,
        "app:\n  name: sensor_stream\ntransceiver:\n  handler: frames\n  qp: {transport: UC}\n"
        "peer:\n  payload: 4096\n",
    )
    with pytest.raises(ConfigError) as e:
        load_app_config(path, app="sensor_stream")
    assert e.value.key == "peer.payload" and e.value.line == 7, str(e.value)
    assert "more than transceiver.queues.slot_bytes 2048" in str(e.value)
    assert "at most 1968 fit" in str(e.value)


# A value a flag gave replaced the file's: errors name the flag, never the file's line (which
# holds the value it replaced), and a relative path a flag gave is the working directory's.
FILE_WITH_COUNT = "app:\n  name: roundtrip_latency\n  count: 10000\n"  # count: line 3


@pytest.mark.parametrize(
    ("overrides", "flags", "message"),
    [
        (
            {"app.count": 0},
            {"app.count": "--set app.count=0"},
            "--set app.count=0: app.count: 0 is below the minimum 1",
        ),
        ({"app.count": 0}, None, "override app.count=0: app.count: 0 is below the minimum 1"),
        (
            {"app.cuont": 5},
            {"app.cuont": "--set app.cuont=5"},
            "--set app.cuont=5: app.cuont: unknown key",
        ),
        (
            {"transceiver.queues": {"rx_depth": 3}},
            {"transceiver.queues": "--set transceiver.queues={rx_depth: 3}"},
            "--set transceiver.queues={rx_depth: 3}: transceiver.queues.rx_depth: 3: must be a "
            "power of two",
        ),
        (
            {"peer.link": "udp"},
            {"peer.link": "--set peer.link=udp"},
            "--set peer.link=udp: peer.link: peer.link 'udp' needs transceiver.nic 'socket'",
        ),
    ],
    ids=["set", "no-flag-named", "unknown-key", "inside-a-mapping", "keys-together"],
)
def test_an_error_in_an_override_names_the_flag_not_the_files_line(
    tmp_path, overrides, flags, message
):
    path = write(tmp_path, FILE_WITH_COUNT + "transceiver:\n  queues: {rx_depth: 64}\n")
    with pytest.raises(ConfigError) as e:
        load_app_config(path, overrides, flags=flags)
    assert str(e.value).startswith(message), str(e.value)
    assert str(path) not in str(e.value)


def test_an_error_in_the_file_beside_an_override_still_names_its_line(tmp_path):
    path = write(tmp_path, FILE_WITH_COUNT + "peer:\n  size: 2\n")
    with pytest.raises(ConfigError) as e:
        load_app_config(path, {"app.count": 5}, flags={"app.count": "--count 5"})
    assert str(e.value).startswith(f"{path}:5: peer.size: 2 is below the minimum"), str(e.value)


@pytest.mark.parametrize(
    "override",
    [
        {"transceiver.custom.source": "mine.cu"},
        {"transceiver.custom": {"source": "mine.cu", "entry": "majority_vote"}},
        {"transceiver": {"handler": "custom", "custom": {"source": "mine.cu"}}},
    ],
    ids=["dotted", "a-mapping", "the-section"],
)
def test_a_relative_source_a_flag_gives_is_the_working_directorys(tmp_path, monkeypatch, override):
    folder, work = tmp_path / "configs", tmp_path / "work"
    folder.mkdir()
    work.mkdir()
    (folder / "mine.cu").write_text("// the YAML folder's: not the one the flag means\n")
    (work / "mine.cu").write_text("// the working directory's\n")
    path = folder / "app.yaml"
    path.write_text("app:\n  name: custom_handler\ntransceiver:\n  handler: custom\n")
    monkeypatch.chdir(work)
    cfg = load_app_config(path, override, app="custom_handler")
    assert cfg["transceiver"]["custom"]["source"] == str(work / "mine.cu")
    (work / "mine.cu").unlink()
    with pytest.raises(ConfigError) as e:
        load_app_config(path, override, app="custom_handler", flags=dict.fromkeys(override, "-s"))
    assert str(e.value) == (
        f"-s: transceiver.custom.source: 'mine.cu': no such file ({work / 'mine.cu'}: a "
        "relative path is read from the working directory)"
    )


def test_run_names_the_flag_of_a_bad_value(tmp_path):
    path = write(tmp_path, FILE_WITH_COUNT)
    for flag, says in (
        (["--set", "app.count=0"], "--set app.count=0: app.count: 0 is below the minimum 1"),
        (["--count", "0"], "--count 0: app.count: 0 is below the minimum 1"),
    ):
        proc = subprocess.run(
            [*CLI, "run", str(path), *flag],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert proc.returncode == 2, proc.stdout + proc.stderr
        errors = [line for line in proc.stderr.splitlines() if "error" in line]
        assert errors == [f"roundtrip_latency: error: {says}"], proc.stderr
