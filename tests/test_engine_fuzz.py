"""The engine's receive path under random and damaged frames, on the cpu executor.

Goal: whatever arrives, the running loop does not crash, writes nothing outside what a
valid RETH (or atomic) allows, and accounts for every packet. Hypothesis builds each
example from valid frames of every opcode the engine serves (SEND First/Middle/Last/Only,
with immediate, WRITE First/Middle/Last/Only, with immediate, FETCH_ADD, COMPARE_SWAP, READ,
ACK, ATOMIC ACK; HSB-style frames for the frames handler), mostly at the PSNs the engine
expects so that messages, writes and frames get under way, then damages some: bits flipped,
bytes set, inserted, deleted, the frame cut short, the ICRC fixed up again or left wrong,
or bytes at random. Each example runs in a fresh transceiver (echo RC, echo UC, frames UC,
frames RC), its regions first filled with canary bytes.

Oracles, none of them the engine:
- Packets: the frames are injected one at a time, and after each the counters are read
  once the loop has published them (an in-band fence: a host send queued after the
  packet's counters began to appear goes out in a later pass, after their publication).
  Each packet moves ``rx_packets`` by exactly one and ``rx_bytes`` by its length. Its
  outcome is read from the verdict counters V = malformed, icrc_errors, wrong_qp,
  bad_pkey, acks_received, naks_received, unsupported, duplicates, psn_gaps,
  resync_drops, opcode_sequence, out_of_range, atomics. Where the packet alone decides (the Python
  decoder: undecodable, wrong ICRC, another QP, P_Key, transport, a response, a READ),
  the one counter it moves is the one named by that decision. Otherwise (SENDs, WRITEs,
  atomics at the PSN check and after), it moves one of duplicates, psn_gaps,
  opcode_sequence, out_of_range, malformed (a SEND longer than the assembly buffer) or,
  for atomics, atomics; or none: then it was accepted, and must be a SEND or WRITE.
  Which PSN it carried is then held to a model of the responder's expected PSN (IBA
  9.7.5): an accepted packet, an executed atomic, and (RC) one counted for its sequence,
  its RETH or its length, carried the expected PSN; a duplicate one behind, a gap one
  ahead. So no packet is dropped uncounted, except where the model says so. The identity
  that holds today, summed over an example:

      rx_packets == injected              (ring_drops == 0: injection waits for room)
      rx_packets == sum(V) - both + accepted

  ``accepted``: packets that moved no V counter and carried the expected PSN. ``both``: UC
  packets that moved two, UC counting a PSN or message-sequence break as it resynchronises
  on a packet that starts a message, then what became of that packet (out_of_range,
  malformed) like any other. UC Middles and Lasts dropped while waiting for a First after
  a gap count as ``resync_drops`` (one of V): no packet is dropped uncounted.
- Memory: every region starts as canary bytes (frames' pages: written by valid frames,
  then released; the other regions get WRITEs in echo mode and none in frames mode);
  afterwards, every byte outside the union of the windows [va, va + dma_len) of the RETHs
  with that region's rkey that fit it (and the 8-byte words of the atomics) is intact.
- Crashes: the examples run in a child process, so a crash fails this test with the
  frames of the example that crashed it, instead of ending the session.
- Every frame the engine transmitted decodes, with a good ICRC, addressed to the peer.

Bounded: FUZZ_EXAMPLES examples per setup (RT_ENGINE_FUZZ_EXAMPLES overrides), each of at
most 24 frames; the four setups run in about 20 s on a 2-core machine.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from roce_transceiver.protocol import (
    ProtocolError,
    build,
    icrc,
    opcode_row,
    parse,
    psn_add,
    psn_diff,
)
from roce_transceiver.transceiver import Transceiver

FUZZ_EXAMPLES = int(os.environ.get("RT_ENGINE_FUZZ_EXAMPLES", "80"))
CHILD_TIMEOUT_S = 300
WAIT_S = 20.0  # bound on every wait for the loop: CI machines and this one get loaded

QPN, PEER_QPN = 0x11, 0x12
PEER = {"eth_src": "02:00:00:00:00:02", "eth_dst": "02:00:00:00:00:01"}
PEER_IP = {"ip_src": "10.0.0.2", "ip_dst": "10.0.0.1"}
# Two regions with a gap between them in the peer's address space; B's rkey is rarely
# drawn, so most of B stays canary.
REGIONS = [
    {"va": 0x10000, "rkey": 0x100, "length": 2048},
    {"va": 0x20000, "rkey": 0x200, "length": 1024},
]
PAGES_VA, PAGES_RKEY, PAGE_BYTES, PAGES = 0x1_0000_0000, 0x46524D53, 1024, 4
MESSAGE_BYTES = 2048  # the SEND assembly buffer: two long packets overflow it
SLOT_BYTES = 2048
METADATA_BYTES = 128

VERDICTS = (
    "malformed", "icrc_errors", "wrong_qp", "bad_pkey", "acks_received", "naks_received",
    "unsupported", "duplicates", "psn_gaps", "resync_drops", "opcode_sequence", "out_of_range",
    "atomics",
)  # fmt: skip
# What a SEND, WRITE or atomic may be counted for once it passed the packet-local checks.
STATEFUL = {
    "duplicates", "psn_gaps", "resync_drops", "opcode_sequence", "out_of_range", "malformed",
}  # fmt: skip
# Operations (opcode bits 4:0) and how the engine treats them (IBA table 35).
RESPONSES = {0x0D, 0x0E, 0x0F, 0x10, 0x11, 0x12}
ATOMICS = {0x13, 0x14}
READ_REQUEST = 0x0C

SETUPS = {
    "echo-RC": ("echo", "RC"),
    "echo-UC": ("echo", "UC"),
    "frames-UC": ("frames", "UC"),
    "frames-RC": ("frames", "RC"),
}


def config(handler: str, transport: str) -> dict[str, Any]:
    return {
        "executor": "cpu",
        "handler": handler,
        "qp": {"transport": transport, "qpn": QPN, "peer_qpn": PEER_QPN},
        "regions": REGIONS,
        "frames": {"pages": PAGES, "page_bytes": PAGE_BYTES, "va": PAGES_VA, "rkey": PAGES_RKEY},
        "queues": {"slot_bytes": SLOT_BYTES, "max_message_bytes": MESSAGE_BYTES},
    }


def canary(region: int, n: int) -> bytes:
    """The bytes a region holds before an example: a pattern no payload repeats by chance."""
    return bytes((i * 131 + 17 * region + 7) & 0xFF for i in range(n))


def frame(transport: str, op: str, payload: bytes = b"", **fields: Any) -> bytes:
    name = op if op.startswith(("RC_", "UC_", "UD_", "CNP")) else f"{transport}_{op}"
    fields.setdefault("dest_qp", QPN)
    return build(name, payload, **PEER, **PEER_IP, **fields)


# --- what the Python decoder says about a packet on its own --------------------------------


def local_verdict(data: bytes, transport: str) -> str | None:
    """The counter the engine must move for this packet, where the packet alone decides
    (responder.h decide's order); None: a SEND, WRITE or atomic for the PSN check."""
    try:
        p = parse(data)
    except ProtocolError:
        return "malformed"
    if not p.icrc_ok:
        return "icrc_errors"
    if p.dest_qp != QPN:
        return "wrong_qp"
    ours = 0xFFFF  # the configuration's P_Key (IBA 10.9.3: 15-bit key, one full member)
    if (p.pkey & 0x7FFF) != (ours & 0x7FFF) or not ((p.pkey | ours) & 0x8000):
        return "bad_pkey"
    if opcode_row(p.opcode).transport != transport:
        return "malformed"
    op = p.opcode & 0x1F
    if op in RESPONSES:
        if p.aeth is None:
            return "unsupported"
        return "acks_received" if (p.aeth.syndrome & 0x60) == 0 else "naks_received"
    if op == READ_REQUEST:
        return "unsupported"
    return None


def is_atomic(data: bytes) -> bool:
    return parse(data).opcode & 0x1F in ATOMICS


def windows(data: bytes) -> list[tuple[int, int, int]]:
    """(rkey, va, length) of what a packet's RETH or AtomicETH allows, where it has one."""
    try:
        p = parse(data)
    except ProtocolError:
        return []
    if p.reth is not None:
        return [(p.reth.rkey, p.reth.va, p.reth.dma_len)]
    if p.atomic_eth is not None:
        return [(p.atomic_eth.rkey, p.atomic_eth.va, 8)]
    return []


# --- the frames hypothesis draws -----------------------------------------------------------


@dataclass
class Draft:
    """The stream being drawn: the PSN the peer would send next, where WRITEs go."""

    handler: str
    transport: str
    psn: int
    frames: list[bytes] = field(default_factory=list)


def draw_psn(draw: st.DrawFn, d: Draft) -> int:
    """Mostly the next PSN (which it takes), sometimes one behind, ahead or anywhere."""
    kind = draw(st.sampled_from(["next"] * 8 + ["same", "behind", "ahead", "any"]))
    if kind == "next":
        psn, d.psn = d.psn, psn_add(d.psn, 1)
        return psn
    if kind == "any":
        return draw(st.integers(0, 0xFFFFFF))
    if kind == "ahead":
        return psn_add(d.psn, draw(st.integers(1, 40)))
    return (d.psn - (1 if kind == "same" else 3)) & 0xFFFFFF


def draw_target(draw: st.DrawFn, d: Draft, n: int) -> tuple[int, int, int]:
    """(rkey, va, dma_len) for a WRITE of n bytes: mostly inside a region, sometimes at its
    edges or past them, sometimes with a wrong key or a 64-bit VA."""
    if d.handler == "frames":
        regions = [{"va": PAGES_VA, "rkey": PAGES_RKEY, "length": PAGES * PAGE_BYTES}]
        regions += REGIONS
        weights = [8, 1, 1]
    else:
        regions, weights = REGIONS, [8, 1]
    r = draw(st.sampled_from([r for r, w in zip(regions, weights, strict=True) for _ in range(w)]))
    kind = draw(st.sampled_from(["inside"] * 6 + ["edge", "past", "key", "va", "len"]))
    length = r["length"]
    at = draw(st.integers(0, max(0, length - n)))
    rkey, va, dma_len = r["rkey"], r["va"] + at, n
    if kind == "edge":
        va = r["va"] + length - n
    elif kind == "past":
        va = r["va"] + length - n + draw(st.integers(1, 64))
    elif kind == "key":
        rkey = draw(st.integers(0, 2**32 - 1))
    elif kind == "va":
        va = draw(st.sampled_from([0, 2**63, 2**64 - 1, r["va"] - 1, r["va"] + length]))
    elif kind == "len":
        dma_len = draw(st.sampled_from([0, n - 1 if n else 0, length + 1, 2**32 - 1]))
    return rkey, va, dma_len


def payload(draw: st.DrawFn, most: int = 1100) -> bytes:
    n = draw(st.sampled_from([0, 1, 3, 4, 17, 64, 200, 511, 900, most]))
    return random.Random(draw(st.integers(0, 2**32 - 1))).randbytes(n)


def draw_unit(draw: st.DrawFn, d: Draft) -> list[bytes]:
    """One message, frame, response or atomic, as a valid peer would send it."""
    t = d.transport
    kinds = ["send_only", "send_message", "write_only", "write_message", "read", "ack", "atomic"]
    if d.handler == "frames":
        kinds += ["hsb_frame"] * 4
    kind = draw(st.sampled_from(kinds))
    ack_req = draw(st.booleans()) if t == "RC" else False
    if kind == "send_only":
        op = draw(st.sampled_from(["SEND_ONLY", "SEND_ONLY_WITH_IMMEDIATE"]))
        return [frame(t, op, payload(draw), psn=draw_psn(draw, d), ack_req=ack_req, imm=7)
                if op.endswith("IMMEDIATE") else
                frame(t, op, payload(draw), psn=draw_psn(draw, d), ack_req=ack_req)]  # fmt: skip
    if kind == "send_message":
        out = [frame(t, "SEND_FIRST", payload(draw), psn=draw_psn(draw, d))]
        for _ in range(draw(st.integers(0, 2))):
            out.append(frame(t, "SEND_MIDDLE", payload(draw), psn=draw_psn(draw, d)))
        last = draw(st.sampled_from(["SEND_LAST", "SEND_LAST_WITH_IMMEDIATE"]))
        extra = {"imm": 9} if last.endswith("IMMEDIATE") else {}
        out.append(frame(t, last, payload(draw), psn=draw_psn(draw, d), ack_req=ack_req, **extra))
        return out
    if kind == "write_only":
        data = payload(draw)
        rkey, va, dma_len = draw_target(draw, d, len(data))
        op = draw(st.sampled_from(["RDMA_WRITE_ONLY", "RDMA_WRITE_ONLY_WITH_IMMEDIATE"]))
        extra = {"imm": draw(st.integers(0, 2**32 - 1))} if op.endswith("IMMEDIATE") else {}
        psn = draw_psn(draw, d)
        return [frame(t, op, data, psn=psn, va=va, rkey=rkey, dma_len=dma_len, **extra)]
    if kind == "write_message":
        parts = [payload(draw, 600) for _ in range(draw(st.integers(2, 4)))]
        rkey, va, dma_len = draw_target(draw, d, sum(map(len, parts)))
        out = [frame(t, "RDMA_WRITE_FIRST", parts[0], psn=draw_psn(draw, d), va=va, rkey=rkey,
                     dma_len=dma_len)]  # fmt: skip
        for part in parts[1:-1]:
            out.append(frame(t, "RDMA_WRITE_MIDDLE", part, psn=draw_psn(draw, d)))
        last = draw(st.sampled_from(["RDMA_WRITE_LAST", "RDMA_WRITE_LAST_WITH_IMMEDIATE"]))
        extra = {"imm": 3} if last.endswith("IMMEDIATE") else {}
        out.append(frame(t, last, parts[-1], psn=draw_psn(draw, d), **extra))
        return out
    if kind == "hsb_frame":
        # HSB: WRITE Onlys into one page, the last with the immediate naming the page (and,
        # with metadata, the 128-byte record); now and then a page that is not there.
        page = draw(st.sampled_from([0, 1, 2, 3, 0, 1, 7]))
        base = PAGES_VA + page * PAGE_BYTES
        n = draw(st.integers(1, 3))
        out = []
        for k in range(n):
            data = payload(draw, 400)
            va = base + draw(st.sampled_from([k * 300, k * 300 + 1, PAGE_BYTES - len(data)]))
            out.append(frame(t, "RDMA_WRITE_ONLY", data, psn=draw_psn(draw, d), va=va,
                             rkey=PAGES_RKEY))  # fmt: skip
        psn = draw_psn(draw, d)
        imm_page = draw(st.sampled_from([page, page, page, (page + 1) % PAGES]))
        record = random.Random(draw(st.integers(0, 2**32))).randbytes(METADATA_BYTES)
        out.append(frame(t, "RDMA_WRITE_ONLY_WITH_IMMEDIATE", record, psn=psn,
                         va=base + PAGE_BYTES - METADATA_BYTES, rkey=PAGES_RKEY,
                         imm=(psn & 0xFFFFF) << 12 | imm_page))  # fmt: skip
        return out
    if kind == "read":
        rkey, va, dma_len = draw_target(draw, d, 64)
        return [frame(t, "RC_RDMA_READ_REQUEST", psn=draw_psn(draw, d), va=va, rkey=rkey,
                      dma_len=dma_len)]  # fmt: skip
    if kind == "ack":
        op = draw(st.sampled_from(["RC_ACKNOWLEDGE", "RC_ATOMIC_ACKNOWLEDGE"]))
        syndrome = draw(st.sampled_from([0x1F, 0x60, 0x61, 0x62, 0x20]))
        return [frame(t, op, psn=draw(st.integers(0, 0xFFFFFF)), syndrome=syndrome, msn=1)]
    op = draw(st.sampled_from(["RC_FETCH_ADD", "RC_COMPARE_SWAP"]))
    rkey, va, _ = draw_target(draw, d, 8)
    va = draw(st.sampled_from([va - va % 8, va]))  # aligned, or as drawn
    values = st.sampled_from([0, 1, 2**63, 2**64 - 1])
    return [frame(t, op, psn=draw_psn(draw, d), va=va, rkey=rkey, swap_add=draw(values),
                  compare=draw(values))]  # fmt: skip


def fix_icrc(data: bytearray) -> None:
    """Put the right ICRC back where the frame's IP length says it is, if it decodes."""
    try:
        p = parse(bytes(data))
        value = icrc(bytes(data))
    except ProtocolError:
        return
    data[p.length - 4 : p.length] = value.to_bytes(4, "little")


def damage(draw: st.DrawFn, data: bytes) -> bytes:
    """Bits flipped, bytes set, inserted, deleted, the frame cut short, its ICRC fixed or not."""
    out = bytearray(data)
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["flip", "set", "insert", "delete", "cut"]))
        if kind == "insert" and len(out) < SLOT_BYTES - 16:
            at = draw(st.integers(0, len(out)))
            out[at:at] = draw(st.binary(min_size=1, max_size=8))
        elif out and kind in ("flip", "set"):
            # Mostly the headers, where the decisions are.
            at = draw(st.integers(0, min(len(out), 90) - 1) | st.integers(0, len(out) - 1))
            if kind == "flip":
                out[at] ^= 1 << draw(st.integers(0, 7))
            else:
                out[at] = draw(st.integers(0, 255))
        elif out and kind == "delete":
            at = draw(st.integers(0, len(out) - 1))
            del out[at : at + draw(st.integers(1, 8))]
        elif out and kind == "cut":
            del out[draw(st.integers(0, len(out) - 1)) :]
    if draw(st.booleans()):
        fix_icrc(out)
    return bytes(out)


