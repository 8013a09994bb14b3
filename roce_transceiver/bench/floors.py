"""Latency floors: the best round trip any design could reach on this machine.

Every round-trip benchmark prints its own figure next to these floors, measured in the same run
(DESIGN.md section 8), so the figure reads as a ratio to what the hardware allows. Each floor
runs ``_core.FLOOR_WARMUP`` round trips first, then returns one time per measured round trip:

- ``cpu_thread_pingpong``: two CPU threads answer each other through two cache lines (acquire
  loads, release stores, pause while spinning); host ``steady_clock``. The cpu executor's floor.
- ``pinned_pingpong``: the host writes a flag in mapped pinned memory, a persistent kernel of one
  thread answers in another (system-scope acquire/release); host ``steady_clock``.
- ``device_block_pingpong``: two thread blocks of one kernel answer each other through flags in
  device memory (device-scope acquire/release); timed on the GPU in SM cycles, converted to ns
  by ``%globaltimer`` over the whole run (``%globaltimer`` alone ticks too coarsely).
- ``launch_per_message`` / ``launch_per_message_graph``: copy a message into pinned memory,
  launch a kernel that echoes it (plainly, or as a CUDA graph), synchronise the stream, check
  the echo; host ``steady_clock`` from the copy to the end of the synchronisation.

``measure_floors`` is the function benchmarks call; a floor that cannot be measured here (no
GPU, a CPU-only build, a kernel that stopped answering) comes back as the reason, a string.

``python -m roce_transceiver.bench.floors [--iterations N] [--timeout S] [--size B]
[--floors a,b] [--json FILE]`` prints the table and one summary line.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

from roce_transceiver import _core
from roce_transceiver.argtypes import COUNT, SECONDS, integer
from roce_transceiver.bench.machine import machine_info
from roce_transceiver.stats import Mean, Percentiles, check_unit

DEFAULT_ITERATIONS = 10_000
DEFAULT_TIMEOUT_S = 2.0
DEFAULT_SIZE = 32

__all__ = [
    "FLOORS",
    "FLOOR_NAMES",
    "Floor",
    "Percentiles",
    "format_table",
    "main",
    "measure_floors",
    "run",
]


# Nanoseconds in one of each unit a Percentiles may carry.
@dataclass(frozen=True)
class Floor:
    """One floor: what it measures, which clock times it, and how to run it."""

    name: str
    what: str
    clock: str
    gpu: bool
    # (iterations, timeout_s, size) -> round trips in ns
    measure: Callable[[int, float, int], list[float]]


FLOORS: dict[str, Floor] = {
    f.name: f
    for f in (
        Floor(
            "cpu_thread_pingpong",
            "two CPU threads, flags in ordinary memory",
            "host",
            False,
            lambda n, timeout, _size: _core.floor_cpu_thread_pingpong(n, timeout),
        ),
        Floor(
            "pinned_pingpong",
            "host <-> persistent kernel, flags in pinned memory",
            "host",
            True,
            lambda n, timeout, _size: _core.floor_pinned_pingpong(n, timeout),
        ),
        Floor(
            "device_block_pingpong",
            "two thread blocks, flags in device memory",
            "GPU",
            True,
            lambda n, timeout, _size: _core.floor_device_block_pingpong(n, timeout),
        ),
        Floor(
            "launch_per_message",
            "copy, kernel launch, stream sync, per message",
            "host",
            True,
            lambda n, _timeout, size: _core.floor_launch_per_message(n, size, False),
        ),
        Floor(
            "launch_per_message_graph",
            "copy, CUDA graph launch, stream sync, per message",
            "host",
            True,
            lambda n, _timeout, size: _core.floor_launch_per_message(n, size, True),
        ),
    )
}
FLOOR_NAMES: tuple[str, ...] = tuple(FLOORS)


def measure_floors(
    which: Sequence[str] = FLOOR_NAMES,
    iterations: int = DEFAULT_ITERATIONS,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    *,
    size: int = DEFAULT_SIZE,
) -> dict[str, Percentiles | str]:
    """Measure each named floor in turn; figures in ns.

    ``timeout_s`` bounds each wait of the ping-pongs (the kernel's and the host's); ``size`` is
    the message of the launch floors. A floor that cannot be measured maps to the reason (no
    GPU, a CPU-only build, a timeout naming what was outstanding) instead of a Percentiles.
    Raises ValueError for an unknown name or an argument out of range.
    """
    unknown = [name for name in which if name not in FLOORS]
    if unknown:
        raise ValueError(
            f"unknown floor {', '.join(map(repr, unknown))}: choose from {', '.join(FLOOR_NAMES)}"
        )
    results: dict[str, Percentiles | str] = {}
    for name in which:
        try:
            samples = FLOORS[name].measure(iterations, timeout_s, size)
        except RuntimeError as e:
            results[name] = str(e)
            continue
        results[name] = Percentiles.from_samples(samples, "ns")
    return results


def format_table(results: Mapping[str, Percentiles | Mean | str], unit: str = "us") -> str:
    """The results as a fixed-width table in ``unit``; an unmeasured floor shows its reason, a
    figure timed only in total (a Mean) its mean alone."""
    check_unit(unit)
    heads = ("min", "p50", "p99", "p99.9", "max", "mean")
    width = max([len("floor"), *map(len, results)])
    lines = [
        f"{'floor':<{width}} {'clock':<5} {'n':>8} "
        + " ".join(f"{h:>9}" for h in heads)
        + f"  ({unit})"
    ]
    for name, r in results.items():
        clock = FLOORS[name].clock if name in FLOORS else "-"
        if isinstance(r, str):
            lines.append(f"{name:<{width}} {clock:<5} {'-':>8} not measured: {r}")
            continue
        if isinstance(r, Mean):
            m = r.to(unit)
            lines.append(
                f"{name:<{width}} {clock:<5} {m.count:>8} "
                + " ".join(f"{'-':>9}" for _ in heads[:-1])
                + f" {m.mean:>9.3f}"
            )
            continue
        p = r.to(unit)
        cells = (p.min, p.p50, p.p99, p.p999, p.max, p.mean)
        lines.append(
            f"{name:<{width}} {clock:<5} {p.count:>8} " + " ".join(f"{c:>9.3f}" for c in cells)
        )
    return "\n".join(lines)


def summary_line(results: Mapping[str, Percentiles | str]) -> str:
    """One line, the way rc_pingpong ends: each floor's p50 in us, or that it was not measured."""
    parts = []
    for name, r in results.items():
        if isinstance(r, str):
            parts.append(f"{name} not measured")
        else:
            parts.append(f"{name} p50 {r.to('us').p50:.2f} us")
    return "floors: " + "; ".join(parts)


