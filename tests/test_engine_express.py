"""The express path (prediction.h): predicted SEND Onlys taken the short way, same results.

Goal: the express path is an optimisation only. For any sequence of frames the engine
transmits the same bytes, records the same completions and counts the same counters with
``express`` on as with it off; and it does take the frames it was built for.
- A scripted sequence mixing what the express path takes (SEND Onlys repeating the learned
  header: payload sizes 0 to 1506 bytes with every pad, rewritten TTL/TOS) with everything it
  must leave to the general path (the first SEND Only, a corrupt ICRC, a PSN gap, another UDP
  source port, an ACK request, immediate data, a two-packet SEND, a wrong QP).
- Every byte of a learned header changed in turn (ICRC recomputed, so only the header
  differs): each frame gets exactly what the general path gives it.

Oracles: the same run with ``express: false`` (the general path alone, tested against
scapy/tshark-checked frames elsewhere), and the count of frames the script predicts for the
express path (``express`` counter). Runs on each executor: the cuda executor's warp shares
the compares and CRCs among 32 lanes, the cpu executor's thread does them alone.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import pytest
from engine_helpers import EXECUTORS, TRANSPORTS, Peer, collect_n, make, receive_n

from roce_transceiver.protocol import icrc, parse, psn_add

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
    send("SEND_ONLY", b"L" * 32, udp_sport=50000, ack_req=True)  # general: RC ACKs it
    send("SEND_ONLY_WITH_IMMEDIATE", b"M" * 32, udp_sport=50000, imm=7)  # general
    send("SEND_FIRST", b"N" * 256, udp_sport=50000)  # general
    send("SEND_LAST", b"O" * 10, udp_sport=50000)  # general
    frames.append(  # general: not our QP (its PSN is not used up)
        peer.frame("SEND_ONLY", b"P" * 32, psn=peer.psn, udp_sport=50000, dest_qp=peer.qpn + 1)
    )
    send("SEND_ONLY", b"Q" * 32, udp_sport=50000)  # express
    return frames


EXPRESS_IN_SCRIPT = 12  # B, empty, 3 pads, 300 B, 600 B, 1506 B, F, I, K, Q


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


def engine_record(executor: str, transport: str, express: bool, script: Script) -> dict[str, Any]:
    """Everything the engine did for the script: frames out, completions, counters."""
    t = make(executor, transport, express=express)
    with t:
        peer = Peer(t)
        frames = script(peer)
        for f in frames:
            assert t.inject(f), "the rx ring is full: the script is longer than the ring"
        end = peer.frame("SEND_ONLY", b"end-of-script", psn=peer.psn, udp_sport=1)
        assert t.inject(end)
        sent: list[bytes] = []
        while not sent or parse(sent[-1]).payload != b"end-of-script":
            sent += collect_n(t, 1)
        messages: list[Any] = []
        while not messages or messages[-1].request != b"end-of-script":
            messages += receive_n(t, 1)
    stats = t.stats()  # after stop(): final
    records = [
        (m.request, m.reply, m.reply_len, m.opcode, m.psn, m.imm, m.handler_error, m.reply_dropped)
        for m in messages
    ]
    return {"sent": sent, "messages": records, "stats": stats}


def same_as_general_path(executor: str, transport: str, script: Script) -> dict[str, Any]:
    fast = engine_record(executor, transport, True, script)
    slow = engine_record(executor, transport, False, script)
    assert slow["stats"]["express"] == 0
    assert len(fast["sent"]) == len(slow["sent"])
    for i, (a, b) in enumerate(zip(fast["sent"], slow["sent"], strict=True)):
        assert a == b, f"frame {i} differs: express {parse(a)} vs general {parse(b)}"
    assert fast["messages"] == slow["messages"]
    differ = {
        k: (fast["stats"][k], slow["stats"][k])
        for k in fast["stats"]
        if k != "express" and fast["stats"][k] != slow["stats"][k]
    }
    assert not differ, f"counters (express, general): {differ}"
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