@st.composite
def streams(draw: st.DrawFn, handler: str, transport: str, first_psn: int) -> list[bytes]:
    d = Draft(handler, transport, first_psn)
    out: list[bytes] = []
    want = draw(st.integers(1, 24))
    while len(out) < want:
        for f in draw_unit(draw, d):
            choice = draw(st.sampled_from(["keep"] * 5 + ["damage"] * 2 + ["random"]))
            if choice == "damage":
                out.append(damage(draw, f))
            elif choice == "random":
                head = f[:42]  # Ethernet, IP, UDP and most of a BTH, then anything
                tails = st.binary(max_size=200).map(lambda tail, head=head: head + tail)
                out.append(draw(st.binary(max_size=300) | tails))
            # The frame itself: kept, or sent again after the damaged copy (a retransmission,
            # which puts an RC stream back in sequence).
            if choice == "keep" or draw(st.booleans()):
                out.append(f)
    return out[:24]


# --- running an example ----------------------------------------------------------------------


def wait_until(done: Any, what: str) -> None:
    """Poll ``done()`` until true; fail naming ``what`` after WAIT_S. The last poll comes
    after the deadline, so a test stalled past it (a loaded machine) still sees the truth."""
    deadline = time.monotonic() + WAIT_S
    while True:
        late = time.monotonic() > deadline
        if done():
            return
        assert not late, f"waited {WAIT_S} s for {what}"
        time.sleep(20e-6)  # a poll interval, not a synchronisation


