"""``roce-transceiver craft``: write RoCEv2 packets built by ``protocol.build`` to a pcap."""

from __future__ import annotations

import argparse
import contextlib
import os
import stat
import time
from typing import Any

from roce_transceiver import protocol
from roce_transceiver.argtypes import integer, real, uint
from roce_transceiver.commands import CommandError
from roce_transceiver.pcap import PcapWriter

__all__ = ["register", "run"]

# Option dest -> the extension header it fills. build() ignores a field whose header the
# opcode lacks; the CLI refuses it instead, since the user clearly expected it on the wire.
_HEADER_OF = {
    "va": "RETH",
    "rkey": "RETH",
    "dma_len": "RETH",
    "imm": "ImmDt",
    "syndrome": "AETH",
    "msn": "AETH",
}
_PASSED_THROUGH = (
    "dest_qp",
    "ip_src",
    "ip_dst",
    "eth_src",
    "eth_dst",
    "udp_sport",
    "pkey",
    *_HEADER_OF,
)
_IPV6_DEFAULTS = ("fd00::1", "fd00::2")
_PACKET_INTERVAL_S = 1e-6  # spacing of the timestamps of consecutive crafted packets
# Packets per run: one PSN circle (2**24); more would repeat every PSN.
_COUNT = integer(1, 1 << 24, hex_ok=True)
# The core refuses a payload over 0xFFFF (no IP packet carries more); the exact limit, a
# little less with the headers, is build()'s to name.
_PAYLOAD_SIZE = integer(0, 0xFFFF, hex_ok=True)
# A classic pcap's timestamp: u32 seconds.
_TIMESTAMP = real(0, 2**32 - 1)


def _hex_bytes(text: str) -> bytes:
    cleaned = text.removeprefix("0x").replace(":", "").replace(" ", "")
    try:
        return bytes.fromhex(cleaned)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not hex bytes (e.g. deadbeef)") from None


def _opcode(text: str) -> int:
    try:
        value: int | str = int(text, 0)
    except ValueError:
        value = text
    try:
        return protocol.opcode_row(value).opcode
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "craft",
        help="write crafted RoCEv2 packets to a pcap file",
        description="Build RoCEv2 packets with protocol.build and write them to a pcap. "
        "Derived fields (lengths, pad, ICRC) are computed; the PSN advances by one per packet "
        "and wraps at 2**24. Integers may be decimal or 0x hex.",
        epilog="example: roce-transceiver craft --out w.pcap --opcode UC_RDMA_WRITE_ONLY "
        "--count 4 --payload-size 256 --va 0x10000000 --rkey 0x1234 --udp-sport 12288",
    )
    p.add_argument("--out", required=True, metavar="FILE.pcap", help="pcap file to write")
    p.add_argument(
        "--opcode",
        required=True,
        type=_opcode,
        metavar="NAME_OR_NUMBER",
        help="e.g. UC_RDMA_WRITE_ONLY, RC_ACKNOWLEDGE, 0x2B or 36",
    )
    p.add_argument(
        "--count", type=_COUNT, default=1, help="number of packets, 1 to 2**24 (default 1)"
    )
    payload = p.add_mutually_exclusive_group()
    payload.add_argument("--payload", type=_hex_bytes, metavar="HEX", help="payload bytes as hex")
    payload.add_argument(
        "--payload-size",
        type=_PAYLOAD_SIZE,
        metavar="N",
        help="payload of N bytes 00 01 02 ... (mod 256)",
    )
    p.add_argument("--dest-qp", type=uint(24), help="BTH destination QP")
    p.add_argument("--psn", type=uint(24), default=0, help="PSN of the first packet (default 0)")
    p.add_argument("--ack-req", action="store_true", help="set the BTH AckReq bit")
    p.add_argument("--pkey", type=uint(16), help="BTH partition key (default 0xffff)")
    p.add_argument("--va", type=uint(64), help="RETH virtual address")
    p.add_argument("--rkey", type=uint(32), help="RETH remote key")
    p.add_argument("--dma-len", type=uint(32), help="RETH DMA length (default: the payload length)")
    p.add_argument("--imm", type=uint(32), help="immediate data (opcodes WITH_IMMEDIATE)")
    p.add_argument("--syndrome", type=uint(8), help="AETH syndrome (0x1f ACK, 0x60 PSN seq NAK)")
    p.add_argument("--msn", type=uint(24), help="AETH message sequence number")
    p.add_argument("--ip-src", metavar="ADDR", help="source IPv4/IPv6 address (default 10.0.0.1)")
    p.add_argument("--ip-dst", metavar="ADDR", help="destination address (default 10.0.0.2)")
    p.add_argument(
        "--ipv6",
        action="store_true",
        help=f"IPv6 with default addresses {_IPV6_DEFAULTS[0]} -> {_IPV6_DEFAULTS[1]}",
    )
    p.add_argument("--eth-src", metavar="MAC", help="source MAC (default 02:00:00:00:00:01)")
    p.add_argument("--eth-dst", metavar="MAC", help="destination MAC (default 02:00:00:00:00:02)")
    p.add_argument("--udp-sport", type=uint(16), help="UDP source port (HSB sensors use 12288)")
    p.add_argument(
        "--bad-icrc",
        action="store_true",
        help="write a wrong ICRC (all bits of the right one flipped)",
    )
    p.add_argument(
        "--timestamp",
        type=_TIMESTAMP,
        metavar="SECONDS",
        help=f"capture time of the first packet, then {_PACKET_INTERVAL_S:g} s apart (default now)",
    )
    p.add_argument("--nanosecond", action="store_true", help="write a nanosecond pcap")
    p.set_defaults(run=run)


