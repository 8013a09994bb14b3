"""``roce-transceiver decode``: print the RoCEv2 packets of a pcap, as a table or JSON lines."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable
from typing import Any

from roce_transceiver import protocol
from roce_transceiver.commands import CommandError
from roce_transceiver.pcap import PcapRecord, iter_pcap
from roce_transceiver.samples import HSB_FRAME, sample_path

__all__ = ["JSON_KEYS", "packet_row", "register", "run"]

#: The keys of each ``--json`` line, in order. Absent headers and undecodable packets give null.
JSON_KEYS = (
    "index",
    "opcode",
    "opcode_name",
    "dest_qp",
    "psn",
    "pad_count",
    "ack_req",
    "va",
    "rkey",
    "dma_len",
    "imm",
    "syndrome",
    "msn",
    "payload_len",
    "icrc",
    "icrc_ok",
    "error",
)

# AETH syndrome: bits 7:5 say ACK / RNR NAK / NAK, the low bits the credit, timer or NAK code
# (IBA 9.7.5.2.x, AETH syndrome encoding).
_NAK_CODES = {
    0: "PSN sequence error",
    1: "invalid request",
    2: "remote access error",
    3: "remote operational error",
    4: "invalid RD request",
}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "decode",
        help="decode the RoCEv2 packets of a pcap file",
        description="Decode the RoCEv2 packets of a pcap file (Ethernet link type). "
        "The file is read once, front to back, so a pipe works (FILE - or /dev/stdin). "
        f"Without FILE, decode the bundled sample capture ({HSB_FRAME}).",
    )
    p.add_argument(
        "file", nargs="?", metavar="FILE.pcap", help="capture to decode; -: standard input"
    )
    p.add_argument(
        "--sample",
        action="store_true",
        help=f"decode the bundled sample capture ({HSB_FRAME}), a Holoscan Sensor Bridge exchange",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="one JSON object per packet and line, keys: " + ", ".join(JSON_KEYS),
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if args.file is not None and args.sample:
        raise CommandError("decode: give FILE.pcap or --sample, not both")
    emit = _print_json if args.json else _print_table
    if args.file == "-":
        emit(iter_pcap(sys.stdin.buffer))
    elif args.file is not None:
        emit(iter_pcap(args.file))
    else:
        with sample_path() as path:
            emit(iter_pcap(path))
    return 0


def packet_row(index: int, frame: bytes) -> dict[str, Any]:
    """The ``--json`` object for one frame."""
    row: dict[str, Any] = dict.fromkeys(JSON_KEYS)
    row["index"] = index
    try:
        pkt = protocol.parse(frame)
    except protocol.ProtocolError as e:
        row["error"] = str(e)
        return row
    row.update(
        opcode=pkt.opcode,
        opcode_name=pkt.opcode_name,
        dest_qp=pkt.dest_qp,
        psn=pkt.psn,
        pad_count=pkt.pad_count,
        ack_req=pkt.ack_req,
        imm=pkt.imm,
        payload_len=len(pkt.payload),
        icrc=pkt.icrc,
        icrc_ok=pkt.icrc_ok,
    )
    if pkt.reth is not None:
        row.update(va=pkt.reth.va, rkey=pkt.reth.rkey, dma_len=pkt.reth.dma_len)
    if pkt.aeth is not None:
        row.update(syndrome=pkt.aeth.syndrome, msn=pkt.aeth.msn)
    return row


def _print_json(records: Iterable[PcapRecord]) -> None:
    for index, record in enumerate(records):
        print(json.dumps(packet_row(index, record.data)))


def _syndrome_text(syndrome: int) -> str:
    kind, low = syndrome >> 5, syndrome & 0x1F
    if kind == 0b000:
        return "ACK"
    if kind == 0b001:
        return "RNR NAK"
    if kind == 0b011:
        return "NAK " + _NAK_CODES.get(low, f"code {low}")
    return "reserved"


def _headers_text(row: dict[str, Any]) -> str:
    parts = ["AckReq"] if row["ack_req"] else []
    if row["va"] is not None:
        parts.append(f"RETH va=0x{row['va']:x} rkey=0x{row['rkey']:x} len={row['dma_len']}")
    if row["imm"] is not None:
        parts.append(f"imm=0x{row['imm']:08x}")
    if row["syndrome"] is not None:
        syndrome = row["syndrome"]
        parts.append(f"AETH 0x{syndrome:02x} {_syndrome_text(syndrome)} msn={row['msn']}")
    return "  ".join(parts)


_COLUMNS = "{:>4}  {:<40} {:>8} {:>8} {:>5} {:>7} {:>3}  {:<6} {}"


def _print_table(records: Iterable[PcapRecord]) -> None:
    print(
        _COLUMNS.format("#", "opcode", "dest_qp", "psn", "len", "payload", "pad", "icrc", "headers")
    )
    count = bad_icrc = errors = 0
    for index, record in enumerate(records):
        count += 1
        row = packet_row(index, record.data)
        capture_note = ""
        if record.orig_len > len(record.data):
            capture_note = f"  (capture kept {len(record.data)} of {record.orig_len} bytes)"
        if row["error"] is not None:
            errors += 1
            print(f"{index:>4}  error: {row['error']}{capture_note}")
            continue
        icrc_note = ""
        if not row["icrc_ok"]:
            bad_icrc += 1
            want = protocol.icrc(record.data)
            icrc_note = f"  ICRC carried 0x{row['icrc']:08x}, want 0x{want:08x}"
        name = f"{row['opcode_name']} (0x{row['opcode']:02X})"
        line = _COLUMNS.format(
            index,
            name,
            f"0x{row['dest_qp']:06x}",
            row["psn"],
            len(record.data),
            row["payload_len"],
            row["pad_count"],
            "ok" if row["icrc_ok"] else "BAD",
            _headers_text(row),
        )
        print(line.rstrip() + icrc_note + capture_note)
    print(f"{count} packets, {bad_icrc} with a bad ICRC, {errors} undecodable")