class Loop:
    """A started transceiver, stepped one frame at a time with exact counters after each."""

    def __init__(self, handler: str, transport: str) -> None:
        self.handler, self.transport = handler, transport
        self.t = Transceiver(config(handler, transport)).start()
        self.stats = self.t.stats()
        self.fences = 0
        self.injected = 0
        self.sent: list[bytes] = []

    def step(self, data: bytes) -> dict[str, int]:
        """Inject ``data``; return how each counter moved once the loop published them."""
        before = self.stats
        assert self.t.inject(data, wait=WAIT_S), "the rx ring stayed full"
        self.injected += 1
        counted = lambda: self.t.stats()["rx_packets"] > before["rx_packets"]  # noqa: E731
        wait_until(counted, f"the loop counting packet {self.injected} ({data.hex()})")
        self.fence()
        self.stats = self.t.stats()
        self.drain()
        return {k: v - before[k] for k, v in self.stats.items()}

    def fence(self) -> None:
        """Queue a host send and collect until it is out: the loop sends it in a pass after
        the one that began publishing the counters seen, so they are all published now."""
        self.fences += 1
        marker = b"fence %d" % self.fences
        self.t.send(marker, timeout=WAIT_S)

        def out() -> bool:
            got = self.t.collect(max_frames=4096)
            self.sent += got
            return any(parse(f).payload == marker for f in got)

        wait_until(out, f"the fence {marker!r} going out")

    def drain(self) -> None:
        """What the host does: take completions, release the frames' pages."""
        self.t.receive(timeout=0, max_messages=4096)
        for f in self.t.frames(timeout=0, max_frames=4096):
            f.release()

    def fill_canaries(self) -> int:
        """Canary bytes into the regions WRITEs can reach, by valid WRITEs; returns the
        PSN the peer's stream goes on from."""
        t, psn = self.transport, 0
        if self.handler == "echo":
            for i, r in enumerate(REGIONS):
                data = canary(i, r["length"])
                for at in range(0, len(data), 1024):
                    part = data[at : at + 1024]
                    self.step(frame(t, "RDMA_WRITE_ONLY", part, psn=psn, va=r["va"] + at,
                                    rkey=r["rkey"]))  # fmt: skip
                    psn += 1
            assert psn == canary_frames(self.handler)
            return psn
        pages = canary(len(REGIONS), PAGES * PAGE_BYTES)
        for page in range(PAGES):
            at = page * PAGE_BYTES
            body = pages[at : at + PAGE_BYTES - METADATA_BYTES]
            self.step(frame(t, "RDMA_WRITE_ONLY", body, psn=psn, va=PAGES_VA + at,
                            rkey=PAGES_RKEY))  # fmt: skip
            record = pages[at + PAGE_BYTES - METADATA_BYTES : at + PAGE_BYTES]
            self.step(frame(t, "RDMA_WRITE_ONLY_WITH_IMMEDIATE", record, psn=psn + 1,
                            va=PAGES_VA + at + PAGE_BYTES - METADATA_BYTES, rkey=PAGES_RKEY,
                            imm=((psn + 1) & 0xFFFFF) << 12 | page))  # fmt: skip
            psn += 2
        assert self.stats["frames"] == PAGES, self.stats
        return psn

    def regions(self) -> list[bytes]:
        out = [self.t.read_region(i) for i in range(len(REGIONS))]
        if self.handler == "frames":  # the pages: the core's region after the configured ones
            out.append(bytes(self.t._core.read_region(len(REGIONS), 0, PAGES * PAGE_BYTES)))
        return out


