"""RDMA WRITE placement into registered memory regions.

Goal: a WRITE lands where its RETH says (va - region.va into the region with
that rkey), across First/Middle/Last packets; a WRITE with immediate hands the
written bytes to the handler; any WRITE that would touch a byte outside its
region (va below or above it, va + length past its end, an unknown rkey, a
Middle/Last beyond the RETH's DMA length, a payload longer than the DMA
length) writes nothing, is counted as ``out_of_range`` and, on RC, NAKed with
syndrome 0x62 (remote access error).

Oracles:
- a Python model of the region: a bytearray starting as read_region() read it
  when the case began, patched with what each accepted WRITE carries; after each case
  the whole region must equal the model (so a stray byte anywhere is caught);
- the AETH NAK codes of IBA 9.7.5.1 (remote access error: 0x62) and the HSB contract
  of DESIGN section 3 (UC WRITE Only per packet, WRITE Only with Immediate at
  the end of a frame);
- frames built by roce_transceiver.protocol.build, answers decoded by parse.
"""

from __future__ import annotations

import pytest
from engine_helpers import (
    ACK,
    ACKNOWLEDGE,
    EXECUTORS,
    NAK_REMOTE_ACCESS,
    TRANSPORTS,
    Peer,
    receive_n,
    running,
    wait_counters,
)

from roce_transceiver.protocol import OPCODES, Packet

VA = 0x7F00_1234_0000
RKEY = 0x1357
LENGTH = 4096
REGIONS = [
    {"va": VA, "rkey": RKEY, "length": LENGTH},
    {"va": 0x1000, "rkey": 0x2468, "length": 256},
]


def pattern(n: int, seed: int = 0) -> bytes:
    return bytes((i * 31 + seed * 7 + 1) & 0xFF for i in range(n))


def naks(frames: list[Packet]) -> list[tuple[int, int]]:
    """(syndrome, psn) of the ACKNOWLEDGEs among the frames."""
    return [(p.aeth.syndrome, p.psn) for p in frames if p.opcode == ACKNOWLEDGE and p.aeth]


class Region:
    """The model of region 0: what the engine's copy must hold."""

    def __init__(self, initial: bytes) -> None:
        self.bytes = bytearray(initial)

    def write(self, va: int, data: bytes) -> None:
        at = va - VA
        self.bytes[at : at + len(data)] = data


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("executor", EXECUTORS)
def test_write_only_lands_at_its_offset_and_nowhere_else(executor, transport):
    with running(executor, transport, regions=REGIONS) as t:
        peer = Peer(t)
        model = Region(t.read_region(0))
        other = t.read_region(1)
        writes = [
            (VA + 100, pattern(200, 1)),
            (VA, pattern(17, 2)),
            (VA + LENGTH - 64, pattern(64, 3)),
        ]
        rc = transport == "RC"
        psns = []
        for va, data in writes:
            psns.append(peer.psn)
            assert t.inject(peer.next("RDMA_WRITE_ONLY", data, va=va, rkey=RKEY, ack_req=rc))
            model.write(va, data)
        before = peer.fence(t)
        assert naks(before) == ([(ACK, psn) for psn in psns] if rc else [])
        assert t.read_region(0) == bytes(model.bytes)
        assert t.read_region(1) == other
        # A WRITE without immediate completes no message: only the fence ran the handler.
        wait_counters(t, out_of_range=0, messages=1, rx_packets=4)


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("executor", EXECUTORS)
def test_write_first_middle_last_places_every_packet_in_turn(executor, transport):
    with running(executor, transport, regions=REGIONS) as t:
        peer = Peer(t)
        model = Region(t.read_region(0))
        parts = [pattern(256, k) for k in range(3)] + [pattern(40, 9)]
        total = sum(len(p) for p in parts)
        va = VA + 1000
        ops = ["RDMA_WRITE_FIRST", "RDMA_WRITE_MIDDLE", "RDMA_WRITE_MIDDLE", "RDMA_WRITE_LAST"]
        for op, part in zip(ops, parts, strict=True):
            fields = {"va": va, "rkey": RKEY, "dma_len": total} if op.endswith("FIRST") else {}
            assert t.inject(peer.next(op, part, **fields))
        model.write(va, b"".join(parts))
        before = peer.fence(t)
        assert before == []
        assert t.read_region(0) == bytes(model.bytes)
        wait_counters(t, out_of_range=0, opcode_sequence=0, messages=1, rx_packets=5)


