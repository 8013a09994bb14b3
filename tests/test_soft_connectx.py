"""The software ConnectX: mlx5 WQEs in (as GPUNetIO's device API writes them), RC RoCEv2
packets out, the peer's acknowledgements in, one CQE per WQE back.

Goal: a NIC the unmodified device API can drive. Oracles: WQEs built from GPUNetIO's own
header structures (where CI points at them) and from the layout facts; packets parsed by the
protocol core (cross-checked against scapy and tshark elsewhere); acknowledgements built by
the protocol core; our engine as the peer (an independent RC responder) for end-to-end WRITEs;
the descriptor read back through the headers' struct. Each CQE is checked where the device's
poller looks: owner bit for the pass, opcode, WQE counter, byte count, error syndrome.
"""

from __future__ import annotations

import struct

import pytest
from conftest import skip_missing
from verbs_helpers import (
    DBR_OFFSET,
    doorbell,
    doorbell_record,
    header_doorbell,
    header_put_signal_wqes,
    ring_bf,
    ring_db,
    run_with_headers,
    wqe_fetch_add,
    wqe_nop,
    wqe_write,
    wqe_write_inline,
)

from roce_transceiver import _core
from roce_transceiver.protocol import build, parse

QPN, PEER_QPN = 0x123, 0x456
LKEY, RKEY, SIG_KEY, SINK_KEY = 0x112233, 0xABCDEF, 0x445566, 0x778899


def nic(**extra):
    cfg = {"qpn": QPN, "peer_qpn": PEER_QPN, "sq_wqe_num": 8, "cqe_num": 8, "mtu": 256}
    return _core.SoftConnectX({**cfg, **extra})


def post(n, index, wqe: bytes) -> None:
    slots = len(n.sq) // 64
    n.sq[(index % slots) * 64 : (index % slots) * 64 + 64] = wqe


def cqe(n, index) -> dict:
    slots = len(n.cq) // 64
    c = bytes(n.cq[(index % slots) * 64 : (index % slots) * 64 + 64])
    return {
        "byte_cnt": struct.unpack_from(">I", c, 44)[0],
        "syndrome": c[55],
        "wqe_opcode": c[56],
        "qpn": struct.unpack_from(">I", c, 56)[0] & 0xFFFFFF,
        "wqe_counter": struct.unpack_from(">H", c, 60)[0],
        "opcode": c[63] >> 4,
        "owner": c[63] & 1,
    }


def ack(psn: int, *, syndrome: int = 0x1F, orig: int | None = None) -> bytes:
    if orig is not None:
        return build(
            "RC_ATOMIC_ACKNOWLEDGE", dest_qp=QPN, psn=psn, syndrome=syndrome, atomic_ack_orig=orig
        )
    return build("RC_ACKNOWLEDGE", dest_qp=QPN, psn=psn, syndrome=syndrome)


def test_fresh_cq_reads_not_done_for_the_first_pass():
    n = nic()
    assert all(cqe(n, i)["owner"] == 1 and cqe(n, i)["opcode"] == 0xF for i in range(8))


def test_put_signal_wqes_from_the_headers_become_a_write_and_a_fetch_add(tmp_path):
    wqes = header_put_signal_wqes(tmp_path)
    assert len(wqes) == 2
    # The same bytes from the layout facts, once the bytes the device leaves unwritten match.
    ours = [
        wqe_write(5, 0x123, 0x1000, RKEY, 0x2000, LKEY, 32),
        wqe_fetch_add(6, 0x123, 0x40, SIG_KEY, 1, 0, SINK_KEY),
    ]
    for theirs, mine in zip(wqes, ours, strict=True):
        assert theirs[:8] == mine[:8] and theirs[11:] == mine[11:]
    run_put_signal(nic(qpn=0x123, sq_psn=100), wqes, first_index=5, qpn=0x123)


@pytest.mark.parametrize("first_index", [0, 5])
def test_put_signal_wqes_from_the_layout(first_index):
    wqes = [
        wqe_write(first_index, QPN, 0x1000, RKEY, 0x2000, LKEY, 32),
        wqe_fetch_add(first_index + 1, QPN, 0x40, SIG_KEY, 1, 0, SINK_KEY),
    ]
    run_put_signal(nic(sq_psn=100), wqes, first_index, qpn=QPN)