def region_specs(handler: str) -> list[tuple[int, int, int]]:
    """(va, rkey, length) of every registered region, the pages last."""
    specs = [(r["va"], r["rkey"], r["length"]) for r in REGIONS]
    if handler == "frames":
        specs.append((PAGES_VA, PAGES_RKEY, PAGES * PAGE_BYTES))
    return specs


def check_packet(i: int, data: bytes, delta: dict[str, int], transport: str) -> list[str]:
    """Hold one packet's counter moves to the packet-local part of the identity; returns the
    verdict counters it moved."""
    where = f"packet {i} ({data.hex()})"
    assert delta["rx_packets"] == 1, f"{where}: rx_packets moved {delta['rx_packets']}"
    assert delta["rx_bytes"] == len(data), f"{where}: rx_bytes moved {delta['rx_bytes']}"
    moved = sorted(k for k in VERDICTS if delta[k])
    assert all(delta[k] == 1 for k in moved), f"{where}: {[(k, delta[k]) for k in moved]}"
    local = local_verdict(data, transport)
    if local is not None:
        assert moved == [local], f"{where}: the packet alone says {local}, counted {moved}"
        return moved
    allowed = STATEFUL | {"atomics"} if is_atomic(data) else STATEFUL
    assert set(moved) <= allowed, f"{where}: counted {moved}"
    if transport == "UC" and len(moved) == 2:
        # UC: a broken sequence, counted as it resynchronises on a packet that starts a
        # message, then that packet's own fate.
        first = {"psn_gaps", "opcode_sequence"} & set(moved)
        assert len(first) == 1 and set(moved) - first <= {"out_of_range", "malformed"}, where
    else:
        assert len(moved) <= 1, f"{where}: counted {moved}"
    return moved


