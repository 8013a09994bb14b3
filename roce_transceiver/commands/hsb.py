"""``roce-transceiver hsb``: a Holoscan Sensor Bridge's control plane from the command line.

- ``hsb enumerate``: listen for bridges' announcements and list each data plane heard (IP,
  MAC, board, serial, HSB IP version, sensors); exit 1 when none was heard.
- ``hsb read ADDR [--count N]``: registers of the bridge at ``--bridge IP`` (or the config's
  ``hsb.bridge``), one ``address value`` line each (a block read for more than one).
- ``hsb write ADDR VALUE [VALUE ...]``: write consecutive registers from ADDR.

Every failure (no reply, a status other than success, a bad address) is one line naming the
request and the bridge, exit status 2 (docs/hsb.md).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from roce_transceiver.argtypes import SECONDS, integer, uint
from roce_transceiver.commands import CommandError

__all__ = ["register"]

_PORT = integer(1, 65535)
_ADDRESS = integer(0, 0xFFFFFFFC, multiple_of=4, hex_ok=True, hex_range=True)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "hsb",
        help="a Holoscan Sensor Bridge's control plane: enumerate, read, write",
        description="Find Holoscan Sensor Bridges and read or write their registers over the "
        "Ethernet Control Bus.",
    )
    kinds = p.add_subparsers(dest="hsb", metavar="ACTION", required=True)
    e = kinds.add_parser("enumerate", help="list the bridges that announce themselves")
    e.add_argument("--seconds", type=SECONDS, default=2.0, help="how long to listen (default 2)")
    e.add_argument("--port", type=_PORT, default=12267, help="enumeration port (default 12267)")
    e.add_argument("--interface", help="listen on this interface only")
    e.add_argument("--json", action="store_true", help="one JSON object per data plane")
    e.set_defaults(run=run_enumerate)
    for name, helptext in (("read", "read registers"), ("write", "write registers")):
        q = kinds.add_parser(name, help=helptext)
        q.add_argument(
            "address", type=_ADDRESS, metavar="ADDR", help="register (0x hex or decimal)"
        )
        if name == "read":
            q.add_argument(
                "--count", type=integer(1, 4096), default=1, help="consecutive registers"
            )
        else:
            q.add_argument(
                "values", type=uint(32), nargs="+", metavar="VALUE", help="32-bit value(s)"
            )
        q.add_argument("--bridge", metavar="IP", help="the bridge (default: --config's hsb.bridge)")
        q.add_argument("--config", metavar="FILE", help="a transceiver YAML with an hsb: section")
        q.add_argument("--port", type=_PORT, help="control port (default 8192 or the config's)")
        q.add_argument("--timeout", type=SECONDS, help="seconds per try (default 0.25)")
        q.add_argument("--retries", type=integer(0, 100), help="tries after the first (default 4)")
        q.add_argument("--json", action="store_true", help="print JSON")
        q.set_defaults(run=run_read if name == "read" else run_write)


def run_enumerate(args: argparse.Namespace) -> int:
    from roce_transceiver.hsb_control import EnumerationError, enumerate_bridges

    try:
        found, problems = enumerate_bridges(args.seconds, port=args.port, interface=args.interface)
    except EnumerationError as e:
        raise CommandError(f"hsb enumerate: {e}") from None
    for a in found:
        d = a.as_dict()
        if args.json:
            print(json.dumps(d), flush=True)
        else:
            print(
                f"{d['ip']} mac {d['mac']} data plane {d['data_plane']}: {d['board']} "
                f"(uuid {d['uuid'] or '-'}) serial {d['serial']} HSB IP {d['hsb_ip_version']:#06x} "
                f"fpga crc {d['fpga_crc']:#06x}, {d['sensors']} sensors",
                flush=True,
            )
    for line in problems:
        print(f"hsb enumerate: ignored: {line}", flush=True)
    if not found:
        print(f"hsb enumerate: no bridge heard in {args.seconds:g} s on UDP port {args.port}")
    return 0 if found else 1


def _client(args: argparse.Namespace, command: str) -> Any:
    from roce_transceiver.config import ConfigError, load_config
    from roce_transceiver.hsb_control import Ecb

    h: dict[str, Any] = {}
    if args.config:
        try:
            h = load_config(args.config)["hsb"]
        except (ConfigError, OSError) as e:
            raise CommandError(f"hsb {command}: {e}") from None
    bridge = args.bridge or h.get("bridge")
    if not bridge:
        raise CommandError(f"hsb {command}: which bridge? --bridge IP, or --config with hsb.bridge")
    try:
        return Ecb(
            bridge,
            args.port or h.get("control_port", 8192),
            timeout=args.timeout or h.get("timeout_s", 0.25),
            retries=args.retries if args.retries is not None else h.get("retries", 4),
            sequence_check=h.get("sequence_check", True),
        )
    except ValueError as e:
        raise CommandError(f"hsb {command}: --bridge {e}") from None


def run_read(args: argparse.Namespace) -> int:
    from roce_transceiver.hsb_control import EcbError

    addresses = [args.address + 4 * i for i in range(args.count)]
    if addresses[-1] > 0xFFFFFFFC:
        raise CommandError(f"hsb read: --count {args.count} runs past address 0xfffffffc")
    with _client(args, "read") as ecb:
        try:
            values = ecb.read_block(addresses) if args.count > 1 else [ecb.read(args.address)]
        except EcbError as e:
            raise CommandError(f"hsb read: {e}") from None
    if args.json:
        print(json.dumps({f"{a:#010x}": v for a, v in zip(addresses, values, strict=True)}))
    else:
        for a, v in zip(addresses, values, strict=True):
            print(f"{a:#010x} {v:#010x}")
    return 0


def run_write(args: argparse.Namespace) -> int:
    from roce_transceiver.hsb_control import EcbError

    pairs = [(args.address + 4 * i, v) for i, v in enumerate(args.values)]
    if pairs[-1][0] > 0xFFFFFFFC:
        raise CommandError("hsb write: the values run past address 0xfffffffc")
    with _client(args, "write") as ecb:
        try:
            if len(pairs) > 1:
                ecb.write_block(pairs)
            else:
                ecb.write(*pairs[0])
        except EcbError as e:
            raise CommandError(f"hsb write: {e}") from None
    if args.json:
        print(json.dumps({f"{a:#010x}": v for a, v in pairs}))
    return 0
