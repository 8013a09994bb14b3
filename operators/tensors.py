"""Holoscan tensors to numpy: a host tensor viewed in place, a device tensor copied over."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["on_device", "to_host"]


def on_device(tensor: Any) -> bool:
    """Whether ``tensor`` lies in GPU memory."""
    try:
        return getattr(tensor, "__cuda_array_interface__", None) is not None
    except (AttributeError, RuntimeError, TypeError):
        return False


def to_host(tensor: Any) -> np.ndarray:
    """``tensor``'s bytes on the host: a view of host memory, a copy of device memory."""
    if on_device(tensor):
        import cupy

        return cupy.asnumpy(cupy.asarray(tensor))
    return np.asarray(tensor)
