"""``roce-transceiver bench``: run a benchmark of ``roce_transceiver.bench``."""

from __future__ import annotations

import argparse
import importlib

from roce_transceiver.commands import CommandError

__all__ = ["register", "run"]

_DEFAULT_SIZES = (64, 1024, 4096)


def _sizes(text: str) -> tuple[int, ...]:
    try:
        sizes = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: not a comma-separated list of sizes") from None
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: sizes must be positive byte counts")
    return sizes


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text}: must be more than 0 seconds")
    return value


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "bench",
        help="run a benchmark (icrc)",
        description="Run a benchmark; each prints one summary line and can write JSON.",
    )
    benches = p.add_subparsers(dest="bench", metavar="BENCHMARK", required=True)
    icrc = benches.add_parser(
        "icrc",
        help="ICRC throughput of the CPU and GPU implementations",
        description="Measure the ICRC throughput of the protocol core's implementations "
        "for frames of the given sizes.",
    )
    icrc.add_argument(
        "--sizes",
        type=_sizes,
        default=_DEFAULT_SIZES,
        metavar="N,N,...",
        help="frame sizes in bytes (default " + ",".join(map(str, _DEFAULT_SIZES)) + ")",
    )
    icrc.add_argument(
        "--seconds", type=_seconds, default=1.0, help="time per measurement (default 1)"
    )
    icrc.add_argument("--json", metavar="FILE", help="also write the results as JSON to FILE")
    icrc.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    module_name = f"roce_transceiver.bench.{args.bench}"
    # Imported here: the benchmarks pull in heavier dependencies than the rest of the CLI.
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name in ("roce_transceiver.bench", module_name):
            raise CommandError(f"bench {args.bench}: {module_name} is not in this build") from None
        # Something the benchmark needs is missing: name it.
        raise CommandError(f"bench {args.bench}: cannot import {module_name}: {e}") from None
    module.run(sizes=args.sizes, seconds=args.seconds, json_path=args.json)
    return 0