def run(
    which: Sequence[str] = FLOOR_NAMES,
    iterations: int = DEFAULT_ITERATIONS,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    size: int = DEFAULT_SIZE,
    json_path: str | None = None,
    *,
    out: TextIO | None = None,
) -> dict[str, Any]:
    """Measure the floors, print the table and a summary line, maybe write JSON; return it."""
    stream = sys.stdout if out is None else out
    machine = machine_info()
    gpus = ", ".join(machine["gpus"]) or f"no GPU ({machine['cuda_error']})"
    print(f"# {machine['cpu_model']}; {gpus}", file=stream)
    results = measure_floors(which, iterations, timeout_s, size=size)
    print(format_table(results), file=stream)
    summary = summary_line(results)
    print(summary, file=stream)
    result: dict[str, Any] = {
        "benchmark": "floors",
        "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "iterations": iterations,
        "warmup": _core.FLOOR_WARMUP,
        "timeout_s": timeout_s,
        "message_bytes": size,
        "machine": machine,
        "floors": {
            name: (
                {"error": r}
                if isinstance(r, str)
                else {**r.as_dict(), "clock": FLOORS[name].clock, "what": FLOORS[name].what}
            )
            for name, r in results.items()
        },
        "summary": summary,
    }
    if json_path is not None:
        with open(json_path, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=2)
            f.write("\n")
    return result


def _floor_list(text: str) -> tuple[str, ...]:
    names = tuple(part.strip() for part in text.split(",") if part.strip())
    unknown = [n for n in names if n not in FLOORS]
    if not names or unknown:
        raise argparse.ArgumentTypeError(
            f"{', '.join(unknown) or repr(text)}: not a floor; choose from {', '.join(FLOOR_NAMES)}"
        )
    return names


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m roce_transceiver.bench.floors``."""
    p = argparse.ArgumentParser(
        prog="python -m roce_transceiver.bench.floors",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--iterations",
        type=integer(1, _core.FLOOR_MAX_ITERATIONS),
        default=DEFAULT_ITERATIONS,
        help="per floor",
    )
    p.add_argument(
        "--timeout", type=SECONDS, default=DEFAULT_TIMEOUT_S, help="seconds one wait may last"
    )
    p.add_argument("--size", type=COUNT, default=DEFAULT_SIZE, help="message bytes (launch floors)")
    p.add_argument(
        "--floors", type=_floor_list, default=FLOOR_NAMES, metavar="NAME,...", help="default: all"
    )
    p.add_argument("--json", metavar="FILE", help="also write the results as JSON to FILE")
    args = p.parse_args(argv)
    try:
        run(args.floors, args.iterations, args.timeout, args.size, args.json)
    except ValueError as e:
        p.error(str(e))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