class PsnModel:
    """The expected PSN, as IBA 9.7.5 has a responder keep it (responder.h check_psn), held
    against what each SEND, WRITE or atomic was counted for: an accepted packet carried the
    expected PSN, a duplicate one behind it, a gap one ahead; UC resynchronises on the next
    First or Only after a gap and drops, uncounted, what comes before it."""

    def __init__(self, transport: str, psn: int) -> None:
        self.transport, self.expected, self.resync = transport, psn, False

    def step(self, i: int, data: bytes, moved: list[str]) -> str:
        """Check one packet that reached the PSN check; returns its outcome."""
        p = parse(data)
        psn, starts = p.psn, opcode_row(p.opcode).first
        where = f"packet {i} (PSN {psn:#x}, expected {self.expected:#x}, counted {moved})"
        diff = psn_diff(psn, self.expected)
        if self.transport == "RC":
            if moved == ["duplicates"]:
                assert diff < 0, f"{where}: a duplicate not behind the expected PSN"
            elif moved == ["psn_gaps"]:
                assert diff > 0, f"{where}: a gap not ahead of the expected PSN"
            else:
                assert diff == 0, f"{where}: taken past the PSN check at another PSN"
                if moved in ([], ["atomics"]):
                    self.expected = psn_add(psn, 1)
            return moved[0] if moved else "accepted"
        if self.resync:
            if not starts:
                assert moved == ["resync_drops"], f"{where}: dropped while resynchronising"
                return "resync_drops"
            assert "psn_gaps" not in moved, where
            self.resync, self.expected, diff = False, psn, 0
        rest = list(moved)
        if diff != 0:
            assert "psn_gaps" in moved, f"{where}: another PSN, no gap counted"
            rest.remove("psn_gaps")
            if not starts:
                assert rest == [], where
                self.resync = True
                return "psn_gaps"
            self.expected = psn
        else:
            assert "psn_gaps" not in moved, f"{where}: the expected PSN counted as a gap"
        if rest in ([], ["opcode_sequence"]) and (starts or not rest):
            self.expected = psn_add(psn, 1)  # taken (UC: a First/Only starts afresh)
        return "+".join(moved) or "accepted"


