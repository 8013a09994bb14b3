// Verbs mode on the CPU executor: the queue pair serve_loop drives, written by the host the
// way GPUNetIO's device API writes it on the GPU (docs/verbs_mode.md has the contract). A
// put_signal is two WQEs, an RDMA WRITE and a FETCH_ADD, both asking for a completion; the
// doorbell is rung as the port's NIC handler rings it (the CPU proxy's count; GPU_SM_DB's UAR
// word, record, UAR word again; GPU_SM_BF's window, record, doorbell over the window); the
// ticket is the FETCH_ADD's WQE index, whose completion (in order, one per WQE) says that both
// are done.
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
      : sq_(port.send_ring()),
        cq_(port.completion_ring()),
        page_(port.doorbell_page()),
        sq_num_(port.config().nic.sq_wqe_num),
        cq_num_(port.config().nic.cqe_num),
        qpn_(port.config().nic.qpn),
        handler_(port.config().nic.handler) {}

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
    ring(next_, a);  // release stores: the WQEs are written before the NIC sees them
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

  void ring(uint64_t producer, const uint8_t* last_wqe) {
    using namespace verbs;
    uint64_t* word = reinterpret_cast<uint64_t*>(page_);
    if (handler_ == NicHandler::kCpuProxy) {
      __atomic_store_n(word, producer, __ATOMIC_RELEASE);
      return;
    }
    // The first 8 bytes of a control segment with the producer index and no segments, as
    // doca_gpu_dev_common_prepare_db builds it; the record: the index's low 16 bits, big-endian.
    uint8_t db[kDoorbellBytes];
    store_be32(db, uint32_t(producer << 8));
    store_be32(db + 4, qpn_ << 8);
    uint64_t db_word;
    std::memcpy(&db_word, db, sizeof db_word);
    uint8_t rec[4];
    store_be32(rec, uint32_t(producer & 0xFFFF));
    uint32_t rec_word;
    std::memcpy(&rec_word, rec, sizeof rec_word);
    uint32_t* dbr = reinterpret_cast<uint32_t*>(page_ + kSqDbrOffset);
    if (handler_ == NicHandler::kGpuSmBf) {  // submit_bf: the WQE into the window first
      uint64_t bf[kBlueFlameBytes / 8];
      std::memcpy(bf, last_wqe, sizeof bf);
      __atomic_thread_fence(__ATOMIC_RELEASE);
      for (uint32_t i = 0; i < kBlueFlameBytes / 8; ++i)
        __atomic_store_n(word + i, bf[i], __ATOMIC_RELAXED);
    } else {  // submit_db: the UAR rung early, then the record
      __atomic_store_n(word, db_word, __ATOMIC_RELEASE);
    }
    __atomic_store_n(dbr, rec_word, __ATOMIC_RELEASE);
    __atomic_store_n(word, db_word, __ATOMIC_RELEASE);
  }

  uint8_t* sq_;
  const uint8_t* cq_;
  uint8_t* page_;
  uint32_t sq_num_, cq_num_, qpn_;
  verbs::NicHandler handler_;
  uint64_t next_ = 0;
  uint32_t idle_turns_ = 0;
};

}  // namespace rt::host
