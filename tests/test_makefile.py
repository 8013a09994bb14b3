"""The Makefile's install (what ``make demo`` and ``make test`` build): the CUDA parts only
where a GPU can run them or the caller asks.

Goal: without a GPU the build leaves the CUDA code out (minutes of nvcc a demo cannot use),
with one it builds it, and the caller's RT_CUDA (.ci/run exports RT_CUDA=ON where nvcc is)
wins either way. Oracle: the pip command ``make -n install`` prints (nothing is built), with
a stand-in ``nvidia-smi`` first on PATH that lists a GPU, or fails as it does on a machine
with the driver and no GPU.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

LISTS_A_GPU = "#!/bin/sh\necho 'GPU 0: NVIDIA H200 (UUID: GPU-0)'\n"
NO_GPU = "#!/bin/sh\necho 'No devices were found'\nexit 6\n"


def pip_line(tmp_path: Path, smi: str | None, *make_args: str, rt_cuda: str | None = None) -> str:
    """The pip install line of ``make -n install`` with ``smi`` as nvidia-smi (None: none)."""
    if shutil.which("make") is None:
        pytest.skip("make not found (apt-get install make)")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    smi_path = bin_dir / "nvidia-smi"
    smi_path.unlink(missing_ok=True)
    if smi is not None:
        smi_path.write_text(smi)
        smi_path.chmod(0o755)
    # Only the tools the recipe's shell calls need to be found; a real nvidia-smi must not.
    path = [str(bin_dir), *(d for d in ("/usr/bin", "/bin") if Path(d).is_dir())]
    env = {k: v for k, v in os.environ.items() if k != "RT_CUDA"}
    env["PATH"] = os.pathsep.join(path)
    if rt_cuda is not None:
        env["RT_CUDA"] = rt_cuda
    make = shutil.which("make")
    assert make is not None
    done = subprocess.run(
        [make, "-n", "-C", str(ROOT), "install", f"VENV={tmp_path / 'venv'}", *make_args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stdout.splitlines() if "pip install" in line]
    assert len(lines) == 1, done.stdout
    return lines[0]


def test_no_gpu_builds_without_cuda(tmp_path: Path) -> None:
    assert pip_line(tmp_path, None).startswith("RT_CUDA=OFF ")
    assert pip_line(tmp_path, NO_GPU).startswith("RT_CUDA=OFF ")  # the driver, no GPU


def test_a_gpu_builds_the_cuda_parts(tmp_path: Path) -> None:
    assert pip_line(tmp_path, LISTS_A_GPU).startswith("RT_CUDA=ON ")


@pytest.mark.parametrize("value", ["ON", "AUTO", "OFF"])
def test_the_callers_rt_cuda_wins(tmp_path: Path, value: str) -> None:
    smi = LISTS_A_GPU if value == "OFF" else None
    assert pip_line(tmp_path, smi, rt_cuda=value).startswith(f"RT_CUDA={value} ")  # .ci/run
    assert pip_line(tmp_path, smi, f"RT_CUDA={value}").startswith(f"RT_CUDA={value} ")
