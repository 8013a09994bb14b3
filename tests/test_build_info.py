"""What the build reports about itself, and how GPU entry points fail without a GPU.

Goal: `roce-transceiver info` and the Python API tell the truth about CUDA
support, and a GPU-only call on a machine without a usable GPU raises an
error that says why instead of crashing. Oracle: the environment the tests
run in (RT_CUDA=ON in CI means nvcc must have been found and used).
"""

from __future__ import annotations

import os

import pytest
from conftest import skip_missing

from roce_transceiver import _core


def test_cuda_build_present_when_ci_demands_it() -> None:
    if os.environ.get("RT_CUDA", "").upper() != "ON":
        pytest.skip("RT_CUDA=ON not set: this run does not require the CUDA build")
    assert _core.built_with_cuda


def test_runtime_info_is_consistent() -> None:
    info = _core.cuda_runtime_info()
    assert info["built"] == _core.built_with_cuda
    if info["gpus"]:
        assert info["error"] == ""
        assert all(g["compute_capability"] for g in info["gpus"])
    else:
        assert info["error"], "no GPU and no reason given"


def test_device_call_without_gpu_raises_a_clear_error() -> None:
    if _core.cuda_runtime_info()["gpus"]:
        pytest.skip("a GPU is visible: the no-GPU error path cannot be exercised here")
    with pytest.raises(RuntimeError, match=r"CUDA|cuda"):
        _core.icrc_on_device(b"\x00" * 64, [0], [64])


def test_gpunetio_device_api_built_where_ci_points_at_its_headers(tmp_path) -> None:
    """CI (nvcc present) fetches GPUNetIO's headers and sets RT_GPUNETIO_INCLUDE: the device
    API must then be compiled in, and the structures the device code reads must have the
    sizes a host compiler gives them from the same headers (a software NIC fills them)."""
    import shutil
    import subprocess

    info = _core.gpunetio_info()
    include = os.environ.get("RT_GPUNETIO_INCLUDE")
    if not (include and _core.built_with_cuda):
        assert info["source"], info  # built from somewhere, or why not
        skip_missing(
            "gpunetio", "no RT_GPUNETIO_INCLUDE with a CUDA build: the device API is not required"
        )
    assert info["built"], info
    if info["source"].startswith("RT_GPUNETIO_INCLUDE="):  # CI: built from what it points at
        assert info["source"] == f"RT_GPUNETIO_INCLUDE={include}", info
    compiler = shutil.which("g++") or shutil.which("c++")
    if compiler is None:
        pytest.skip("no host C++ compiler to size the structures with")
    src = tmp_path / "sizes.cpp"
    src.write_text(
        '#include <cstdio>\n#include "common/doca_gpunetio_verbs_dev.h"\n'
        'int main() { std::printf("%zu %zu %zu", sizeof(doca_gpu_dev_verbs_qp), '
        "sizeof(doca_gpu_dev_verbs_cq), sizeof(doca_gpu_dev_verbs_wqe)); }\n"
    )
    exe = tmp_path / "sizes"
    subprocess.run(
        [compiler, "-std=c++17", "-I", include, str(src), "-o", str(exe)], check=True, timeout=120
    )
    sizes = subprocess.run([str(exe)], capture_output=True, text=True, check=True, timeout=30)
    qp, cq, wqe = map(int, sizes.stdout.split())
    # The descriptor sizes differ between GPUNetIO releases (280 / 56 in the NCCL wheel on the
    # GPU machine, 296 / 64 in nvshmem 3.8's): what matters is that both compilers agree.
    assert (info["qp_bytes"], info["cq_bytes"], info["wqe_bytes"]) == (qp, cq, wqe)
    assert wqe == 64  # one mlx5 WQE basic block


def test_info_reports_gpunetio() -> None:
    from roce_transceiver.commands.info import collect

    g = collect()["gpunetio"]
    assert set(g) == {"built", "source", "qp_bytes", "cq_bytes", "wqe_bytes", "blueflame"}
