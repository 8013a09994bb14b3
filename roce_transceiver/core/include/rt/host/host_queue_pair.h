// Verbs mode on the CPU executor: the queue pair serve_loop drives, written by the host the
// way GPUNetIO's device API writes it on the GPU (docs/verbs_mode.md has the contract). A
// put_signal is two WQEs, an RDMA WRITE and a FETCH_ADD, both asking for a completion; the
// doorbell word takes the new producer index; the ticket is the FETCH_ADD's WQE index, whose
// completion (in order, one per WQE) says that both are done.
#pragma once

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <thread>

#include "rt/host/verbs_port.h"
#include "rt/verbs/mlx5_layout.h"
#include "rt/verbs/serve_loop.h"

namespace rt::host {

class HostQueuePair {
 public:
  explicit HostQueuePair(VerbsPort& port)
      : port_(port),
        sq_(port.send_ring()),
        cq_(port.completion_ring()),
        sq_num_(port.config().nic.sq_wqe_num),
        cq_num_(port.config().nic.cqe_num),
        qpn_(port.config().nic.qpn) {}

  uint64_t put_signal(const verbs::PutSignal& p) {
    using namespace verbs;
    uint8_t* w = wqe(next_, kOpWrite, 3);
    store_be64(w + 16 + kRaddrAddr, p.raddr);
    store_be32(w + 16 + kRaddrKey, p.rkey);
    store_be32(w + 32 + kDataBytes, p.bytes & kDataByteMask);
    store_be32(w + 32 + kDataKey, p.lkey);
    store_be64(w + 32 + kDataAddr, p.laddr);
    uint8_t* a = wqe(next_ + 1, kOpAtomicFa, 4);
    store_be64(a + 16 + kRaddrAddr, p.signal_raddr);
    store_be32(a + 16 + kRaddrKey, p.signal_rkey);
    store_be64(a + 32 + kAtomicSwapAdd, 1);
    store_be64(a + 32 + kAtomicCompare, 1);
    store_be32(a + 48 + kDataBytes, 8);
    store_be32(a + 48 + kDataKey, p.lkey);
    store_be64(a + 48 + kDataAddr, p.sink_laddr);
    next_ += 2;
    port_.ring(next_);  // a release store: the WQEs are written before the NIC sees them
    return next_ - 1;
  }

  // Spins a while, then lets other threads run: on a machine with fewer cores than spinning
  // threads (engine, NIC, peer, this loop) a pure spin starves the thread it waits for.
  void idle() {
    if (++idle_turns_ % 1024 == 0)
      std::this_thread::yield();
    else
      spin_pause();
  }

  int poll(uint64_t ticket) const {
    using namespace verbs;
    const uint8_t* c = cq_ + size_t(ticket % cq_num_) * kCqeBytes;
    const uint8_t op_own = __atomic_load_n(c + kCqeOpOwn, __ATOMIC_ACQUIRE);
    const uint8_t opcode = op_own >> 4;
    if (opcode == kCqeInvalid || (op_own & 1) != ((ticket / cq_num_) & 1)) return EBUSY;
    if (opcode == kCqeRequesterError) return c[kCqeSyndrome] ? c[kCqeSyndrome] : EIO;
    return 0;
  }

 private:
  uint8_t* wqe(uint64_t index, uint8_t opcode, uint32_t ds) {
    using namespace verbs;
    uint8_t* w = sq_ + size_t(index % sq_num_) * kWqeBytes;
    std::memset(w, 0, kWqeBytes);
    store_be32(w + kCtrlOpmodIdxOpcode, uint32_t(index & 0xFFFF) << 8 | opcode);
    store_be32(w + kCtrlQpnDs, qpn_ << 8 | ds);
    w[kCtrlFmCeSe] = kCeAlways;
    return w;
  }

  VerbsPort& port_;
  uint8_t* sq_;
  const uint8_t* cq_;
  uint32_t sq_num_, cq_num_, qpn_;
  uint64_t next_ = 0;
  uint32_t idle_turns_ = 0;
};

}  // namespace rt::host