def check_memory(handler: str, frames: list[bytes], before: list[bytes], after: list[bytes]):
    """Every region byte outside what the RETHs and atomics of `frames` allowed is as it
    was: the canary."""
    reach: dict[int, list[tuple[int, int]]] = {}
    for data in frames:
        for rkey, va, n in windows(data):
            reach.setdefault(rkey, []).append((va, va + n))
    for index, (base, rkey, length) in enumerate(region_specs(handler)):
        allowed = bytearray(length)  # 1: a WRITE or an atomic may have put it there
        for lo, hi in reach.get(rkey, []):
            lo, hi = max(lo, base) - base, min(hi, base + length) - base
            if lo < hi and hi - lo <= length:
                allowed[lo:hi] = b"\x01" * (hi - lo)
        bad = [k for k in range(length) if not allowed[k] and after[index][k] != before[index][k]]
        assert not bad, (
            f"region {index} (va {base:#x}, rkey {rkey:#x}): {len(bad)} bytes changed outside "
            f"every window a RETH allowed, first at offset {bad[0]}"
        )


def run_example(handler: str, transport: str, frames: list[bytes], record: Path) -> list[str]:
    record.write_text(json.dumps([f.hex() for f in frames]))  # for the parent, on a crash
    loop = Loop(handler, transport)
    try:
        loop.fill_canaries()
        before = loop.regions()
        model = PsnModel(transport, canary_frames(handler))
        outcomes = []
        for i, f in enumerate(frames):
            moved = check_packet(i, f, loop.step(f), transport)
            stateful = local_verdict(f, transport) is None
            outcomes.append(model.step(i, f, moved) if stateful else moved[0])
        after = loop.regions()
        assert loop.t.running
    finally:
        loop.t.stop()
    final = loop.t.stats()  # exact after stop()
    assert final["ring_drops"] == 0, final
    assert final["rx_packets"] == loop.injected, final
    check_memory(handler, frames, before, after)
    for f in loop.sent:  # everything the loop transmitted
        p = parse(f)
        assert p.icrc_ok and p.dest_qp == PEER_QPN and p.eth_dst == PEER["eth_src"], f.hex()
    assert len(outcomes) == len(frames)  # every packet accounted for above
    return outcomes


