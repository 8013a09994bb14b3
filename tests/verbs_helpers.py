"""Building mlx5 WQEs the way GPUNetIO's device API does, for the software ConnectX tests.

Two builders of the same bytes: ``wqe_*`` here, from the layout facts (docs/verbs_mode.md),
and ``header_wqes``, a C++ program compiled with GPUNetIO's own headers that fills their
structures (``doca_gpu_dev_verbs_wqe`` and the mlx5 segment types) as the device code does:
the oracle that our reading of the layout is theirs. The device leaves some bytes unwritten;
these builders fill them with 0xEE so that a NIC reading them would be caught.
"""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
from pathlib import Path

import pytest
from conftest import skip_missing

WRITE, WRITE_IMM, SEND, NOP, READ, FA = 0x08, 0x09, 0x0A, 0x00, 0x10, 0x12
CE_ALWAYS = 0x08
GARBAGE = 0xEE


def _ctrl(index: int, opcode: int, qpn: int, ds: int, imm: int | None = None) -> bytearray:
    w = bytearray([GARBAGE]) * 64
    struct.pack_into(">II", w, 0, (index & 0xFFFF) << 8 | opcode, qpn << 8 | ds)
    w[11] = CE_ALWAYS
    if imm is not None:
        struct.pack_into(">I", w, 12, imm)
    return w


def wqe_write(index, qpn, raddr, rkey, laddr, lkey, length, *, imm=None) -> bytes:
    # put passes an immediate of 0 even without one: the field is written either way.
    w = _ctrl(index, WRITE if imm is None else WRITE_IMM, qpn, 3, imm or 0)
    struct.pack_into(">QI", w, 16, raddr, rkey)
    struct.pack_into(">IIQ", w, 32, length & 0x7FFFFFFF, lkey, laddr)
    return bytes(w)


def wqe_write_inline(index, qpn, raddr, rkey, data: bytes) -> bytes:
    w = _ctrl(index, WRITE, qpn, 3 if len(data) <= 12 else 4)
    struct.pack_into(">QI", w, 16, raddr, rkey)
    struct.pack_into(">I", w, 32, len(data) | 0x80000000)
    w[36 : 36 + len(data)] = data
    return bytes(w)


def wqe_fetch_add(index, qpn, raddr, rkey, add, laddr, lkey) -> bytes:
    w = _ctrl(index, FA, qpn, 4)
    struct.pack_into(">QI", w, 16, raddr, rkey)
    struct.pack_into(">QQ", w, 32, add, add)  # the device writes the addend in both
    struct.pack_into(">IIQ", w, 48, 8, lkey, laddr)
    return bytes(w)


def wqe_nop(index, qpn) -> bytes:
    return bytes(_ctrl(index, NOP, qpn, 1))


# -- doorbells, as each NIC handler's device code rings them (docs/verbs_mode.md) -------------
DBR_OFFSET = 64  # the doorbell record's place in the software ConnectX's doorbell page


def doorbell(producer: int, qpn: int) -> bytes:
    """The 8 bytes GPUNetIO's prepare_db builds (a control segment's first 8 bytes with the
    producer index as its WQE index and no segments): the UAR word, and what submit_bf rings
    over the BlueFlame window after writing the WQE there."""
    return struct.pack(">II", (producer << 8) & 0xFFFFFFFF, qpn << 8)


def doorbell_record(producer: int) -> bytes:
    """The doorbell record (sq_dbrec): the producer index's low 16 bits, big-endian."""
    return struct.pack(">I", producer & 0xFFFF)


def ring_db(page, producer: int, qpn: int) -> None:
    """GPU_SM_DB as submit_db rings: the UAR word, the doorbell record, the UAR word again."""
    page[0:8] = doorbell(producer, qpn)
    page[DBR_OFFSET : DBR_OFFSET + 4] = doorbell_record(producer)
    page[0:8] = doorbell(producer, qpn)


def ring_bf(page, producer: int, qpn: int, wqe: bytes, *, overwrite: bool = True) -> None:
    """GPU_SM_BF as submit_bf rings: the WQE into the window, the doorbell record, then (unless
    ``overwrite`` is False: the NIC looked in between) the doorbell over the window's start."""
    page[0:64] = wqe
    page[DBR_OFFSET : DBR_OFFSET + 4] = doorbell_record(producer)
    if overwrite:
        page[0:8] = doorbell(producer, qpn)


_HEADER_DOORBELL_PROGRAM = r"""
#include <cstdio>
#include <cstring>
#include <endian.h>
#include "common/doca_gpunetio_verbs_dev.h"
// The doorbell as doca_gpu_dev_common_prepare_db fills GPUNetIO's control segment (QP number
// shifted, big-endian; the producer index where the WQE index goes), and the doorbell record
// as doca_gpu_dev_verbs_prepare_dbr computes it, for producer 0x12345 on QP 0x123.
int main() {
  const unsigned long long prod = 0x12345;
  doca_gpunetio_ib_mlx5_wqe_ctrl_seg c;
  std::memset(&c, 0, sizeof c);
  c.qpn_ds = htobe32(0x123u << 8);
  c.opmod_idx_opcode = htobe32(uint32_t(prod << DOCA_GPUNETIO_VERBS_WQE_IDX_SHIFT));
  const unsigned char* p = reinterpret_cast<const unsigned char*>(&c);
  for (int i = 0; i < 8; ++i) std::printf("%02x", p[i]);
  std::printf("\n");
  const uint32_t dbr = htobe32(uint32_t(prod & 0xffff));
  p = reinterpret_cast<const unsigned char*>(&dbr);
  for (int i = 0; i < 4; ++i) std::printf("%02x", p[i]);
  std::printf("\n");
}
"""


