"""cuda.warps as the cuda executor takes it: the warps of the block that serves a queue, with
``auto`` (0) resolved: a crew for the frames handler's streams, one warp for requests (a crew's
kernel spills at its register bound, and a lone request is slower on it: docs/ARCHITECTURE.md).
"""

from __future__ import annotations

from typing import Any

__all__ = ["AUTO_FRAMES_WARPS", "cuda_warps"]

#: The crew of warps for the frames handler's streams, when cuda.warps is auto.
AUTO_FRAMES_WARPS = 8


def cuda_warps(cfg: dict[str, Any]) -> int:
    """cuda.warps as the cuda executor takes it (0, auto: a crew for the frames handler)."""
    asked = int(cfg["cuda"]["warps"])
    if asked:
        return asked
    return AUTO_FRAMES_WARPS if cfg["handler"] == "frames" else 1