def run_put_signal(n, wqes, first_index, qpn):
    src = n.add_region(LKEY, 0x2000, 64)
    src[:32] = bytes(range(32))
    sink = n.add_region(SINK_KEY, 0, 8)
    for k in range(first_index):  # earlier slots: NOPs, to reach the index the WQEs carry
        post(n, k, wqe_nop(k, qpn))
    for k, w in enumerate(wqes):
        post(n, first_index + k, w)
    n.ring(first_index + len(wqes))
    out = [parse(f) for f in n.poll(now_ns=1)]
    assert [p.opcode_name for p in out] == ["RC_RDMA_WRITE_ONLY", "RC_FETCH_ADD"]
    write, fa = out
    assert write.dest_qp == PEER_QPN and write.ack_req and write.icrc_ok
    assert (write.reth.va, write.reth.rkey, write.reth.dma_len) == (0x1000, RKEY, 32)
    assert write.payload == bytes(range(32)) and write.psn == 100
    assert (fa.atomic_eth.va, fa.atomic_eth.rkey, fa.atomic_eth.swap_add) == (0x40, SIG_KEY, 1)
    assert fa.psn == 101 and fa.icrc_ok
    # Nothing completes before the peer acknowledges.
    assert n.stats()["completed"] == first_index
    ours, again = n.on_frame(ack(100), now_ns=2)
    assert ours and again == []
    assert cqe(n, first_index) == {
        "byte_cnt": 32,
        "syndrome": 0,
        "wqe_opcode": 0x08,
        "qpn": qpn,
        "wqe_counter": first_index,
        "opcode": 0,
        "owner": 0,
    }
    assert cqe(n, first_index + 1)["opcode"] == 0xF  # the signal waits for its answer
    n.on_frame(ack(101, orig=41), now_ns=3)
    c = cqe(n, first_index + 1)
    assert (c["opcode"], c["wqe_counter"], c["byte_cnt"], c["wqe_opcode"]) == (
        0,
        first_index + 1,
        8,
        0x12,
    )
    assert struct.unpack("<Q", bytes(sink))[0] == 41  # the old value, in native order
    assert n.stats()["completed"] == first_index + 2 and not n.stats()["in_error"]


def test_long_write_is_first_middle_last_and_one_cqe():
    n = nic()
    src = n.add_region(LKEY, 0x10000, 4096)
    src[:] = bytes(i % 251 for i in range(4096))
    post(n, 0, wqe_write(0, QPN, 0x8000, RKEY, 0x10000, LKEY, 700))
    n.ring(1)
    out = [parse(f) for f in n.poll()]
    assert [p.opcode_name for p in out] == [
        "RC_RDMA_WRITE_FIRST",
        "RC_RDMA_WRITE_MIDDLE",
        "RC_RDMA_WRITE_LAST",
    ]
    assert b"".join(p.payload for p in out) == bytes(src[:700])
    assert [p.psn for p in out] == [0, 1, 2] and [p.ack_req for p in out] == [0, 0, 1]
    assert out[0].reth.dma_len == 700
    n.on_frame(ack(1))
    assert cqe(n, 0)["opcode"] == 0xF  # PSN 2 not acknowledged yet
    n.on_frame(ack(2))
    assert cqe(n, 0)["byte_cnt"] == 700 and cqe(n, 0)["opcode"] == 0


def test_inline_write_and_write_with_immediate():
    n = nic()
    n.add_region(LKEY, 0, 64)
    post(n, 0, wqe_write_inline(0, QPN, 0x40, RKEY, b"\x01\x02\x03\x04\x05\x06\x07\x08"))
    post(n, 1, wqe_write(1, QPN, 0x80, RKEY, 0, LKEY, 16, imm=0xCAFEF00D))
    n.ring(2)
    inline, imm = (parse(f) for f in n.poll())
    assert inline.opcode_name == "RC_RDMA_WRITE_ONLY" and inline.payload == bytes(range(1, 9))
    assert imm.opcode_name == "RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE" and imm.imm == 0xCAFEF00D


