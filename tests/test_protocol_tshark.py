"""Frames we build, dissected by Wireshark.

Goal: a pcap of frames made by ``build`` opens in Wireshark with every field
where we put it: Ethernet, 802.1Q, IPv4/IPv6, UDP, BTH, RETH, ImmDt, AETH,
AtomicETH, AtomicAckETH, DETH, IETH, payload + pad and the ICRC position,
for every opcode in OPCODES, IPv4 and IPv6, with and without VLAN, the 64-bit
fields over all 64 bits and at 2**63 and 2**64 - 1.

Oracle: tshark's InfiniBand/RRoCE dissector (one tshark run over a pcap of
~300 seeded random frames), field by field against what we asked for. The
pcap is written by roce_transceiver.pcap when it exists, else by the classic
libpcap writer in tests/oracles.py.
"""

from __future__ import annotations

import csv
import random
import subprocess
from dataclasses import replace
from pathlib import Path

import oracles
import pytest
from oracles import Spec, build_kwargs, ext_value, random_spec

from roce_transceiver.protocol import OPCODES, build, parse

pytestmark = pytest.mark.tshark

CASES_PER_OPCODE = 8
TSHARK_TIMEOUT_S = 60

FIELDS = [
    "frame.number",
    "_ws.malformed",
    "eth.dst",
    "eth.src",
    "vlan.priority",
    "vlan.dei",
    "vlan.id",
    "ip.src",
    "ip.dst",
    "ip.id",
    "ip.dsfield",
    "ip.ttl",
    "ip.flags.df",
    "ip.len",
    "ipv6.src",
    "ipv6.dst",
    "ipv6.tclass",
    "ipv6.flow",
    "ipv6.hlim",
    "ipv6.plen",
    "udp.srcport",
    "udp.dstport",
    "udp.length",
    "infiniband.bth.opcode",
    "infiniband.bth.se",
    "infiniband.bth.m",
    "infiniband.bth.padcnt",
    "infiniband.bth.tver",
    "infiniband.bth.p_key",
    "infiniband.bth.destqp",
    "infiniband.bth.a",
    "infiniband.bth.psn",
    "infiniband.reth.va",  # also the AtomicETH VA
    "infiniband.reth.r_key",  # also the AtomicETH R_Key
    "infiniband.reth.dmalen",
    "infiniband.immdt",
    "infiniband.aeth.syndrome",
    "infiniband.aeth.msn",
    "infiniband.atomiceth.swapdt",
    "infiniband.atomiceth.cmpdt",
    "infiniband.atomicacketh.origremdt",
    "infiniband.deth.q_key",
    "infiniband.deth.srcqp",
    "infiniband.ieth",
    "infiniband.invariant.crc",
    "data.data",
]
# Heuristic dissectors that claim short SEND payloads (RPC-over-RDMA calls an
# empty SEND LAST malformed); off, so the payload shows as plain data.
PAYLOAD_HEURISTICS = [
    "rpcordma", "smb_direct", "nvme-rdma", "lnet", "iser", "infiniband_sdp", "fcoib",
    "infiniband.eoib", "drbd", "smc",
]  # fmt: skip


def tshark_specs() -> list[Spec]:
    specs = []
    for name, opcode in sorted(OPCODES.items(), key=lambda kv: kv[1]):
        rng = random.Random(f"tshark-{name}")
        for i in range(CASES_PER_OPCODE):
            spec = random_spec(rng, opcode, ip_version=(4, 6)[i % 2], vlan=bool(i & 2))
            # Wireshark hands a UDP datagram to the lower port's dissector first:
            # keep the source port above 4791, as RoCE NICs do.
            specs.append(replace(spec, udp_sport=rng.randrange(4792, 65536)))
        specs += oracles.edge_specs(opcode)  # VA, swap/add, compare, orig at 2**63, 2**64 - 1
    return specs


def run_tshark(tshark: str, pcap: Path) -> list[dict[str, str]]:
    cmd = [tshark, "-n", "-r", str(pcap), "-T", "fields", "-E", "header=y", "-E", "occurrence=f"]
    for proto in PAYLOAD_HEURISTICS:
        cmd += ["--disable-protocol", proto]
    for field in FIELDS:
        cmd += ["-e", field]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=TSHARK_TIMEOUT_S)
    assert done.returncode == 0, done.stderr
    return list(csv.DictReader(done.stdout.splitlines(), delimiter="\t", quoting=csv.QUOTE_NONE))


def num(text: str) -> int:
    return int(text, 16) if text.startswith("0x") else int(text)


def flag(text: str) -> bool:
    return {"1": True, "0": False, "True": True, "False": False}[text]