@pytest.mark.parametrize(
    "last", ["RDMA_WRITE_ONLY_WITH_IMMEDIATE", "RDMA_WRITE_LAST_WITH_IMMEDIATE"]
)
@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("executor", EXECUTORS)
def test_write_with_immediate_hands_the_written_bytes_to_the_handler(executor, transport, last):
    with running(executor, transport, regions=REGIONS) as t:
        peer = Peer(t)
        model = Region(t.read_region(0))
        va = VA + 64
        imm = 0x000ABC05  # HSB: psn[19:0] << 12 | page
        if last == "RDMA_WRITE_ONLY_WITH_IMMEDIATE":
            data = pattern(300, 4)
            psn = peer.psn
            assert t.inject(peer.next(last, data, va=va, rkey=RKEY, imm=imm))
        else:
            first, rest = pattern(256, 5), pattern(44, 6)
            data = first + rest
            assert t.inject(peer.next("RDMA_WRITE_FIRST", first, va=va, rkey=RKEY, dma_len=300))
            psn = peer.psn
            assert t.inject(peer.next(last, rest, imm=imm))
        model.write(va, data)
        before = peer.fence(t)
        # The echo handler's reply to a WRITE with immediate is the bytes written.
        replies = [p for p in before if p.opcode & 0x1F == 0x04]
        assert [p.payload for p in replies] == [data]
        peer.check_addressed_to_peer(replies[0])
        assert t.read_region(0) == bytes(model.bytes)
        c = receive_n(t, 2)[0]
        assert c.imm == imm
        assert c.opcode == OPCODES[f"{transport}_{last}"]
        assert c.psn == psn
        assert c.request_len == c.reply_len == len(data)
        assert c.request == c.reply == data[: len(c.request)]
        wait_counters(t, messages=2, replies=2)


@pytest.mark.parametrize("executor", EXECUTORS)
def test_hsb_frame_uc_write_onlys_then_write_only_with_immediate(executor):
    # DESIGN section 3: per packet a UC WRITE Only (0x2A) with its own RETH; the frame ends
    # with a UC WRITE Only with Immediate (0x2B) carrying psn[19:0] << 12 | page.
    with running(executor, "UC", regions=REGIONS) as t:
        peer = Peer(t)
        model = Region(t.read_region(0))
        line = 512
        for k in range(6):
            data = pattern(line, k)
            assert t.inject(peer.next("RDMA_WRITE_ONLY", data, va=VA + k * line, rkey=RKEY))
            model.write(VA + k * line, data)
        meta = pattern(128, 42)
        imm = (peer.psn & 0xFFFFF) << 12 | 3
        assert t.inject(
            peer.next("RDMA_WRITE_ONLY_WITH_IMMEDIATE", meta, va=VA + 3584, rkey=RKEY, imm=imm)
        )
        model.write(VA + 3584, meta)
        assert [p.payload for p in peer.fence(t)] == [meta]
        assert t.read_region(0) == bytes(model.bytes)
        assert receive_n(t, 1)[0].imm == imm


# ---------------------------------------------------------------- out of range


def _out_of_range_cases() -> dict[str, list[tuple[str, bytes, dict[str, int]]]]:
    """name -> the packets of the case; only the last one is out of range."""
    data = pattern(64, 8)
    only = "RDMA_WRITE_ONLY"
    first = {"va": VA + 512, "rkey": RKEY, "dma_len": 300}
    return {
        "va_below": [(only, data, {"va": VA - 1, "rkey": RKEY})],
        "va_far_below": [(only, data, {"va": 0, "rkey": RKEY})],
        "va_above": [(only, data, {"va": VA + LENGTH + 1, "rkey": RKEY})],
        "va_at_end": [(only, data, {"va": VA + LENGTH, "rkey": RKEY})],
        "va_len_past_end": [(only, data, {"va": VA + LENGTH - 63, "rkey": RKEY})],
        "va_len_wraps_2_64": [(only, data, {"va": 2**64 - 32, "rkey": RKEY})],
        "dma_len_past_end": [(only, data, {"va": VA, "rkey": RKEY, "dma_len": LENGTH + 1})],
        "unknown_rkey": [(only, data, {"va": VA, "rkey": RKEY + 1})],
        "other_regions_rkey": [(only, data, {"va": VA, "rkey": 0x2468})],
        "last_past_dma_len": [
            ("RDMA_WRITE_FIRST", pattern(256, 1), first),
            ("RDMA_WRITE_LAST", pattern(64, 2), {}),
        ],
        "middle_past_dma_len": [
            ("RDMA_WRITE_FIRST", pattern(256, 1), first),
            ("RDMA_WRITE_MIDDLE", pattern(256, 2), {}),
        ],
        "first_past_end": [
            (
                "RDMA_WRITE_FIRST",
                pattern(256, 1),
                {"va": VA + LENGTH - 256, "rkey": RKEY, "dma_len": 512},
            ),
        ],
    }


