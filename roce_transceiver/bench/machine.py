"""What a benchmark ran on, for its JSON: one description shared by every benchmark."""

from __future__ import annotations

import os
import platform
from typing import Any

from roce_transceiver import __version__, _core

__all__ = ["cpu_model", "machine_info"]


def cpu_model() -> str:
    """The CPU's model name (from /proc/cpuinfo where there is one)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_info(**extra: Any) -> dict[str, Any]:
    """CPU, platform, Python, this package, the CUDA build and GPUs, plus ``extra``."""
    cuda = _core.cuda_runtime_info()
    return {
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "machine": platform.machine(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "roce_transceiver": __version__,
        "built_with_cuda": bool(_core.built_with_cuda),
        "cuda_runtime_version": cuda["runtime_version"],
        "cuda_driver_version": cuda["driver_version"],
        "gpus": [g["name"] for g in cuda["gpus"]],
        "cuda_error": cuda["error"],
        **extra,
    }
