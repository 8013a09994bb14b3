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
    header_put_signal_wqes,
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


def test_descriptor_reads_back_through_the_headers_struct(tmp_path):
    """The descriptor is filled through GPUNetIO's own structure (its layout changes between
    releases); read back through the same header, the fields are what the device needs."""
    if not _descriptor_built():
        skip_missing("gpunetio", "this build has no GPUNetIO headers: no descriptor")
    n = nic(sq_wqe_num=64, cqe_num=128)
    blob = tmp_path / "qp.bin"
    blob.write_bytes(n.descriptor())
    out = run_with_headers(
        tmp_path,
        r"""
#include <cstdio>
#include "common/doca_gpunetio_verbs_dev.h"
int main(int, char** argv) {
  doca_gpu_dev_verbs_qp qp;
  FILE* f = std::fopen(argv[1], "rb");
  if (std::fread(&qp, sizeof qp, 1, f) != 1) return 1;
  std::printf("%u %u %u %u %u %d %u %u %u %d %d\n", qp.sq_num, qp.sq_num_shift8,
              __builtin_bswap32(qp.sq_num_shift8_be_3ds), qp.sq_wqe_num, qp.sq_wqe_mask,
              (int)qp.nic_handler, qp.cq_sq.cqe_num, qp.cq_sq.cqe_mask, qp.cq_sq.cqe_size,
              (int)(qp.sq_db == (uint64_t*)qp.cq_sq.dbrec), (int)(qp.sq_wqe_daddr != 0));
}
""",
        "read_qp",
        str(blob),
    ).split()
    assert list(map(int, out)) == [QPN, QPN << 8, QPN << 8 | 3, 64, 63, 1, 128, 127, 64, 1, 1]


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