OUT_OF_RANGE = list(_out_of_range_cases())


@pytest.mark.parametrize("case", OUT_OF_RANGE)
@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("executor", EXECUTORS)
def test_out_of_range_write_changes_nothing_counts_and_rc_naks_0x62(executor, transport, case):
    with running(executor, transport, regions=REGIONS) as t:
        peer = Peer(t)
        model = Region(t.read_region(0))
        other = t.read_region(1)
        packets = _out_of_range_cases()[case]
        for op, data, fields in packets[:-1]:  # the accepted start of a multi-packet WRITE
            assert t.inject(peer.next(op, data, **fields))
            model.write(fields["va"], data)
        op, data, fields = packets[-1]
        bad_psn = peer.psn
        assert t.inject(peer.frame(op, data, psn=bad_psn, **fields))
        before = peer.fence(t)  # at the rejected packet's PSN: it was not consumed
        assert naks(before) == ([(NAK_REMOTE_ACCESS, bad_psn)] if transport == "RC" else [])
        assert [p for p in before if p.opcode != ACKNOWLEDGE] == []
        assert t.read_region(0) == bytes(model.bytes), "bytes outside the accepted WRITEs changed"
        assert t.read_region(1) == other
        wait_counters(
            t,
            out_of_range=1,
            messages=1,
            naks_sent=1 if transport == "RC" else 0,
            rx_packets=len(packets) + 1,
        )


@pytest.mark.parametrize("executor", EXECUTORS)
def test_write_ending_exactly_at_region_end_is_accepted(executor):
    # The bound is inclusive of the last byte: [va, va+len) may end at region.va + length.
    with running(executor, "RC", regions=REGIONS) as t:
        peer = Peer(t)
        model = Region(t.read_region(0))
        data = pattern(64, 11)
        psn = peer.psn
        assert t.inject(
            peer.next("RDMA_WRITE_ONLY", data, va=VA + LENGTH - 64, rkey=RKEY, ack_req=True)
        )
        model.write(VA + LENGTH - 64, data)
        assert naks(peer.fence(t)) == [(ACK, psn)]
        assert t.read_region(0) == bytes(model.bytes)
        wait_counters(t, out_of_range=0)


@pytest.mark.parametrize("executor", EXECUTORS)
def test_rc_write_after_remote_access_nak_retries_at_the_same_psn(executor):
    with running(executor, "RC", regions=REGIONS) as t:
        peer = Peer(t)
        model = Region(t.read_region(0))
        psn = peer.psn
        data = pattern(32, 12)
        assert t.inject(
            peer.frame("RDMA_WRITE_ONLY", data, psn=psn, va=VA, rkey=0xBAD, ack_req=True)
        )
        assert t.inject(
            peer.frame("RDMA_WRITE_ONLY", data, psn=psn, va=VA, rkey=RKEY, ack_req=True)
        )
        peer.take()
        model.write(VA, data)
        assert naks(peer.fence(t)) == [(NAK_REMOTE_ACCESS, psn), (ACK, psn)]
        assert t.read_region(0) == bytes(model.bytes)
        wait_counters(t, out_of_range=1, naks_sent=1, acks_sent=1)


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("executor", EXECUTORS)
def test_write_payload_longer_than_its_dma_len_writes_nothing(executor, transport):
    # A length error: whichever NAK an RC responder picks for it, invalid
    # request (rxe's RESPST_ERR_LENGTH) or remote access, no byte may land.
    with running(executor, transport, regions=REGIONS) as t:
        peer = Peer(t)
        initial = t.read_region(0)
        psn = peer.psn
        assert t.inject(
            peer.frame("RDMA_WRITE_ONLY", pattern(64, 13), psn=psn, va=VA, rkey=RKEY, dma_len=32)
        )
        before = peer.fence(t)
        assert t.read_region(0) == initial
        if transport == "RC":
            assert naks(before) in ([(0x61, psn)], [(NAK_REMOTE_ACCESS, psn)])
        else:
            assert before == []
        wait_counters(t, messages=1)
