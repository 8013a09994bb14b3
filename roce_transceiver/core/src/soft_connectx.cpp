// The software ConnectX (rt/verbs/soft_connectx.h): WQEs in, RC packets out, CQEs back.
#include "rt/verbs/soft_connectx.h"

#include <cstring>
#include <stdexcept>

#include "rt/protocol/aeth.h"
#include "rt/protocol/atomic_eth.h"
#include "rt/protocol/decode.h"
#include "rt/protocol/psn.h"
#include "rt/verbs/descriptor.h"

namespace rt::verbs {
namespace {

constexpr uint8_t kRcAck = 0x11, kRcAtomicAck = 0x12, kRcCompareSwap = 0x13, kRcFetchAdd = 0x14;

bool power_of_two(uint32_t v) { return v && (v & (v - 1)) == 0; }

// RC opcodes of a message's packets: first, middle, last, only (and with an immediate).
struct Opcodes {
  uint8_t first, middle, last, only, last_imm, only_imm;
};
constexpr Opcodes kWriteOps{0x06, 0x07, 0x08, 0x0a, 0x09, 0x0b};
constexpr Opcodes kSendOps{0x00, 0x01, 0x02, 0x04, 0x03, 0x05};

uint8_t syndrome_of_nak(uint8_t aeth) {
  switch (aeth) {
    case kAethNakInvalidRequest: return kSynRemoteInvalidRequest;
    case kAethNakRemoteAccessError: return kSynRemoteAccess;
    default: return kSynRemoteOperation;
  }
}

}  // namespace

SoftConnectX::SoftConnectX(const SoftConnectXConfig& cfg, const SoftConnectXMemory& mem)
    : cfg_(cfg), mem_(mem), next_psn_(cfg.sq_psn & kPsnMask) {
  if (!power_of_two(cfg.sq_wqe_num) || cfg.sq_wqe_num > 32768)
    throw std::invalid_argument("sq_wqe_num must be a power of two up to 32768");
  if (!power_of_two(cfg.cqe_num) || cfg.cqe_num < cfg.sq_wqe_num)
    throw std::invalid_argument("cqe_num must be a power of two, at least sq_wqe_num");
  if (cfg.mtu < 64 || cfg.mtu > 4096) throw std::invalid_argument("mtu must be 64..4096 bytes");
  if (!mem.sq || !mem.cq || !mem.doorbell)
    throw std::invalid_argument("the send ring, the completion ring and the doorbell are needed");
  // Each slot first holds a WQE "of the pass before the first": its index field cannot
  // match what the doorbell covers on pass 0, so bytes the device has not written yet are
  // never taken for a WQE (later passes hold the previous pass's, which do not match either).
  for (uint32_t k = 0; k < cfg.sq_wqe_num; ++k) {
    uint8_t* slot = mem.sq + size_t(k) * kWqeBytes;
    std::memset(slot, 0, kWqeBytes);
    store_be32(slot + kCtrlOpmodIdxOpcode, uint32_t(uint16_t(k - cfg.sq_wqe_num)) << 8);
  }
  // The device takes a CQE whose owner bit matches the pass as done; before the first
  // write every entry must read "not yet" (owner 1 on pass 0), opcode invalid.
  for (uint32_t i = 0; i < cfg.cqe_num; ++i) {
    std::memset(mem.cq + size_t(i) * kCqeBytes, 0, kCqeBytes);
    mem.cq[size_t(i) * kCqeBytes + kCqeOpOwn] = uint8_t(kCqeInvalid << 4 | 1);
  }
}

void SoftConnectX::add_region(uint32_t key, uint8_t* base, uint64_t iova, uint64_t length) {
  regions_[key] = Region{base, iova, length};
}

uint8_t* SoftConnectX::resolve(uint32_t key, uint64_t addr, uint64_t len) {
  const auto it = regions_.find(key);
  if (it == regions_.end()) return nullptr;
  const Region& r = it->second;
  if (addr < r.iova || addr - r.iova > r.length || len > r.length - (addr - r.iova)) return nullptr;
  return r.base + (addr - r.iova);
}

void SoftConnectX::fill_descriptor(uint8_t* out, size_t out_bytes) const {
  DescriptorParams p;
  p.qpn = cfg_.qpn;
  p.sq_wqe_num = cfg_.sq_wqe_num;
  p.cqe_num = cfg_.cqe_num;
  p.sq_device = mem_.sq_device;
  p.cq_device = mem_.cq_device;
  p.doorbell_device = mem_.doorbell_device;
  verbs::fill_descriptor(p, out, out_bytes);
}

size_t SoftConnectX::poll(const Emit& emit, uint64_t now_ns) {
  const uint64_t produced = __atomic_load_n(mem_.doorbell, __ATOMIC_ACQUIRE);
  size_t read = 0;
  while (consumed_ < produced) {
    uint8_t bb[kWqeBytes];
    std::memcpy(bb, mem_.sq + (consumed_ & (cfg_.sq_wqe_num - 1)) * kWqeBytes, kWqeBytes);
    // The device publishes with a GPU-scope release only: a WQE the doorbell covers may
    // still read stale here; its index field says so, and the next poll reads it again.
    if (load_be16(bb + 1) != uint16_t(consumed_)) {
      ++stats_.stale_waits;
      break;
    }
    InFlight w;
    w.index = consumed_++;
    ++stats_.wqes;
    ++read;
    const WqeStatus status = decode_wqe(bb, w.wr);
    if (error_) {
      fail(w, kSynFlushed, "");
    } else if (status != WqeStatus::kOk) {
      fail(w, kSynLocalQpOperation,
           "WQE " + std::to_string(w.index) + " (opcode " + std::to_string(w.wr.opcode) +
               "): " + to_string(status));
    } else {
      start(w, emit, now_ns);
    }
    inflight_.push_back(std::move(w));
  }
  // Go-back-N on a timeout: everything not acknowledged goes again, oldest first.
  for (InFlight& w : inflight_) {
    if (w.done || !w.remote) continue;
    if (now_ns - w.sent_ns < cfg_.retransmit_ns) break;
    if (w.tries > cfg_.retries) {
      fail(w, kSynRetryExceeded,
           "WQE " + std::to_string(w.index) + ": no acknowledgement after " +
               std::to_string(w.tries) + " tries");
      break;
    }
    for (InFlight& again : inflight_)
      if (!again.done && again.remote) {
        ++stats_.retransmits;
        send(again, emit, now_ns);
      }
    break;
  }
  drain();
  return read;
}

void SoftConnectX::start(InFlight& w, const Emit& emit, uint64_t now_ns) {
  WorkRequest& wr = w.wr;
  switch (wr.opcode) {
    case kOpNop:
    case kOpWait:  // one QP: in-order completion already waits for what came before
    case kOpDump: w.done = true; return;
    case kOpRead:
      fail(w, kSynLocalQpOperation, "RDMA READ is not supported by the software ConnectX");
      return;
    case kOpAtomicFa:
    case kOpAtomicCs: {
      if (wr.data_count != 1 || !resolve(wr.data[0].lkey, wr.data[0].addr, 8)) {
        fail(w, kSynLocalProtection,
             "WQE " + std::to_string(w.index) + ": the atomic's result buffer is not a region");
        return;
      }
      FrameSpec s = cfg_.addressing;
      s.opcode = wr.opcode == kOpAtomicFa ? kRcFetchAdd : kRcCompareSwap;
      s.dest_qp = cfg_.peer_qpn;
      s.psn = next_psn_;
      s.ack_req = true;
      s.va = wr.raddr;
      s.rkey = wr.rkey;
      s.swap_add = wr.swap_add;
      s.compare = wr.opcode == kOpAtomicFa ? 0 : wr.compare;
      std::vector<uint8_t> frame(encoded_size(s, 0));
      encode(s, ByteSpan{}, MutByteSpan{frame.data(), frame.size()});
      w.frames.push_back(std::move(frame));
      w.first_psn = w.last_psn = next_psn_;
      next_psn_ = psn_add(next_psn_, 1);
      w.byte_cnt = 8;
      break;
    }
    default: {  // WRITE, WRITE with immediate, SEND, SEND with immediate
      std::vector<uint8_t> data;
      if (wr.inline_bytes) {
        data.assign(wr.inline_data, wr.inline_data + wr.inline_bytes);
      } else {
        for (uint8_t i = 0; i < wr.data_count; ++i) {
          const DataSegment& d = wr.data[i];
          const uint8_t* src = resolve(d.lkey, d.addr, d.bytes);
          if (!src) {
            fail(w, kSynLocalProtection,
                 "WQE " + std::to_string(w.index) + ": local key " + std::to_string(d.lkey) +
                     " does not cover " + std::to_string(d.bytes) + " bytes at " +
                     std::to_string(d.addr));
            return;
          }
          data.insert(data.end(), src, src + d.bytes);
        }
      }
      w.byte_cnt = uint32_t(data.size());
      packetize(w, data.data(), uint32_t(data.size()));
    }
  }
  w.remote = true;
  send(w, emit, now_ns);
}

void SoftConnectX::packetize(InFlight& w, const uint8_t* data, uint32_t len) {
  const WorkRequest& wr = w.wr;
  const bool write = wr.opcode == kOpWrite || wr.opcode == kOpWriteImm;
  const bool imm = wr.opcode == kOpWriteImm || wr.opcode == kOpSendImm;
  const Opcodes& ops = write ? kWriteOps : kSendOps;
  const uint32_t count = len ? (len + cfg_.mtu - 1) / cfg_.mtu : 1;
  w.first_psn = next_psn_;
  for (uint32_t i = 0; i < count; ++i) {
    const bool first = i == 0, last = i + 1 == count;
    FrameSpec s = cfg_.addressing;
    s.opcode = first && last ? (imm ? ops.only_imm : ops.only)
               : first       ? ops.first
               : last        ? (imm ? ops.last_imm : ops.last)
                             : ops.middle;
    s.dest_qp = cfg_.peer_qpn;
    s.psn = next_psn_;
    s.ack_req = last;
    if (write && first) {
      s.va = wr.raddr;
      s.rkey = wr.rkey;
      s.dma_len = len;
    }
    if (imm && last) s.imm = wr.imm;
    const uint32_t chunk = last ? len - i * cfg_.mtu : cfg_.mtu;
    const ByteSpan payload{data + size_t(i) * cfg_.mtu, chunk};
    std::vector<uint8_t> frame(encoded_size(s, chunk));
    encode(s, payload, MutByteSpan{frame.data(), frame.size()});
    w.frames.push_back(std::move(frame));
    w.last_psn = next_psn_;
    next_psn_ = psn_add(next_psn_, 1);
  }
}

void SoftConnectX::send(InFlight& w, const Emit& emit, uint64_t now_ns) {
  for (const std::vector<uint8_t>& f : w.frames) emit(f.data(), f.size());
  stats_.packets += w.frames.size();
  w.sent_ns = now_ns;
  ++w.tries;
}

void SoftConnectX::fail(InFlight& w, uint8_t syndrome, const std::string& why) {
  w.done = true;
  w.syndrome = syndrome;
  if (!why.empty()) last_error_ = why;
  if (error_) return;
  // An error moves the QP to the error state: what is still queued is flushed.
  error_ = true;
  for (InFlight& later : inflight_)
    if (!later.done) {
      later.done = true;
      later.syndrome = kSynFlushed;
    }
}

bool SoftConnectX::on_frame(const uint8_t* frame, size_t len, const Emit& emit, uint64_t now_ns) {
  const DecodeResult r = decode(ByteSpan{frame, len});
  if (!r.ok() || !icrc_ok(r.frame) || r.frame.bth_hdr().dest_qp.get() != cfg_.qpn) {
    ++stats_.ignored;
    return false;
  }
  const FrameView& f = r.frame;
  const uint8_t opcode = f.bth_hdr().opcode;
  if (opcode != kRcAck && opcode != kRcAtomicAck) {
    ++stats_.ignored;
    return false;
  }
  const uint32_t psn = f.bth_hdr().psn.get();
  const uint8_t aeth = f.ext_hdr<Aeth>(kAeth).syndrome();
  if ((aeth & 0x60) == 0x60) {  // NAK
    ++stats_.naks;
    if (aeth == kAethNakPsnSeqError) {  // the peer missed `psn`: send again from there
      for (InFlight& w : inflight_)
        if (!w.done && w.remote && psn_diff(w.last_psn, psn) >= 0) {
          ++stats_.retransmits;
          send(w, emit, now_ns);
        }
    } else {
      for (InFlight& w : inflight_)
        if (!w.done && w.remote && psn_diff(psn, w.first_psn) >= 0 &&
            psn_diff(w.last_psn, psn) >= 0)
          fail(w, syndrome_of_nak(aeth),
               "WQE " + std::to_string(w.index) + ": the peer answered NAK " +
                   std::to_string(aeth) + " at PSN " + std::to_string(psn));
    }
    drain();
    return true;
  }
  if ((aeth & 0x60) == 0x20) return true;  // RNR NAK: the timer sends again
  ++stats_.acks;
  if (opcode == kRcAtomicAck) {
    const uint64_t orig = f.ext_hdr<AtomicAckEth>(kAtomicAckEth).orig.get();
    for (InFlight& w : inflight_)
      if (!w.done && w.remote && w.first_psn == psn &&
          (w.wr.opcode == kOpAtomicFa || w.wr.opcode == kOpAtomicCs)) {
        // The old value lands in native byte order, as the device reads 8-byte results.
        std::memcpy(resolve(w.wr.data[0].lkey, w.wr.data[0].addr, 8), &orig, 8);
        w.done = true;
      }
  }
  complete_through(psn);
  drain();
  return true;
}

void SoftConnectX::complete_through(uint32_t psn) {
  for (InFlight& w : inflight_) {
    if (w.done || !w.remote) continue;
    if (psn_diff(psn, w.last_psn) < 0) break;  // in order: nothing later is covered
    w.done = true;
  }
}

void SoftConnectX::drain() {
  while (!inflight_.empty() && inflight_.front().done) {
    const InFlight& w = inflight_.front();
    if (w.wr.signalled() || w.syndrome) write_cqe(w);
    ++completed_;
    inflight_.pop_front();
  }
}

void SoftConnectX::write_cqe(const InFlight& w) {
  uint8_t* cqe = mem_.cq + (w.index & (cfg_.cqe_num - 1)) * kCqeBytes;
  std::memset(cqe, 0, kCqeBytes - 1);
  store_be32(cqe + kCqeByteCnt, w.syndrome ? 0 : w.byte_cnt);
  if (w.syndrome) cqe[kCqeSyndrome] = w.syndrome;
  store_be32(cqe + kCqeSopDropQpn, uint32_t(w.wr.opcode) << 24 | cfg_.qpn);
  store_be16(cqe + kCqeWqeCounter, uint16_t(w.index));
  const uint8_t opcode = w.syndrome ? kCqeRequesterError : kCqeRequester;
  const uint8_t owner = uint8_t((w.index / cfg_.cqe_num) & 1);
  // The device tests the owner byte alone: the body must be visible before it.
  __atomic_store_n(cqe + kCqeOpOwn, uint8_t(opcode << 4 | owner), __ATOMIC_RELEASE);
  ++stats_.completions;
  if (w.syndrome) ++stats_.errors;
}

}  // namespace rt::verbs