_HEADER_PROGRAM = r"""
#include <cstdio>
#include <cstring>
#include <endian.h>
#include "common/doca_gpunetio_verbs_dev.h"
// WQEs as doca_gpu_dev_verbs_put_signal writes them for one put and its signal
// (wqe_prepare_write, wqe_prepare_atomic), into the header's own structures.
static void dump(const doca_gpu_dev_verbs_wqe& w) {
  const unsigned char* p = reinterpret_cast<const unsigned char*>(&w);
  for (unsigned i = 0; i < sizeof w; ++i) std::printf("%02x", p[i]);
  std::printf("\n");
}
int main(int argc, char** argv) {
  unsigned qpn = 0x123, idx = 5;
  unsigned long long raddr = 0x1000, laddr = 0x2000, sig = 0x40, sig_l = 0;
  unsigned rkey = htobe32(0xabcdef), lkey = htobe32(0x112233), sig_key = htobe32(0x445566),
           sink_key = htobe32(0x778899);
  unsigned len = 32;
  doca_gpu_dev_verbs_wqe w;
  std::memset(&w, 0xEE, sizeof w);
  w.rw_cseg.opmod_idx_opcode = htobe32((idx << 8) | DOCA_GPUNETIO_IB_MLX5_OPCODE_RDMA_WRITE);
  w.rw_cseg.qpn_ds = htobe32((qpn << 8) | 3);
  w.rw_cseg.fm_ce_se = DOCA_GPUNETIO_IB_MLX5_WQE_CTRL_CQ_UPDATE;
  w.rw_cseg.imm = 0;
  w.rw_rseg.raddr = htobe64(raddr);
  w.rw_rseg.rkey = rkey;
  w.rw_dseg0.byte_count = htobe32(len & 0x7FFFFFFF);
  w.rw_dseg0.lkey = lkey;
  w.rw_dseg0.addr = htobe64(laddr);
  dump(w);
  std::memset(&w, 0xEE, sizeof w);
  w.at_cseg.opmod_idx_opcode = htobe32(((idx + 1) << 8) | DOCA_GPUNETIO_IB_MLX5_OPCODE_ATOMIC_FA);
  w.at_cseg.qpn_ds = htobe32((qpn << 8) | 4);
  w.at_cseg.fm_ce_se = DOCA_GPUNETIO_IB_MLX5_WQE_CTRL_CQ_UPDATE;
  w.at_rseg.raddr = htobe64(sig);
  w.at_rseg.rkey = sig_key;
  w.at_seg.swap_add = htobe64(1);
  w.at_seg.compare = htobe64(1);
  w.at_dseg.byte_count = htobe32(8);
  w.at_dseg.lkey = sink_key;
  w.at_dseg.addr = htobe64(sig_l);
  dump(w);
  (void)argc; (void)argv;
}
"""


def gpunetio_include() -> str:
    """GPUNetIO's headers (RT_GPUNETIO_INCLUDE), or skip."""
    include = os.environ.get("RT_GPUNETIO_INCLUDE")
    if not include or not Path(include, "doca_gpunetio_device.h").is_file():
        skip_missing("gpunetio", "RT_GPUNETIO_INCLUDE does not name GPUNetIO's headers")
    return include


def compile_with_headers(tmp_path: Path, source: str, name: str) -> Path:
    """``source`` compiled by the host C++ compiler with GPUNetIO's (common) headers."""
    include = gpunetio_include()
    compiler = shutil.which("g++") or shutil.which("c++")
    if compiler is None:
        pytest.skip("no host C++ compiler")
    src = tmp_path / f"{name}.cpp"
    src.write_text(source)
    exe = tmp_path / name
    subprocess.run(
        [compiler, "-std=c++17", "-I", include, str(src), "-o", str(exe)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    return exe


def run_with_headers(tmp_path: Path, source: str, name: str, *args: str) -> str:
    """The standard output of ``source`` compiled with GPUNetIO's headers and run."""
    exe = compile_with_headers(tmp_path, source, name)
    done = subprocess.run([str(exe), *args], capture_output=True, text=True, check=True, timeout=30)
    return done.stdout


def header_put_signal_wqes(tmp_path: Path) -> list[bytes]:
    """The two WQEs of put_signal (a 32-byte put at 0x1000, then +1 at 0x40), built by a
    program that fills GPUNetIO's header structures."""
    out = run_with_headers(tmp_path, _HEADER_PROGRAM, "put_signal_wqes")
    return [bytes.fromhex(line) for line in out.split()]


def header_doorbell(tmp_path: Path) -> tuple[bytes, bytes]:
    """(doorbell, doorbell record) for producer 0x12345 on QP 0x123, built through GPUNetIO's
    control-segment structure and constants."""
    out = run_with_headers(tmp_path, _HEADER_DOORBELL_PROGRAM, "doorbell")
    db, dbr = (bytes.fromhex(line) for line in out.split())
    return db, dbr


def gpu_verbs_or_skip(nic_handler: str = "cpu_proxy") -> None:
    """Skip, saying why, where Verbs mode cannot run on the GPU: no GPU, a build without
    GPUNetIO's device API, or BlueFlame with headers that cannot ring it."""
    from roce_transceiver import _core

    if not _core.cuda_runtime_info()["gpus"]:
        pytest.skip("no GPU visible")
    info = _core.gpunetio_info()
    if not info["built"]:
        skip_missing("gpunetio", f"no GPUNetIO device API in this build: {info['source']}")
    if nic_handler == "gpu_sm_bf" and not info["blueflame"]:
        pytest.skip(f"BlueFlame cannot ring with the device API this build has ({info['source']})")
