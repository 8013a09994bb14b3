"""``roce-transceiver info``: what this build and this machine support."""

from __future__ import annotations

import argparse
import json
import platform
import sys
from typing import Any

from roce_transceiver import __version__, _core, custom_handler
from roce_transceiver.config import load_config

__all__ = ["BACKENDS", "collect", "register", "run"]

#: Data-path backends (DESIGN.md sections 2, 4, 5) and whether this build has them; the ones
#: not written yet are listed so that `info` says plainly what is missing.
BACKENDS: dict[str, bool] = {
    "protocol core": True,
    "cpu executor": True,
    "cuda executor": bool(_core.built_with_cuda),
    "loopback NIC": True,
    "socket NIC": True,
    "doca NIC": False,
}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "info",
        help="show the version, CUDA support, GPUs and backends of this build",
        description="Show the version, whether CUDA support was built, the GPUs the CUDA "
        "runtime sees, the CRC-32 implementation and the backends of this build.",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object instead")
    p.set_defaults(run=run)


def collect() -> dict[str, Any]:
    """Everything ``info`` reports, as plain data."""
    cuda = dict(_core.cuda_runtime_info())
    return {
        "version": __version__,
        "built_with_cuda": bool(_core.built_with_cuda),
        "cuda": cuda,
        "crc32_impl": _core.crc32_impl(),
        "gpunetio": dict(_core.gpunetio_info()),
        "backends": {
            name: "available" if built else "not built yet" for name, built in BACKENDS.items()
        },
        "gpu_sharing": _gpu_sharing(),
        "nvrtc": _nvrtc(),
        "handler_link": _handler_link(),
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "python_executable": sys.executable,
        "platform": platform.platform(),
    }


def _gpu_sharing() -> dict[str, Any]:
    """What a graph may do on the GPU while the cuda executor's loop runs (docs/gpu_sharing.md),
    at the default cuda.epoch_us."""
    cuda = load_config()["cuda"]
    epoch_us, queued = cuda["epoch_us"], cuda["epochs_in_flight"]
    if epoch_us:
        graph = (
            f"anything: kernel loads at first use (cupy, cuBLAS, NVRTC) wait at most "
            f"{queued} epoch(s) of {epoch_us} us, then the load"
        )
    else:
        graph = "allocations, copies, kernels loaded before start(); a load at first use waits"
    return {"epoch_us": epoch_us, "graph_may": graph}


def _nvrtc() -> dict[str, Any]:
    """Whether user handlers compile here (check-handler; docs/handlers.md)."""
    status = custom_handler.nvrtc_status()
    return {"available": status.available, "version": status.version, "reason": status.reason}


def _handler_link() -> dict[str, Any]:
    """Whether a user handler links into the engine's kernels here (the cuda executor's)."""
    status = custom_handler.link_status()
    return {
        "available": status.available,
        "nvjitlink": status.version,
        "engines": list(status.engines),
        "reason": status.reason,
    }


def _cuda_version(encoded: int) -> str:
    # CUDA encodes versions as 1000 * major + 10 * minor (13000 is 13.0).
    return f"{encoded // 1000}.{encoded % 1000 // 10}"


def _print_text(info: dict[str, Any]) -> None:
    cuda = info["cuda"]
    print(f"roce-transceiver {info['version']}")
    print(f"  python      {info['python']} ({info['python_executable']})")
    print(f"  platform    {info['platform']}")
    if info["built_with_cuda"]:
        runtime = _cuda_version(cuda["runtime_version"]) if cuda["runtime_version"] else "?"
        print(f"  cuda        built with CUDA support (runtime {runtime})")
    else:
        print("  cuda        built without CUDA support")
    if cuda["gpus"]:
        for gpu in cuda["gpus"]:
            memory_gib = gpu["memory_bytes"] / 2**30
            print(
                f"  gpu {gpu['index']}       {gpu['name']}, sm {gpu['compute_capability']}, "
                f"{gpu['multiprocessors']} SMs, {memory_gib:.0f} GiB"
            )
    else:
        reason = f": {cuda['error']}" if cuda["error"] else ""
        print(f"  gpus        none visible{reason}")
    share = info["gpu_sharing"]
    print(f"  gpu share   cuda.epoch_us {share['epoch_us']}: a graph may run {share['graph_may']}")
    nvrtc = info["nvrtc"]
    if nvrtc["available"]:
        print(f"  nvrtc       {nvrtc['version']}: user handlers compile (check-handler)")
    else:
        print(f"  nvrtc       not available: {nvrtc['reason']}")
    link = info["handler_link"]
    if link["available"]:
        print(
            f"  nvjitlink   {link['nvjitlink']}: a handler links into the engine's kernels "
            f"({', '.join(link['engines'])}) at start, on the cuda executor"
        )
    else:
        print(f"  nvjitlink   a handler cannot be linked into the engine here: {link['reason']}")
    print(f"  crc32       {info['crc32_impl']}")
    g = info["gpunetio"]
    state = "device API built in" if g["built"] else "device API not built"
    print(f"  gpunetio    {state}; {g['source']}")
    for i, (name, state) in enumerate(info["backends"].items()):
        label = "backends" if i == 0 else ""
        print(f"  {label:<11} {name}: {state}")


def run(args: argparse.Namespace) -> int:
    info = collect()
    if args.json:
        print(json.dumps(info))
    else:
        _print_text(info)
    return 0