def canary_frames(handler: str) -> int:
    """How many frames fill_canaries() sends: the PSN the fuzzed stream starts at."""
    if handler == "frames":
        return 2 * PAGES
    return sum(-(-r["length"] // 1024) for r in REGIONS)


def fuzz(handler: str, transport: str, examples: int, record: Path) -> None:
    first = canary_frames(handler)

    @settings(
        max_examples=examples,
        # ms: an example takes ~30 ms; this catches a loop that stopped answering, not a
        # slow machine (each wait inside an example is bounded by WAIT_S too).
        deadline=60_000,
        database=None,
        print_blob=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(streams(handler, transport, first))
    def example(frames: list[bytes]) -> None:
        run_example(handler, transport, frames, record)

    example()


# --- the tests: each setup in a child process ------------------------------------------------


@pytest.mark.parametrize("setup", sorted(SETUPS))
def test_fuzzed_frames_never_crash_the_loop_and_every_packet_is_counted(setup, tmp_path):
    record = tmp_path / "example.json"
    done = subprocess.run(
        [sys.executable, "-X", "faulthandler", __file__, setup, str(FUZZ_EXAMPLES), str(record)],
        capture_output=True,
        text=True,
        timeout=CHILD_TIMEOUT_S,
        check=False,
        cwd=tmp_path,
    )
    if done.returncode < 0:
        frames = record.read_text() if record.exists() else "(none recorded)"
        name = signal.Signals(-done.returncode).name
        pytest.fail(
            f"the engine loop crashed ({name}) on this example's frames: {frames}\n"
            f"{done.stderr[-6000:]}",
            pytrace=False,
        )
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-6000:]
    assert f"{FUZZ_EXAMPLES} examples done" in done.stdout, done.stdout[-2000:]


def test_local_verdicts_name_what_the_packet_alone_decides():
    """The classifier the fuzz test trusts, on frames whose fate is known."""
    ok = frame("RC", "SEND_ONLY", b"hello", psn=0)
    assert local_verdict(ok, "RC") is None
    assert local_verdict(ok, "UC") == "malformed"  # an RC opcode on a UC queue pair
    assert local_verdict(ok[:40], "RC") == "malformed"
    bad = bytearray(ok)
    bad[-1] ^= 1
    assert local_verdict(bytes(bad), "RC") == "icrc_errors"
    assert local_verdict(frame("RC", "SEND_ONLY", psn=0, dest_qp=QPN + 1), "RC") == "wrong_qp"
    assert local_verdict(frame("RC", "SEND_ONLY", psn=0, pkey=0x7FFF), "RC") is None
    assert local_verdict(frame("RC", "SEND_ONLY", psn=0, pkey=0x1234), "RC") == "bad_pkey"
    assert local_verdict(frame("RC", "RC_ACKNOWLEDGE", psn=0), "RC") == "acks_received"
    nak = frame("RC", "RC_ACKNOWLEDGE", psn=0, syndrome=0x61)
    assert local_verdict(nak, "RC") == "naks_received"
    assert local_verdict(frame("RC", "RC_RDMA_READ_RESPONSE_MIDDLE", psn=0), "RC") == "unsupported"
    assert local_verdict(frame("RC", "RC_RDMA_READ_REQUEST", psn=0), "RC") == "unsupported"
    assert local_verdict(frame("RC", "RC_FETCH_ADD", psn=0), "RC") is None


def test_a_write_outside_its_window_is_caught():
    """check_memory fails on a byte changed where no RETH reached, and only there."""
    write = frame("RC", "RDMA_WRITE_ONLY", b"abcd", psn=0, va=REGIONS[0]["va"] + 10,
                  rkey=REGIONS[0]["rkey"])  # fmt: skip
    before = [canary(i, r["length"]) for i, r in enumerate(REGIONS)]
    inside = [bytearray(b) for b in before]
    inside[0][10:14] = b"abcd"
    check_memory("echo", [write], before, [bytes(b) for b in inside])
    outside = [bytearray(b) for b in inside]
    outside[0][14] ^= 0xFF
    with pytest.raises(AssertionError, match=r"region 0 .* 1 bytes changed .* offset 14"):
        check_memory("echo", [write], before, [bytes(b) for b in outside])


def main(argv: list[str]) -> int:
    setup, examples, record = argv[0], int(argv[1]), Path(argv[2])
    handler, transport = SETUPS[setup]
    fuzz(handler, transport, examples, record)
    print(f"{setup}: {examples} examples done")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