def expected_row(spec: Spec, frame: bytes) -> dict[str, object]:
    """What tshark must show for `frame`, from the spec alone."""
    v = lambda key: ext_value(spec, key)  # noqa: E731
    hdrs = spec.headers
    want: dict[str, object] = {
        "_ws.malformed": "",
        "eth.dst": spec.eth_dst,
        "eth.src": spec.eth_src,
        "udp.srcport": spec.udp_sport,
        "udp.dstport": 4791,
        "infiniband.bth.opcode": spec.opcode,
        "infiniband.bth.se": spec.se,
        "infiniband.bth.m": spec.mig_req,
        "infiniband.bth.padcnt": spec.pad_count,
        "infiniband.bth.tver": spec.tver,
        "infiniband.bth.p_key": spec.pkey,
        "infiniband.bth.destqp": spec.dest_qp,
        "infiniband.bth.a": spec.ack_req,
        "infiniband.bth.psn": spec.psn,
    }
    ip_bytes = 20 if spec.ip_version == 4 else 40
    udp_len = len(frame) - 14 - (4 if spec.vlan is not None else 0) - ip_bytes
    want["udp.length"] = udp_len
    if spec.vlan is not None:
        want["vlan.priority"] = spec.vlan >> 13
        want["vlan.dei"] = bool(spec.vlan >> 12 & 1)
        want["vlan.id"] = spec.vlan & 0xFFF
    if spec.ip_version == 4:
        want.update({
            "ip.src": spec.ip_src, "ip.dst": spec.ip_dst, "ip.id": spec.ip_id,
            "ip.dsfield": spec.ip_tos, "ip.ttl": spec.ip_ttl,
            "ip.flags.df": spec.ip_dont_fragment, "ip.len": 20 + udp_len,
        })  # fmt: skip
    else:
        want.update({
            "ipv6.src": spec.ip_src, "ipv6.dst": spec.ip_dst, "ipv6.tclass": spec.ip_tos,
            "ipv6.flow": spec.ip_flow_label, "ipv6.hlim": spec.ip_ttl, "ipv6.plen": udp_len,
        })  # fmt: skip
    if "RETH" in hdrs:
        want["infiniband.reth.va"] = v("va")
        want["infiniband.reth.r_key"] = v("rkey")
        want["infiniband.reth.dmalen"] = v("dma_len")
    if "ImmDt" in hdrs:
        want["infiniband.immdt"] = v("imm")
    if "AETH" in hdrs:
        want["infiniband.aeth.syndrome"] = v("syndrome")
        want["infiniband.aeth.msn"] = v("msn")
    if "AtomicETH" in hdrs:
        want["infiniband.reth.va"] = v("va")
        want["infiniband.reth.r_key"] = v("rkey")
        want["infiniband.atomiceth.swapdt"] = v("swap_add")
        want["infiniband.atomiceth.cmpdt"] = v("compare")
    if "AtomicAckETH" in hdrs:
        want["infiniband.atomicacketh.origremdt"] = v("atomic_ack_orig")
    if "DETH" in hdrs:
        want["infiniband.deth.q_key"] = v("qkey")
        want["infiniband.deth.srcqp"] = v("src_qp")
    if "IETH" in hdrs:
        want["infiniband.ieth"] = v("ieth_rkey")
    if spec.opcode != oracles.CNP_OPCODE:  # Wireshark 4.0 shows a CNP as vendor data
        want["data.data"] = spec.payload + bytes(spec.pad_count)
        # Wireshark reads the 4 wire bytes big-endian; parse() reports zlib's value.
        want["infiniband.invariant.crc"] = int.from_bytes(frame[-4:], "big")
    return want


def as_tshark_typed(field: str, text: str, like: object) -> object:
    if isinstance(like, bool):
        return flag(text)
    if isinstance(like, int):
        return num(text) if field not in ("infiniband.immdt", "infiniband.ieth") else int(text, 16)
    if isinstance(like, bytes):
        return bytes.fromhex(text.replace(":", ""))
    return text


def test_built_frames_match_tshark_dissection(tshark_path, tmp_path):
    specs = tshark_specs()
    frames = [build(**build_kwargs(s)) for s in specs]
    pcap = tmp_path / "built.pcap"
    writer = oracles.write_pcap(pcap, frames)
    rows = run_tshark(tshark_path, pcap)
    assert len(rows) == len(frames), f"tshark read {len(rows)} of {len(frames)} ({writer})"
    mismatches = []
    for i, (spec, frame, row) in enumerate(zip(specs, frames, rows, strict=True)):
        assert num(row["frame.number"]) == i + 1
        for field, value in expected_row(spec, frame).items():
            text = row[field]
            got = as_tshark_typed(field, text, value) if text or isinstance(value, bytes) else text
            if got != value:
                mismatches.append(f"frame {i + 1} ({frame.hex()}): {field}={got!r}, want {value!r}")
    assert not mismatches, "\n".join(mismatches[:20])


def test_tshark_icrc_field_is_our_icrc_byte_swapped(tshark_path, tmp_path):
    rng = random.Random("tshark-icrc")
    specs = [random_spec(rng, op) for op in OPCODES.values() if op != 0x81]
    specs = [replace(s, udp_sport=rng.randrange(4792, 65536)) for s in specs]
    frames = [build(**build_kwargs(s)) for s in specs]
    pcap = tmp_path / "icrc.pcap"
    oracles.write_pcap(pcap, frames)
    rows = run_tshark(tshark_path, pcap)
    for frame, row in zip(frames, rows, strict=True):
        wire = parse(frame).icrc.to_bytes(4, "little")
        assert num(row["infiniband.invariant.crc"]) == int.from_bytes(wire, "big")