def test_owner_bit_flips_on_every_pass_of_the_ring():
    n = nic(sq_wqe_num=4, cqe_num=4)
    n.add_region(LKEY, 0, 64)
    for i in range(10):
        post(n, i, wqe_write(i, QPN, 0, RKEY, 0, LKEY, 8))
        n.ring(i + 1)
        (frame,) = n.poll()
        n.on_frame(ack(parse(frame).psn))
        c = cqe(n, i)
        assert (c["wqe_counter"], c["owner"], c["opcode"]) == (i, (i // 4) & 1, 0)


def test_bad_local_key_is_an_error_cqe_and_flushes_the_rest():
    n = nic()
    n.add_region(LKEY, 0, 64)
    post(n, 0, wqe_write(0, QPN, 0, RKEY, 32, LKEY, 64))  # 32 + 64 > 64: outside the region
    post(n, 1, wqe_write(1, QPN, 0, RKEY, 0, LKEY, 8))
    n.ring(2)
    assert n.poll() == []  # nothing goes on the wire
    first, second = cqe(n, 0), cqe(n, 1)
    assert (first["opcode"], first["syndrome"]) == (0xD, 0x04)
    assert (second["opcode"], second["syndrome"]) == (0xD, 0x05)
    s = n.stats()
    assert s["in_error"] and s["errors"] == 2 and "does not cover 64 bytes" in s["last_error"]


def test_remote_access_nak_fails_the_wqe():
    n = nic()
    n.add_region(LKEY, 0, 64)
    post(n, 0, wqe_write(0, QPN, 0, RKEY, 0, LKEY, 8))
    n.ring(1)
    n.poll()
    n.on_frame(ack(0, syndrome=0x62))
    assert (cqe(n, 0)["opcode"], cqe(n, 0)["syndrome"]) == (0xD, 0x13)


def test_psn_sequence_nak_sends_again_from_there():
    n = nic()
    n.add_region(LKEY, 0, 4096)
    post(n, 0, wqe_write(0, QPN, 0, RKEY, 0, LKEY, 600))  # PSNs 0, 1, 2
    n.ring(1)
    assert len(n.poll()) == 3
    ours, again = n.on_frame(ack(1, syndrome=0x60))  # the peer missed PSN 1
    assert ours and [parse(f).psn for f in again] == [0, 1, 2]
    n.on_frame(ack(2))
    assert cqe(n, 0)["opcode"] == 0 and n.stats()["retransmits"] == 1


def test_no_acknowledgement_resends_then_fails_with_retry_exceeded():
    n = nic(retransmit_ns=1000, retries=2)
    n.add_region(LKEY, 0, 64)
    post(n, 0, wqe_write(0, QPN, 0, RKEY, 0, LKEY, 8))
    n.ring(1)
    assert len(n.poll(now_ns=0)) == 1
    assert n.poll(now_ns=500) == []  # not yet due
    assert len(n.poll(now_ns=1500)) == 1
    assert len(n.poll(now_ns=3000)) == 1
    n.poll(now_ns=5000)
    assert (cqe(n, 0)["opcode"], cqe(n, 0)["syndrome"]) == (0xD, 0x15)


def test_a_wqe_not_yet_written_is_read_again_later():
    n = nic()
    n.add_region(LKEY, 0, 64)
    n.ring(1)  # the doorbell ran ahead of the WQE's bytes (a GPU-scope release only)
    assert n.poll() == [] and n.stats()["stale_waits"] == 1 and n.stats()["consumed"] == 0
    post(n, 0, wqe_write(0, QPN, 0, RKEY, 0, LKEY, 8))
    assert len(n.poll()) == 1


def test_frames_for_another_qp_or_with_a_bad_icrc_are_ignored():
    n = nic()
    assert n.on_frame(build("RC_ACKNOWLEDGE", dest_qp=QPN + 1, psn=0))[0] is False
    bad = bytearray(ack(0))
    bad[-1] ^= 0xFF
    assert n.on_frame(bytes(bad))[0] is False
    assert n.stats()["ignored"] == 2


_READ_DESCRIPTOR = r"""
#include <cstdio>
#include "common/doca_gpunetio_verbs_dev.h"
int main(int, char** argv) {
  doca_gpu_dev_verbs_qp qp;
  FILE* f = std::fopen(argv[1], "rb");
  if (std::fread(&qp, sizeof qp, 1, f) != 1) return 1;
  const char* db = reinterpret_cast<const char*>(qp.sq_db);
  PRINT;
}
"""


def read_descriptor(tmp_path, n, name: str, printed: str) -> list[int]:
    """The descriptor `n` fills, read back through GPUNetIO's own structure by a program whose
    `printed` statement prints the fields a test checks (`qp`, and `db`: sq_db as bytes)."""
    if not _descriptor_built():
        skip_missing("gpunetio", "this build has no GPUNetIO headers: no descriptor")
    blob = tmp_path / f"{name}.bin"
    blob.write_bytes(n.descriptor())
    source = _READ_DESCRIPTOR.replace("PRINT", printed)
    return [int(v) for v in run_with_headers(tmp_path, source, name, str(blob)).split()]


def test_descriptor_reads_back_through_the_headers_struct(tmp_path):
    """The descriptor is filled through GPUNetIO's own structure (its layout changes between
    releases); read back through the same header, the fields are what the device needs."""
    out = read_descriptor(
        tmp_path,
        nic(sq_wqe_num=64, cqe_num=128),
        "read_qp",
        r"""std::printf("%u %u %u %u %u %d %u %u %u %d\n", qp.sq_num, qp.sq_num_shift8,
              __builtin_bswap32(qp.sq_num_shift8_be_3ds), qp.sq_wqe_num, qp.sq_wqe_mask,
              (int)(qp.nic_handler == DOCA_GPUNETIO_VERBS_NIC_HANDLER_CPU_PROXY),
              qp.cq_sq.cqe_num, qp.cq_sq.cqe_mask, qp.cq_sq.cqe_size,
              (int)(qp.sq_wqe_daddr != 0))""",
    )
    assert out == [QPN, QPN << 8, QPN << 8 | 3, 64, 63, 1, 128, 127, 64, 1]


def _descriptor_built() -> bool:
    try:
        nic().descriptor()
    except RuntimeError:
        return False
    return True


def test_descriptor_without_the_headers_says_why():
    if _descriptor_built():
        pytest.skip("this build has GPUNetIO's headers")
    with pytest.raises(RuntimeError, match="no GPUNetIO headers"):
        nic().descriptor()


def test_writes_and_signals_land_in_our_engine_and_its_acks_complete_them():
    """End to end with an independent RC responder: the transceiver's engine (cpu executor,
    loopback wire) is the peer; the software ConnectX's WRITEs land in its region, its
    FETCH_ADDs count a signal word there, and the engine's ACKs and atomic ACKs complete the
    WQEs (the old values land in our buffer)."""
    from roce_transceiver.transceiver import Transceiver

    cfg = {
        "executor": "cpu",
        "handler": "sink",
        "qp": {"transport": "RC", "qpn": 0x11, "peer_qpn": 0x12},
        "regions": [{"va": 0x10000, "rkey": RKEY, "length": 8192}],
    }
    n = _core.SoftConnectX(
        {
            "qpn": 0x12,
            "peer_qpn": 0x11,
            "sq_wqe_num": 16,
            "cqe_num": 16,
            "mtu": 1024,
            "local_mac": bytes.fromhex("020000000002"),
            "peer_mac": bytes.fromhex("020000000001"),
            "local_ip": bytes([10, 0, 0, 2]),
            "peer_ip": bytes([10, 0, 0, 1]),
        }
    )
    src = n.add_region(LKEY, 0, 8192)
    src[:] = bytes((i * 13) % 256 for i in range(8192))
    wqes = [
        wqe_write(0, 0x12, 0x10000, RKEY, 0, LKEY, 3000),  # three packets
        wqe_write_inline(1, 0x12, 0x10000 + 4000, RKEY, b"inline bytes"),
        wqe_write(2, 0x12, 0x10000 + 5000, RKEY, 100, LKEY, 64, imm=7),
        wqe_fetch_add(3, 0x12, 0x10000 + 8000, RKEY, 5, 8000, LKEY),  # put_signal's signal
        wqe_fetch_add(4, 0x12, 0x10000 + 8000, RKEY, 1, 8008, LKEY),
    ]
    with Transceiver(cfg) as t:
        for i, w in enumerate(wqes):
            post(n, i, w)
        n.ring(len(wqes))
        for frame in n.poll():
            assert t.inject(frame)
        acks = t.collect(want=5, timeout=10.0)
        for frame in acks:
            n.on_frame(frame)
        region = t.read_region(0)
    assert region[:3000] == bytes(src[:3000])
    assert region[4000:4012] == b"inline bytes"
    assert region[5000:5064] == bytes(src[100:164])
    assert struct.unpack_from("<Q", region, 8000)[0] == 6  # the signal word counted both
    assert struct.unpack_from("<QQ", bytes(src), 8000) == (0, 5)  # each FA's value before
    assert [cqe(n, i)["opcode"] for i in range(5)] == [0] * 5
    assert [cqe(n, i)["byte_cnt"] for i in range(5)] == [3000, 12, 64, 8, 8]
    assert n.stats()["completed"] == 5 and n.stats()["acks"] == len(acks)


# -- the responder half: the peer's requests executed and answered ---------------------------
REGION_VA, REGION_KEY = 0x7000_0000, 0x99


def responder(**extra):
    """A software ConnectX with one remote-access region of 4 KiB (as the peer sees it)."""
    n = nic(**extra)
    region = n.add_remote_region(REGION_KEY, REGION_VA, 4096)
    return n, region


def request(opcode: str, payload: bytes = b"", **fields) -> bytes:
    return build(opcode, payload, dest_qp=QPN, **fields)


def answers(frames) -> list[tuple]:
    """What matters of each answer: opcode, PSN, AETH syndrome and MSN, the atomic's value."""
    out = []
    for f in frames:
        p = parse(f)
        assert p.icrc_ok and p.dest_qp == PEER_QPN, p
        orig = p.atomic_ack_orig if p.opcode_name == "RC_ATOMIC_ACKNOWLEDGE" else None
        out.append((p.opcode_name, p.psn, p.aeth.syndrome, p.aeth.msn, orig))
    return out


def feed(n, frames) -> list[tuple]:
    emitted = []
    for f in frames:
        ours, out = n.on_frame(f)
        assert ours
        emitted += out
    return answers(emitted)


ACK, NAK_SEQ, NAK_INVALID, NAK_ACCESS = 0x1F, 0x60, 0x61, 0x62
W = {"rkey": REGION_KEY}

# Scenarios of requests, each answered by the responder of the engine (the oracle, below) and
# of the software ConnectX the same way.
SCENARIOS = {
    "writes and atomics": [
        request("RC_RDMA_WRITE_ONLY", b"A" * 40, psn=0, ack_req=True, va=REGION_VA, **W),
        request("RC_RDMA_WRITE_FIRST", b"B" * 256, psn=1, va=REGION_VA + 64, dma_len=600, **W),
        request("RC_RDMA_WRITE_MIDDLE", b"C" * 256, psn=2),
        request("RC_RDMA_WRITE_LAST_WITH_IMMEDIATE", b"D" * 88, psn=3, ack_req=True, imm=77),
        request("RC_FETCH_ADD", psn=4, va=REGION_VA + 1024, swap_add=5, **W),
        request("RC_COMPARE_SWAP", psn=5, va=REGION_VA + 1024, compare=5, swap_add=9, **W),
        request("RC_COMPARE_SWAP", psn=6, va=REGION_VA + 1024, compare=1, swap_add=2, **W),
        request("RC_COMPARE_SWAP", psn=6, va=REGION_VA + 1024, compare=1, swap_add=2, **W),
        request("RC_RDMA_WRITE_ONLY", b"A" * 40, psn=0, ack_req=True, va=REGION_VA, **W),
        request("RC_FETCH_ADD", psn=4, va=REGION_VA + 1024, swap_add=5, **W),
    ],
    "errors": [
        request("RC_RDMA_WRITE_ONLY", b"x" * 8, psn=0, ack_req=True, va=REGION_VA, rkey=0x98),
        request("RC_RDMA_WRITE_ONLY", b"x" * 8, psn=0, ack_req=True, va=REGION_VA + 4090, **W),
        request("RC_FETCH_ADD", psn=0, va=REGION_VA + 4, swap_add=1, **W),
        request("RC_FETCH_ADD", psn=0, va=REGION_VA, swap_add=1, rkey=0x98),
        request("RC_RDMA_WRITE_MIDDLE", b"y" * 16, psn=0, ack_req=True),
        request("RC_RDMA_WRITE_ONLY", b"z" * 8, psn=5, ack_req=True, va=REGION_VA, **W),
        request("RC_RDMA_WRITE_ONLY", b"z" * 8, psn=6, ack_req=True, va=REGION_VA, **W),
        request("RC_RDMA_WRITE_ONLY", b"z" * 8, psn=0, ack_req=True, va=REGION_VA, **W),
        request("RC_RDMA_WRITE_FIRST", b"F" * 256, psn=1, va=REGION_VA, dma_len=300, **W),
        request("RC_RDMA_WRITE_LAST", b"L" * 100, psn=2, ack_req=True),
    ],
}
SCENARIO_ANSWERS = {
    "writes and atomics": [
        ("RC_ACKNOWLEDGE", 0, ACK, 1, None),
        ("RC_ACKNOWLEDGE", 3, ACK, 2, None),
        ("RC_ATOMIC_ACKNOWLEDGE", 4, ACK, 3, 0),
        ("RC_ATOMIC_ACKNOWLEDGE", 5, ACK, 4, 5),
        ("RC_ATOMIC_ACKNOWLEDGE", 6, ACK, 5, 9),
        ("RC_ATOMIC_ACKNOWLEDGE", 6, ACK, 5, 9),  # the duplicate: replayed, not executed
        ("RC_ACKNOWLEDGE", 0, ACK, 5, None),  # a duplicate WRITE: acknowledged again
        ("RC_ACKNOWLEDGE", 4, ACK, 5, None),  # an older atomic: acknowledged, not run again
    ],
    "errors": [
        ("RC_ACKNOWLEDGE", 0, NAK_ACCESS, 0, None),  # no region has that rkey
        ("RC_ACKNOWLEDGE", 0, NAK_ACCESS, 0, None),  # past the region's end
        ("RC_ACKNOWLEDGE", 0, NAK_INVALID, 0, None),  # a misaligned atomic
        ("RC_ACKNOWLEDGE", 0, NAK_ACCESS, 0, None),  # an atomic under an unknown rkey
        ("RC_ACKNOWLEDGE", 0, NAK_INVALID, 0, None),  # a Middle with no message
        ("RC_ACKNOWLEDGE", 0, NAK_SEQ, 0, None),  # PSN 5 when 0 was expected: NAK once...
        ("RC_ACKNOWLEDGE", 0, ACK, 1, None),  # ...not again for 6; 0 goes on
        ("RC_ACKNOWLEDGE", 2, NAK_ACCESS, 1, None),  # a Last beyond its RETH's length
    ],
}


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_responder_answers_as_the_rules_say(scenario):
    n, region = responder()
    assert feed(n, SCENARIOS[scenario]) == SCENARIO_ANSWERS[scenario]
    if scenario == "writes and atomics":
        assert bytes(region[:40]) == b"A" * 40
        assert bytes(region[64 : 64 + 600]) == b"B" * 256 + b"C" * 256 + b"D" * 88
        assert struct.unpack_from("<Q", region, 1024)[0] == 9  # 0 + 5, then swapped to 9
        s = n.stats()
        assert (s["atomics"], s["duplicates"], s["write_imms"], s["last_imm"]) == (3, 3, 1, 77)
        assert s["bytes_placed"] == 640 and s["requests"] == 7
    else:
        # z at 0, then the First's bytes over it; nothing past the region's end was placed.
        assert bytes(region[:256]) == b"F" * 256 and bytes(region[4088:]) == bytes(8)
        s = n.stats()
        assert (s["out_of_range"], s["psn_gaps"], s["sequence_errors"]) == (5, 2, 1)


def engine_answers(frames, probe_psn: int) -> tuple[list[tuple], bytes]:
    """The engine's answers to `frames` (the oracle: an independent RC responder on the cpu
    executor), up to its ACK of a probe WRITE at `probe_psn`, and its region afterwards."""
    from roce_transceiver.transceiver import Transceiver

    cfg = {
        "executor": "cpu",
        "handler": "sink",
        "qp": {"transport": "RC", "qpn": QPN, "peer_qpn": PEER_QPN},
        "regions": [{"va": REGION_VA, "rkey": REGION_KEY, "length": 4096}],
    }
    probe = request("RC_RDMA_WRITE_ONLY", b"", psn=probe_psn, ack_req=True, va=REGION_VA, **W)
    got: list[tuple] = []
    with Transceiver(cfg) as t:
        for f in [*frames, probe]:
            assert t.inject(f)
        while not got or got[-1][:3] != ("RC_ACKNOWLEDGE", probe_psn, ACK):
            more = t.collect(max_frames=64, want=1, timeout=10.0)
            assert more, f"the engine's answers stopped after {got}"
            got += answers(more)
        region = t.read_region(0)
    return got[:-1], region


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_responder_answers_as_the_engine_does(scenario):
    """The same requests, the same answers and bytes from both responders: the rules are
    rc_responder.h's, written once; the oracle is the engine's RC path, tested on its own."""
    n, region = responder()
    ours = feed(n, SCENARIOS[scenario])
    theirs, engine_region = engine_answers(SCENARIOS[scenario], n.stats()["expected_psn"])
    assert ours == theirs
    assert bytes(region) == engine_region


def test_responder_refuses_send_and_read_with_invalid_request():
    """No receive queue takes a SEND here, and READ is not served: NAK invalid request, and
    the PSN they carried is still expected (nothing executed)."""
    n, _ = responder()
    out = feed(
        n,
        [
            request("RC_SEND_ONLY", b"s", psn=0, ack_req=True),
            request("RC_RDMA_READ_REQUEST", psn=0, va=REGION_VA, dma_len=8, **W),
        ],
    )
    assert out == [("RC_ACKNOWLEDGE", 0, NAK_INVALID, 0, None)] * 2
    assert n.stats()["unsupported"] == 2 and n.stats()["expected_psn"] == 0


def test_responder_without_regions_refuses_every_write():
    n = nic()
    out = feed(n, [request("RC_RDMA_WRITE_ONLY", b"q", psn=0, ack_req=True, va=0, rkey=1)])
    assert out == [("RC_ACKNOWLEDGE", 0, NAK_ACCESS, 0, None)]


def test_remote_regions_are_checked_when_added():
    n = nic()
    n.add_remote_region(1, 0x1000, 64)
    with pytest.raises(ValueError, match="rkey 1: already used"):
        n.add_remote_region(1, 0x2000, 64)
    with pytest.raises(ValueError, match="empty"):
        n.add_remote_region(2, 0x2000, 0)


# -- doorbells: each NIC handler's, as its device code rings ----------------------------------
def test_doorbell_builders_match_gpunetios_control_segment(tmp_path):
    db, dbr = header_doorbell(tmp_path)
    assert db == doorbell(0x12345, 0x123) and dbr == doorbell_record(0x12345)


def post_writes(n, first: int, count: int, src_key=LKEY) -> None:
    for i in range(first, first + count):
        post(n, i, wqe_write(i, QPN, 0x1000 + 8 * i, RKEY, 0, src_key, 8))


def test_gpu_sm_db_takes_wqes_to_the_doorbell_record_and_uar_word():
    n = nic(nic_handler="gpu_sm_db")
    n.add_region(LKEY, 0, 64)
    page = n.doorbell_page
    post_writes(n, 0, 3)
    ring_db(page, 2, QPN)
    assert [parse(f).psn for f in n.poll()] == [0, 1]
    # The record alone (a UAR write not seen yet) rings as well; so does the UAR word alone.
    page[DBR_OFFSET : DBR_OFFSET + 4] = doorbell_record(3)
    assert [parse(f).psn for f in n.poll()] == [2]
    post_writes(n, 3, 1)
    page[0:8] = doorbell(4, QPN)
    assert [parse(f).psn for f in n.poll()] == [3]
    # A stale doorbell (an index behind what was taken) is not a ring ahead.
    page[0:8] = doorbell(1, QPN)
    page[DBR_OFFSET : DBR_OFFSET + 4] = doorbell_record(2)
    assert n.poll() == [] and n.stats()["consumed"] == 4


def test_gpu_sm_db_ignores_another_qps_doorbell_and_the_cpu_proxys_count():
    n = nic(nic_handler="gpu_sm_db")
    n.add_region(LKEY, 0, 64)
    post_writes(n, 0, 1)
    n.doorbell_page[0:8] = doorbell(1, QPN + 1)
    assert n.poll() == [] and n.stats()["foreign_rings"] == 1
    n.ring(1)  # what a CPU-proxy device would store: not a doorbell of this mode
    assert n.poll() == [] and n.stats()["consumed"] == 0
    ring_db(n.doorbell_page, 1, QPN)
    assert len(n.poll()) == 1


def test_gpu_sm_bf_reads_the_wqe_from_the_window_not_the_send_ring():
    """The device writes the WQE into the BlueFlame window only (as hololink's send_bf does):
    the send ring's slot still holds another pass's bytes."""
    n = nic(nic_handler="gpu_sm_bf")
    src = n.add_region(LKEY, 0, 64)
    src[:8] = b"bf bytes"
    post(n, 0, wqe_nop(0 - 8, QPN))  # the slot as a pass before left it
    ring_bf(n.doorbell_page, 1, QPN, wqe_write(0, QPN, 0x40, RKEY, 0, LKEY, 8), overwrite=False)
    (frame,) = n.poll()
    assert parse(frame).payload == b"bf bytes" and parse(frame).reth.va == 0x40
    assert n.stats()["bf_wqes"] == 1 and n.stats()["wqes"] == 1
    n.doorbell_page[0:8] = doorbell(1, QPN)  # submit_bf's ring after: nothing more to take
    assert n.poll() == [] and n.stats()["consumed"] == 1


def test_gpu_sm_bf_window_caught_before_the_doorbell_overwrites_it():
    """A BlueFlame write seen once is kept: the ring over the window's first 8 bytes that
    follows (submit_bf) loses nothing, even for a WQE behind others not yet taken."""
    n = nic(nic_handler="gpu_sm_bf")
    n.add_region(LKEY, 0, 64)
    post_writes(n, 0, 1)  # WQE 0 in the send ring only, not rung yet
    page = n.doorbell_page
    page[0:64] = wqe_write(1, QPN, 0x88, RKEY, 0, LKEY, 8)  # WQE 1 through the window
    n.poll()  # the window implies a ring up to 2: WQE 0 from the ring, 1 from the window
    page[0:8] = doorbell(2, QPN)
    assert n.stats()["consumed"] == 2 and n.stats()["bf_wqes"] == 1


def test_gpu_sm_bf_window_overwritten_reads_the_send_ring():
    """Where the doorbell landed over the window before the NIC looked, the WQE is read from
    the send ring (our serve kernel writes it there too)."""
    n = nic(nic_handler="gpu_sm_bf")
    n.add_region(LKEY, 0, 64)
    post_writes(n, 0, 1)
    ring_bf(n.doorbell_page, 1, QPN, wqe_write(0, QPN, 0x1000, RKEY, 0, LKEY, 8))
    (frame,) = n.poll()
    assert parse(frame).reth.va == 0x1000
    assert n.stats()["bf_wqes"] == 0 and n.stats()["wqes"] == 1


def test_unknown_nic_handler_is_named():
    with pytest.raises(ValueError, match="nic_handler 'blueflame': cpu_proxy, gpu_sm_db or"):
        nic(nic_handler="blueflame")


@pytest.mark.parametrize("handler", ["cpu_proxy", "gpu_sm_db", "gpu_sm_bf"])
def test_descriptor_names_the_handler_and_the_doorbell_page(tmp_path, handler):
    """The handler as the compiled header numbers it (BlueFlame is 3 in one release, 6 in
    another); sq_db at the doorbell page's start, the doorbell record 64 bytes on, the CQ's
    record 72 (mlx5_layout.h)."""
    constant = "DOCA_GPUNETIO_VERBS_NIC_HANDLER_" + handler.upper()
    out = read_descriptor(
        tmp_path,
        nic(nic_handler=handler),
        f"read_qp_{handler}",
        rf"""std::printf("%d %ld %ld\n", (int)(qp.nic_handler == {constant}),
              (long)(reinterpret_cast<const char*>(qp.sq_dbrec) - db),
              (long)(reinterpret_cast<const char*>(qp.cq_sq.dbrec) - db))""",
    )
    assert out == [1, 64, 72]
