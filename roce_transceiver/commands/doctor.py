"""``roce-transceiver doctor``: the machine's set-up against what a configuration needs.

One line per check (pass, fail, n/a) with the fix under each failure; ``--json`` prints one
object instead. Exit status 0 when nothing fails, 1 when something does, 2 on bad usage or a
configuration that does not load. The run is bounded: ``--timeout`` seconds (plus the bridge's
announcement wait), after which the check still running fails and the rest are not run.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from roce_transceiver.argtypes import real
from roce_transceiver.commands import CommandError
from roce_transceiver.doctor import FAIL, NA, PASS, TIMEOUT_S, Machine, run_checks

__all__ = ["EXIT_FAILED", "register", "run"]

EXIT_FAILED = 1


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "doctor",
        help="check this machine's set-up (MTU, buffers, privileges, GPU, NIC, DOCA, HSB)",
        description="Check what the transceiver needs of this machine: interface MTU against "
        "the packet sizes, net.core.rmem_max, rp_filter and ARP for the peer, root or "
        "CAP_NET_RAW for packet mode, the GPU and driver, GPU-NIC PCIe topology, "
        "nvidia-peermem or dma-buf, the DOCA SDK and RDMA devices, the HSB's announcement. "
        "Each check prints pass, fail or n/a, and a failure its fix. With --config, only what "
        "the file uses; without, every check that needs no address. A file that is not what "
        "the kernel writes (a FIFO, a device, a directory, too long, a value out of range) "
        "fails its check. Exit status 1 when a check fails.",
    )
    p.add_argument("--config", metavar="FILE", help="a transceiver or app YAML file")
    p.add_argument("--json", action="store_true", help="print one JSON object instead")
    p.add_argument(
        "--root",
        metavar="DIR",
        default="/",
        help="read sysfs and proc under DIR (default /: a copy of another machine's, a "
        "container's host mount)",
    )
    p.add_argument(
        "--timeout",
        metavar="SECONDS",
        type=real(0, lo_open=True),
        default=TIMEOUT_S,
        help=f"end the run after SECONDS (default {TIMEOUT_S:g}), the bridge's announcement "
        "wait (hsb.enumeration_timeout_s) aside: the check still running fails, naming what "
        "it was reading",
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from roce_transceiver.schema import ConfigError

    root = Path(args.root)
    if not root.is_dir():
        raise CommandError(f"--root {args.root}: not a directory")
    cfg = None
    if args.config is not None:
        from roce_transceiver.config import load_config

        try:
            cfg = load_config(args.config)
        except ConfigError as e:
            raise CommandError(str(e)) from None
    machine = Machine(root=root)
    checks = run_checks(cfg, machine, timeout_s=args.timeout)
    failed = sum(c.status == FAIL for c in checks)
    if args.json:
        counts = {s: sum(c.status == s for c in checks) for s in (PASS, FAIL, NA)}
        print(
            json.dumps(
                {
                    "config": args.config,
                    "root": str(root),
                    "ok": not failed,
                    "counts": counts,
                    "checks": [c.as_dict() for c in checks],
                },
                indent=2,
            )
        )
    else:
        width = max(len(c.name) for c in checks)
        for c in checks:
            print(f"{c.status.upper():<4}  {c.name:<{width}}  {c.detail}")
            if c.status == FAIL and c.fix:
                print(f"{'':<4}  {'':<{width}}  fix: {c.fix}")
        verdict = f"{failed} check(s) failed" if failed else "nothing failed"
        print(f"doctor: {verdict} ({len(checks)} checks, config {args.config or 'none'})")
    if machine.left_behind:
        # A check's thread is still in a call that does not return, maybe holding the
        # dynamic loader's lock, which exit's handlers take (_dl_fini): end without them.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(EXIT_FAILED)
    return EXIT_FAILED if failed else 0
