"""What the build reports about itself, and how GPU entry points fail without a GPU.

Goal: `roce-transceiver info` and the Python API tell the truth about CUDA
support, and a GPU-only call on a machine without a usable GPU raises an
error that says why instead of crashing. Oracle: the environment the tests
run in (RT_CUDA=ON in CI means nvcc must have been found and used).
"""

from __future__ import annotations

import os

import pytest

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
