"""``roce-transceiver echo``: run a transceiver's loop and watch its counters.

Runs the transceiver configured by ``--config`` (its handler: echo, qec...) until
``--seconds`` pass or Ctrl-C (or SIGTERM, SIGHUP), printing the counters that moved once a
second on stderr, then a summary on stdout (``--json``: one JSON object). Exit status 0; 1 when
the capture (``socket.capture``) lost frames to a write error, which stderr names.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from roce_transceiver.argtypes import SECONDS
from roce_transceiver.commands.running import (
    capture_failed,
    check_positive,
    moved,
    running_transceiver,
)

__all__ = ["register", "run"]


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "echo",
        help="run the transceiver of a config file and show its counters",
        description="Run the transceiver configured by --config (usually with the socket NIC, "
        "so peers can reach it) until --seconds pass or Ctrl-C.",
    )
    p.add_argument("--config", required=True, metavar="FILE", help="the transceiver's YAML")
    p.add_argument("--seconds", type=SECONDS, help="stop after this long (default: Ctrl-C)")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    p.add_argument("--json", action="store_true", help="print the final counters as JSON")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    check_positive("echo", seconds=args.seconds)
    with running_transceiver("echo", args.config, banner="Ctrl-C stops") as t:
        start = time.monotonic()
        next_report = start + 1.0
        while args.seconds is None or time.monotonic() - start < args.seconds:
            time.sleep(0.01)  # a poll interval: the loop runs on its own
            if time.monotonic() >= next_report:
                next_report += 1.0
                if not args.quiet:
                    elapsed = time.monotonic() - start
                    print(f"[{elapsed:5.1f} s] {fmt(moved(t.stats()))}", file=sys.stderr)
    stats = t.stats()
    if args.json:
        print(json.dumps(stats))
    else:
        print(f"after {time.monotonic() - start:.1f} s: {fmt(moved(stats)) or 'nothing received'}")
    return 1 if capture_failed("echo", t) else 0


def fmt(counters: dict[str, int]) -> str:
    return " ".join(f"{k}={v}" for k, v in counters.items())
