"""``nic: doca`` on a machine without the hardware: what the backend looks for, found the way
it will look (dlopen of the DOCA SDK's libraries from its prefix, libibverbs'
ibv_get_device_list), and the one message that says what is missing.

Oracles: SDK prefixes the test builds itself (empty; shared libraries exporting some of the
entry points, compiled here), and libibverbs where installed (CI installs it: no RDMA device
there, so ibv_get_device_list must find none).
"""

from __future__ import annotations

import shutil
import subprocess

import pytest
from conftest import skip_missing

from roce_transceiver import _core
from roce_transceiver.config import core_config, load_config
from roce_transceiver.doca import missing
from roce_transceiver.transceiver import Transceiver, TransceiverError

LIBS = ("libdoca_common.so", "libdoca_verbs.so", "libdoca_gpunetio.so")


def fake_sdk(root, exports: dict[str, list[str]]):
    """An SDK prefix whose libraries export ``exports[lib]`` (empty functions)."""
    compiler = shutil.which("g++") or shutil.which("c++")
    if compiler is None:
        pytest.skip("no C++ compiler to build the fake SDK's libraries with")
    libdir = root / "lib" / "x86_64-linux-gnu"
    libdir.mkdir(parents=True)
    for lib, names in exports.items():
        src = root / f"{lib}.cpp"
        src.write_text("".join(f'extern "C" void {n}() {{}}\n' for n in names) or "int x;\n")
        subprocess.run(
            [compiler, "-shared", "-fPIC", str(src), "-o", str(libdir / lib)],
            check=True,
            timeout=120,
        )
    return root


def test_no_sdk_names_the_prefix_and_the_libraries(tmp_path, monkeypatch):
    monkeypatch.setenv("DOCA_PATH", str(tmp_path))
    p = _core.doca_probe(str(tmp_path))
    assert p["libraries_found"] == [] and tuple(p["libraries_missing"]) == LIBS
    message = missing("mlx5_0")
    assert f"no DOCA SDK found at {tmp_path}: none of libdoca_common.so" in message
    assert "NICs that work here: loopback" in message


def test_sdk_without_entry_points_names_them(tmp_path, monkeypatch):
    required = list(_core.doca_required_symbols)
    exported = required[:5]
    fake_sdk(
        tmp_path,
        {
            "libdoca_common.so": [],
            "libdoca_verbs.so": exported[3:],
            "libdoca_gpunetio.so": exported[:3],
        },
    )
    p = _core.doca_probe(str(tmp_path))
    assert len(p["libraries_found"]) == 3 and p["libraries_missing"] == []
    assert p["symbols_missing"] == required[5:]
    monkeypatch.setenv("DOCA_PATH", str(tmp_path))
    message = missing("mlx5_0")
    assert f"does not export {len(required) - 5} entry points the backend calls" in message
    assert required[5] in message


def test_sdk_with_every_entry_point_is_not_a_problem(tmp_path, monkeypatch):
    fake_sdk(
        tmp_path,
        {
            "libdoca_common.so": [],
            "libdoca_verbs.so": [],
            "libdoca_gpunetio.so": list(_core.doca_required_symbols),
        },
    )
    assert _core.doca_probe(str(tmp_path))["symbols_missing"] == []
    monkeypatch.setenv("DOCA_PATH", str(tmp_path))
    assert "DOCA SDK" not in missing("mlx5_0").split(": ", 1)[1].split(";")[0]


def test_rdma_devices_through_ibv_get_device_list(tmp_path):
    p = _core.doca_probe(str(tmp_path))
    message = missing("mlx5_0")
    if not p["ibverbs_loaded"]:
        assert "libibverbs did not load" in message and "apt-get install libibverbs1" in message
        skip_missing("libibverbs", f"libibverbs not installed here ({p['ibverbs_error']})")
    if p["rdma_devices"]:
        pytest.skip(f"this machine has RDMA devices: {p['rdma_devices']}")
    assert "ibv_get_device_list found no device" in message


def test_the_core_refuses_nic_doca_with_the_same_message(tmp_path, monkeypatch):
    """The refusal is the core's DocaNic (made by make_nic): the Python Transceiver and a
    caller of _core alike get it, and it is what doca.missing() says."""
    monkeypatch.setenv("DOCA_PATH", str(tmp_path))
    cfg = {"executor": "cpu", "nic": "doca", "doca": {"device": "mlx5_7"}}
    with pytest.raises(TransceiverError) as e:
        Transceiver(cfg)
    assert str(e.value) == missing("mlx5_7")
    assert str(e.value).startswith(f"nic 'doca' cannot start here: no DOCA SDK found at {tmp_path}")
    assert "(set DOCA_PATH" not in str(e.value)  # it is set: no hint to set it
    with pytest.raises(RuntimeError, match="nic 'doca' cannot start here"):
        _core.Transceiver(core_config(load_config(cfg), "cpu", None))


def test_without_doca_path_the_refusal_says_how_to_set_it(monkeypatch):
    monkeypatch.delenv("DOCA_PATH", raising=False)
    assert "(set DOCA_PATH to the SDK's prefix)" in missing("mlx5_0") or (
        "no DOCA SDK found" not in missing("mlx5_0")  # an SDK installed at the usual prefix
    )