def _build_fields(args: argparse.Namespace) -> dict[str, Any]:
    fields = {k: getattr(args, k) for k in _PASSED_THROUGH if getattr(args, k) is not None}
    if args.ipv6:
        fields.setdefault("ip_src", _IPV6_DEFAULTS[0])
        fields.setdefault("ip_dst", _IPV6_DEFAULTS[1])
    if args.ack_req:
        fields["ack_req"] = True
    row = protocol.opcode_row(args.opcode)
    for key, header in _HEADER_OF.items():
        if key in fields and header not in row.headers:
            option = "--" + key.replace("_", "-")
            raise CommandError(f"{option}: {row.name} has no {header} header")
    return fields


def _remove_partial(path: str) -> None:
    """Remove a capture that failed midway, if it is a regular file: never a device or a
    FIFO (``--out /dev/full`` must not unlink /dev/full)."""
    with contextlib.suppress(OSError):
        if stat.S_ISREG(os.stat(path).st_mode):
            os.unlink(path)


def run(args: argparse.Namespace) -> int:
    fields = _build_fields(args)
    if args.payload is not None:
        payload = args.payload
    else:
        payload = bytes(i & 0xFF for i in range(args.payload_size or 0))
    start = time.time() if args.timestamp is None else args.timestamp
    last_at = start + (args.count - 1) * _PACKET_INTERVAL_S
    if last_at >= 2**32:
        raise CommandError(
            f"craft: --count {args.count} from --timestamp {start}: the last packet's time "
            f"{last_at} is past what a pcap holds (2**32 s)"
        )

    def frame_of(i: int) -> bytes:
        psn = protocol.psn_add(args.psn, i)
        frame = protocol.build(args.opcode, payload, psn=psn, **fields)
        if args.bad_icrc:
            wrong = protocol.icrc(frame) ^ 0xFFFFFFFF
            frame = protocol.build(args.opcode, payload, psn=psn, icrc=wrong, **fields)
        return frame

    try:
        # The first packet is built before the file is opened: a bad field leaves no file.
        # The others differ only in their PSN, so they are built as they are written, in
        # memory for one packet however many are asked for.
        first = frame_of(0)
    except ValueError as e:
        raise CommandError(f"craft: {e}") from None
    try:
        with PcapWriter(args.out, nanosecond=args.nanosecond) as writer:
            for i in range(args.count):
                writer.write(first if i == 0 else frame_of(i), start + i * _PACKET_INTERVAL_S)
    except OSError as e:  # a full disk, say: no half-written capture left behind
        _remove_partial(args.out)
        raise CommandError(f"craft: {args.out}: {e.strerror or e}") from None
    except BaseException:  # Ctrl-C, likewise
        _remove_partial(args.out)
        raise
    last = protocol.psn_add(args.psn, args.count - 1)
    name = protocol.opcode_name(args.opcode)
    print(f"wrote {args.count} x {name} (psn {args.psn}..{last}) to {args.out}")
    return 0
