"""The express path (prediction.h): predicted requests taken the short way, same results.

Goal: the express path is an optimisation only. For any sequence of frames the engine
transmits the same bytes in the same order, records the same completions, counts the same
counters and leaves the same bytes in its memory regions with ``express`` on as with it off;
and it does take the frames it was built for: SEND Onlys, and WRITE Onlys with Immediate
(NVQLink's shape), UC or RC, with or without an ACK request (RC: the ACK follows the reply).
- A scripted sequence mixing what the express path takes (SEND Onlys repeating the learned
  header: payload sizes 0 to 1506 bytes with every pad, rewritten TTL/TOS, an ACK request)
  with everything it must leave to the general path (the first SEND Only, a corrupt ICRC, a
  PSN gap, another UDP source port, immediate data, a two-packet SEND, a wrong QP).
- Every byte of a learned header changed in turn (ICRC recomputed, so only the header
  differs): each frame gets exactly what the general path gives it.
- RC requests as an RC requester sends them (AckReq on every SEND Only): each taken the
  express way is answered by its echo and then its ACK (the request's PSN, the MSN counting
  it), the ones it must not take (a duplicate, a gap, a corrupt ICRC) get the general path's
  re-ACK, NAK or silence.
- WRITE Onlys with Immediate into two regions (every pad, empty, the region's last byte, a
  DMA length above the payload's): placed, the written bytes and the immediate handed to the
  handler, echoed; the ones whose RETH the general path refuses (unknown rkey, past the
  region, a payload longer than the DMA length, an address that wraps), a corrupt ICRC, a
  duplicate and a gap leave the region as the general path does and get its answer.
- A tx ring without room for a reply and its ACK: the general path decides what goes.

Oracles: the same run with ``express: false`` (the general path alone, tested against
scapy/tshark-checked frames elsewhere); a model of the regions (what each accepted WRITE
carries, nothing else); the count of frames the script predicts for the express path
(``express`` counter); for RC, the ACK after each echo (IBA 9.7.5.1: the PSN of the request
acknowledged, the MSN of the messages completed). Runs on each executor: the cuda executor's
warp shares the compares and CRCs among 32 lanes, the cpu executor's thread does them alone
(tests/test_team_emulation.py runs the warp's way on the host too).
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable
from typing import Any

import pytest
from engine_helpers import (
    ACK,
    ACKNOWLEDGE,
    EXECUTORS,
    NAK_PSN_SEQUENCE,
    NAK_REMOTE_ACCESS,
    SETUPS,
    TRANSPORTS,
    Peer,
    collect_n,
    make,
    receive_n,
    wait_counter,
)

from roce_transceiver.protocol import Packet, icrc, parse, psn_add

Script = Callable[[Peer], list[bytes]]


def scripted(peer: Peer) -> list[bytes]:
    """Frames for the engine, with the PSNs a well-behaved peer would use."""
    frames: list[bytes] = []

    def send(op: str, payload: bytes, **fields: Any) -> None:
        frames.append(peer.frame(op, payload, psn=peer.take(), **fields))

    send("SEND_ONLY", b"A" * 32)  # general: nothing learned yet; it teaches the header
    send("SEND_ONLY", b"B" * 32)  # express
    send("SEND_ONLY", b"")  # express, no payload
    for n in (1, 2, 3):  # express, pad 3, 2, 1
        send("SEND_ONLY", b"C" * n)
    send("SEND_ONLY", bytes(range(256)) + b"D" * 44)  # express, 300 bytes
    send("SEND_ONLY", b"E" * 600)  # express: a warp's lanes take two chunks each
    send("SEND_ONLY", bytes(range(251)) * 6)  # express, 1506 bytes: four rounds of chunks
    send("SEND_ONLY", b"F" * 32, ip_ttl=3, ip_tos=2)  # express: routers rewrite these
    bad = peer.frame("SEND_ONLY", b"G" * 32, psn=peer.psn)
    frames.append(bad[:-4] + bytes(b ^ 0x5A for b in bad[-4:]))  # general: ICRC error
    gap = psn_add(peer.psn, 5)
    frames.append(peer.frame("SEND_ONLY", b"H" * 32, psn=gap))  # general: PSN gap
    if peer.transport == "UC":
        peer.psn = psn_add(gap, 1)  # UC starts again from the gap; RC NAKed it and waits
    send("SEND_ONLY", b"I" * 32)  # express
    send("SEND_ONLY", b"J" * 32, udp_sport=50000)  # general: another header, learned
    send("SEND_ONLY", b"K" * 32, udp_sport=50000)  # express
    send("SEND_ONLY", b"L" * 32, udp_sport=50000, ack_req=True)  # express: RC ACKs it
    send("SEND_ONLY_WITH_IMMEDIATE", b"M" * 32, udp_sport=50000, imm=7)  # general
    send("SEND_FIRST", b"N" * 256, udp_sport=50000)  # general
    send("SEND_LAST", b"O" * 10, udp_sport=50000)  # general
    frames.append(  # general: not our QP (its PSN is not used up)
        peer.frame("SEND_ONLY", b"P" * 32, psn=peer.psn, udp_sport=50000, dest_qp=peer.qpn + 1)
    )
    send("SEND_ONLY", b"Q" * 32, udp_sport=50000)  # express
    return frames


EXPRESS_IN_SCRIPT = 13  # B, empty, 3 pads, 300 B, 600 B, 1506 B, F, I, K, L, Q


def each_header_byte_changed(peer: Peer) -> list[bytes]:
    """A SEND Only that teaches the header, then per header byte: that byte changed (ICRC
    made right again), then a plain SEND Only that must still be answered the same way."""
    first = peer.frame("SEND_ONLY", b"T" * 32, psn=peer.take())
    frames = [first]
    header = parse(first).length - 32 - 4
    for i in range(header):
        f = bytearray(peer.frame("SEND_ONLY", b"U%03d" % i + b"u" * 28, psn=peer.psn))
        f[i] ^= 0x10
        with contextlib.suppress(ValueError):  # one that no longer decodes stays malformed
            f[-4:] = icrc(bytes(f)).to_bytes(4, "little")
        frames.append(bytes(f))
        frames.append(peer.frame("SEND_ONLY", b"V%03d" % i + b"v" * 28, psn=peer.psn))
        peer.take()  # one of the two used the PSN, whichever was accepted... or neither
    return frames


def engine_record(
    executor: str,
    transport: str,
    express: bool,
    script: Script,
    preload: bool = False,
    **config: Any,
) -> dict[str, Any]:
    """Everything the engine did for the script: frames out, completions, counters, the
    regions' bytes. ``preload``: the frames are on the rx ring before the engine starts, and
    nothing is collected until it has taken them all (so its tx ring may fill up)."""
    t = make(executor, transport, express=express, **config)
    peer = Peer(t)
    frames = script(peer)
    if preload:
        for f in frames:
            assert t.inject(f), "the rx ring is full: the script is longer than the ring"
    with t:
        sent: list[bytes] = []
        if preload:  # all taken; then room for the end's echo
            wait_counter(t, "rx_packets", len(frames))
            sent += collect_n(t, 1)
        else:
            for f in frames:
                assert t.inject(f), "the rx ring is full: the script is longer than the ring"
        end = peer.frame("SEND_ONLY", b"end-of-script", psn=peer.psn, udp_sport=1)
        assert t.inject(end)
        while not sent or parse(sent[-1]).payload != b"end-of-script":
            sent += collect_n(t, 1)
        messages: list[Any] = []
        while not messages or messages[-1].request != b"end-of-script":
            messages += receive_n(t, 1)
        regions = [t.read_region(i) for i in range(len(t.config["regions"]))]
    stats = t.stats()  # after stop(): final
    records = [
        (m.request, m.reply, m.reply_len, m.opcode, m.psn, m.imm, m.handler_error, m.reply_dropped)
        for m in messages
    ]
    return {
        "sent": sent,
        "messages": records,
        "stats": stats,
        "regions": regions,
        "in": frames,
        "epochs": t.epoch_stats(),
    }


def same_as_general_path(
    executor: str, transport: str, script: Script, preload: bool = False, **config: Any
) -> dict[str, Any]:
    fast = engine_record(executor, transport, True, script, preload, **config)
    slow = engine_record(executor, transport, False, script, preload, **config)
    assert slow["stats"]["express"] == 0
    assert len(fast["sent"]) == len(slow["sent"]), (
        f"express sent {len(fast['sent'])} frames, general {len(slow['sent'])}"
    )
    for i, (a, b) in enumerate(zip(fast["sent"], slow["sent"], strict=True)):
        assert a == b, f"frame {i} differs: express {parse(a)} vs general {parse(b)}"
    assert fast["messages"] == slow["messages"]
    differ = {
        k: (fast["stats"][k], slow["stats"][k])
        for k in fast["stats"]
        if k != "express" and fast["stats"][k] != slow["stats"][k]
    }
    assert not differ, f"counters (express, general): {differ}"
    for i, (a, b) in enumerate(zip(fast["regions"], slow["regions"], strict=True)):
        at = next((k for k in range(len(a)) if a[k] != b[k]), None)
        assert at is None, f"region {i} differs at byte {at}: express {a[at]}, general {b[at]}"
    return fast


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("executor", EXECUTORS)
def test_express_path_gives_the_general_paths_results_and_takes_what_it_predicts(
    executor: str, transport: str
) -> None:
    fast = same_as_general_path(executor, transport, scripted)
    assert fast["stats"]["express"] == EXPRESS_IN_SCRIPT
    for f in fast["sent"]:
        assert parse(f).icrc_ok


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("executor", EXECUTORS)
def test_a_change_in_any_header_byte_is_judged_by_the_general_path(
    executor: str, transport: str
) -> None:
    fast = same_as_general_path(executor, transport, each_header_byte_changed)
    # The plain SEND Onlys after a changed frame that was dropped repeat the learned header.
    assert fast["stats"]["express"] > 0


# --- RC ACK requests ------------------------------------------------------------------------


def acked_sends(peer: Peer) -> list[bytes]:
    """SEND Onlys as an RC requester sends them, each with AckReq (the last packet of a
    message asks for its ACK), among the frames the express path must leave alone."""
    frames: list[bytes] = []

    def send(payload: bytes, ack_req: bool = True, **fields: Any) -> None:
        frames.append(peer.frame("SEND_ONLY", payload, psn=peer.take(), ack_req=ack_req, **fields))

    send(b"a" * 32)  # general: teaches the header
    send(b"b" * 32)  # express: the echo, then the ACK
    send(b"")  # express, no payload
    for n in (1, 2, 3):
        send(b"c" * n)  # express, pad 3, 2, 1
    send(bytes(range(256)) * 2)  # express, 512 bytes
    send(b"d" * 1400)  # express
    send(b"e" * 32, ack_req=False)  # express: no ACK asked for, none sent
    send(b"f" * 32)  # express
    # general: RC ACKs a duplicate again and does not run it; UC takes it as a new start,
    # from which the next PSN is the peer's again
    frames.append(peer.frame("SEND_ONLY", b"dup", psn=psn_add(peer.psn, -1), ack_req=True))
    bad = peer.frame("SEND_ONLY", b"g" * 32, psn=peer.psn, ack_req=True)
    frames.append(bad[:-4] + bytes(b ^ 0xA5 for b in bad[-4:]))  # general: ICRC error, dropped
    send(b"h" * 32)  # express
    gap = psn_add(peer.psn, 3)
    frames.append(peer.frame("SEND_ONLY", b"i" * 32, psn=gap, ack_req=True))  # general: a gap
    if peer.transport == "UC":
        peer.psn = psn_add(gap, 1)  # UC starts again from the gap; RC NAKed it and waits
    send(b"j" * 32)  # express (RC: the NAK's wait is over)
    send(b"k" * 32, ip_ttl=9)  # express
    send(b"l" * 64, udp_sport=50001)  # general: another header, learned
    send(b"m" * 64, udp_sport=50001)  # express
    return frames


ACKED_EXPRESS = 13  # b, empty, 3 pads, 512 B, d, e, f, h, j, k, m


def check_acks_follow_their_echoes(run: dict[str, Any], transport: str) -> None:
    """IBA 9.7.5.1, independently of the general path: on RC every message whose request
    asked for an ACK is echoed and then ACKed (syndrome ACK, the request's PSN, the MSN of
    the messages completed, this one counted); without an ACK request nothing follows the
    echo. UC sends no ACKs."""
    asked = {}
    for f in run["in"]:
        p = parse(f)
        if p.icrc_ok:
            asked[(p.psn, p.payload)] = p.ack_req
    sent = [parse(f) for f in run["sent"]]
    if transport == "UC":
        assert not [p for p in sent if p.opcode == ACKNOWLEDGE]
        return
    echoes = [i for i, p in enumerate(sent) if p.opcode & 0x1F == 0x04]
    assert len(echoes) == len(run["messages"])
    for msn, (i, message) in enumerate(zip(echoes, run["messages"], strict=True), 1):
        request, psn = message[0], message[4]  # a completion holds the request's start
        payload = sent[i].payload
        assert payload[: len(request)] == request
        nxt: Packet | None = sent[i + 1] if i + 1 < len(sent) else None
        acked = nxt is not None and nxt.opcode == ACKNOWLEDGE and nxt.psn == psn
        assert acked == asked.get((psn, payload), False), f"message {msn} at PSN {psn:#x}"
        if acked:
            assert nxt is not None and nxt.aeth is not None
            assert (nxt.aeth.syndrome, nxt.aeth.msn) == (ACK, msn), f"the ACK of PSN {psn:#x}"


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("executor", EXECUTORS)
def test_requests_with_an_ack_request_take_the_express_path_and_rc_acks_after_the_echo(
    executor: str, transport: str
) -> None:
    fast = same_as_general_path(executor, transport, acked_sends)
    assert fast["stats"]["express"] == ACKED_EXPRESS
    check_acks_follow_their_echoes(fast, transport)
    if transport == "RC":
        sent = [parse(f) for f in fast["sent"]]
        naks = [(p.aeth.syndrome, p.psn) for p in sent if p.aeth and p.aeth.syndrome != ACK]
        dup = parse(fast["in"][10])  # the duplicate: ACKed again, not run
        # The gap's NAK, once, with the PSN expected (IBA 9.7.5.1.2): the gap is 3 ahead.
        assert naks == [(NAK_PSN_SEQUENCE, psn_add(parse(fast["in"][13]).psn, -3))]
        assert sum(p.opcode == ACKNOWLEDGE and p.psn == dup.psn for p in sent) == 2
        assert fast["stats"]["duplicates"] == 1 and fast["stats"]["acks_sent"] == 14 + 1
    assert all(parse(f).icrc_ok for f in fast["sent"])


def crowded_tx_ring(peer: Peer) -> list[bytes]:
    """For an 8-slot tx ring that nobody drains: a SEND Only without an ACK request (one
    frame out), then five with one (on RC two frames each): the fourth finds one slot left,
    the fifth none."""
    frames = [peer.frame("SEND_ONLY", b"teach", psn=peer.take())]
    for k in range(5):
        frames.append(peer.frame("SEND_ONLY", b"x%d" % k, psn=peer.take(), ack_req=True))
    return frames


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("executor", EXECUTORS)
def test_a_tx_ring_without_room_for_a_reply_and_its_ack_is_left_to_the_general_path(
    executor: str, transport: str
) -> None:
    fast = same_as_general_path(
        executor, transport, crowded_tx_ring, preload=True, queues={"tx_depth": 8}
    )
    s = fast["stats"]
    if transport == "RC":
        # Three take the express path (slots 1-6), the fourth's echo takes the last slot and
        # its ACK is dropped, the fifth's echo and ACK both are.
        assert (s["express"], s["tx_ring_full"], s["acks_sent"]) == (3, 3, 3)
        assert [m[7] for m in fast["messages"]] == [False] * 5 + [True, False]
    else:
        assert (s["express"], s["tx_ring_full"]) == (5, 0)


# --- RDMA WRITE Only with Immediate ---------------------------------------------------------

WRITE_IMM = "RDMA_WRITE_ONLY_WITH_IMMEDIATE"
VA, RKEY, LENGTH = 0x7F00_1234_0000, 0x1357, 4096
OTHER_VA, OTHER_RKEY, OTHER_LENGTH = 0x1000, 0x2468, 256
REGIONS = [
    {"va": VA, "rkey": RKEY, "length": LENGTH},
    {"va": OTHER_VA, "rkey": OTHER_RKEY, "length": OTHER_LENGTH},
]


def pattern(n: int, seed: int) -> bytes:
    return bytes((i * 31 + seed * 7 + 1) & 0xFF for i in range(n))


class WritesWithImmediate:
    """WRITE Onlys with Immediate, NVQLink's shape, among the frames the express path must
    leave alone; ``lands`` is where the accepted ones' payloads go (region, offset, bytes),
    the model the regions are held to."""

    def __init__(self) -> None:
        self.lands: list[tuple[int, int, bytes]] = []

    def __call__(self, peer: Peer) -> list[bytes]:
        self.lands = []
        frames: list[bytes] = []
        rc = peer.transport == "RC"

        def frame(op: str, payload: bytes, psn: int, va: int, **fields: Any) -> bytes:
            fields.setdefault("rkey", RKEY)
            fields.setdefault("ack_req", rc)
            return peer.frame(op, payload, psn=psn, va=va, **fields)

        def write(payload: bytes, va: int, imm: int, takes: bool = True, **fields: Any) -> None:
            """Accepted (``takes``: its PSN is used; False: refused, RC NAKs it)."""
            frames.append(frame(WRITE_IMM, payload, peer.psn, va, imm=imm, **fields))
            if takes:
                peer.take()
                other = fields.get("rkey") == OTHER_RKEY
                self.lands.append((int(other), va - (OTHER_VA if other else VA), payload))

        write(pattern(32, 1), VA, 0x1001)  # general: teaches the header
        write(pattern(32, 2), VA + 64, 0x1002)  # express: placed, echoed, RC ACKs it
        write(b"", VA + 128, 0x1003)  # express, no payload
        for n in (1, 2, 3):
            write(pattern(n, 2 + n), VA + 160 + 8 * n, 0x1003 + n)  # express, pad 3, 2, 1
        write(pattern(300, 7), VA + 200, 0xDEADBEEF)  # express
        write(pattern(1400, 8), VA + 1024, 0)  # express
        write(pattern(64, 9), VA + LENGTH - 64, 7)  # express: up to the region's last byte
        write(pattern(40, 10), VA + 2600, 8, dma_len=100)  # express: DMA length above the payload
        write(pattern(48, 11), OTHER_VA + 16, 9, rkey=OTHER_RKEY)  # express: the other region
        write(pattern(32, 12), VA + 3000, 10, ack_req=not rc)  # express: RC unasked, UC asking
        # general: what accept_write refuses writes nothing (RC: NAK 0x62) and uses no PSN
        write(pattern(32, 13), VA + 400, 11, takes=False, rkey=RKEY + 1)  # unknown rkey
        write(pattern(32, 14), VA + LENGTH - 16, 12, takes=False)  # past the region's end
        write(pattern(32, 15), VA + 400, 13, takes=False, dma_len=16)  # longer than its DMA
        write(pattern(32, 16), 2**64 - 16, 14, takes=False)  # an address whose end wraps
        write(pattern(32, 17), OTHER_VA, 15, takes=False, rkey=OTHER_RKEY, dma_len=257)
        bad = bytearray(frame(WRITE_IMM, pattern(32, 18), peer.psn, VA + 500, imm=16))
        bad[-1] ^= 0x01
        frames.append(bytes(bad))  # general: an ICRC error; nothing may be written
        write(pattern(32, 19), VA + 540, 17)  # express
        dup = frame(WRITE_IMM, pattern(32, 20), psn_add(peer.psn, -1), VA + 580, imm=18)
        frames.append(dup)  # general: RC ACKs a duplicate again and writes nothing; UC:
        if not rc:  # a new start, written (the next PSN is the peer's again)
            self.lands.append((0, 580, pattern(32, 20)))
        gap = psn_add(peer.psn, 4)
        frames.append(frame(WRITE_IMM, pattern(32, 21), gap, VA + 620, imm=19))  # general: gap
        if not rc:  # UC starts from the gap; RC NAKed it and waits
            self.lands.append((0, 620, pattern(32, 21)))
            peer.psn = psn_add(gap, 1)
        write(pattern(32, 22), VA + 660, 20)  # express
        frames.append(peer.frame("SEND_ONLY", b"send", psn=peer.take(), ack_req=rc))  # general
        write(pattern(32, 23), VA + 700, 21)  # general: the WRITE learned again
        write(pattern(32, 24), VA + 740, 22)  # express
        frames.append(frame("RDMA_WRITE_ONLY", pattern(32, 25), peer.take(), VA + 780))  # general
        self.lands.append((0, 780, pattern(32, 25)))
        write(pattern(32, 26), VA + 820, 23)  # express: still the WRITE with Immediate learned
        frames.append(peer.frame("SEND_FIRST", pattern(64, 27), psn=peer.take()))  # general
        # general: a WRITE inside a SEND in progress: RC refuses it (NAK 0x61), UC drops the
        # SEND and takes the WRITE
        write(pattern(32, 28), VA + 860, 24, takes=not rc)
        write(pattern(32, 29), VA + 900, 25)  # express
        return frames


WRITES_EXPRESS = 16  # 2, empty, 3 pads, 300 B, 1400 B, last byte, DMA length, other, 12,
#                      19, 22, 24, 26, 29


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("executor", EXECUTORS)
def test_writes_with_immediate_take_the_express_path_and_land_as_the_general_paths(
    executor: str, transport: str
) -> None:
    script = WritesWithImmediate()
    fast = same_as_general_path(executor, transport, script, regions=REGIONS)
    assert fast["stats"]["express"] == WRITES_EXPRESS
    model = [bytearray(LENGTH), bytearray(OTHER_LENGTH)]  # regions start zeroed
    for region, at, data in script.lands:
        model[region][at : at + len(data)] = data
    assert fast["regions"] == [bytes(m) for m in model]
    s = fast["stats"]
    assert s["out_of_range"] == 5 and s["icrc_errors"] == 1
    # Each WRITE with immediate taken is a message: the written bytes and the immediate
    # handed to the handler, which echoed them (a completion holds the request's start).
    writes = {(p.psn, p.imm): p.payload for p in map(parse, fast["in"]) if p.imm is not None}
    taken = 0
    for request, reply, reply_len, opcode, psn, imm, _, _ in fast["messages"]:
        if opcode & 0x1F == 0x0B:
            data = writes[(psn, imm)]
            assert (request, reply, reply_len) == (data[: len(request)], request, len(data))
            taken += 1
    assert taken == len(script.lands) - 1  # all but the WRITE Only
    sent = [parse(f) for f in fast["sent"]]
    if transport == "RC":
        naks = [(p.aeth.syndrome, p.psn) for p in sent if p.aeth and p.aeth.syndrome != ACK]
        assert [n for n, _ in naks] == [NAK_REMOTE_ACCESS] * 5 + [NAK_PSN_SEQUENCE, 0x61]
    else:
        assert not [p for p in sent if p.opcode == ACKNOWLEDGE]
    assert all(p.icrc_ok for p in sent)


@pytest.mark.parametrize("setup", SETUPS)
def test_bench_roundtrip_reports_the_express_path_taking_rc_requests(
    setup: tuple[str, str],
) -> None:
    from roce_transceiver.bench.roundtrip import run_roundtrip

    executor, far_end = setup
    out = io.StringIO()
    r = run_roundtrip(executor, far_end, count=300, transport="RC", floor_iterations=100, out=out)
    assert r["all_done"], out.getvalue()
    # The first request of the warm-up teaches the header; every other one, each with its
    # ACK request, takes the express path.
    assert r["rx_packets"] == 300 + 300
    assert r["express_packets"] == r["rx_packets"] - 1, out.getvalue()
    assert f"express path on: {r['rx_packets'] - 1} of {r['rx_packets']}" in out.getvalue()
