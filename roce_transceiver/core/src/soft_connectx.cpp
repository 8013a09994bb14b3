// The software ConnectX (rt/verbs/soft_connectx.h): WQEs in, RC packets out, CQEs back.
#include "rt/verbs/soft_connectx.h"

#include <cstring>
#include <stdexcept>

#include "rt/platform.h"
#include "rt/protocol/decode.h"
#include "rt/protocol/psn.h"
#include "rt/protocol/rc_responder.h"
#include "rt/verbs/descriptor.h"

namespace rt::verbs {
namespace {

constexpr uint8_t kRcCompareSwap = make_opcode(Transport::RC, kOperationCompareSwap);
constexpr uint8_t kRcFetchAdd = make_opcode(Transport::RC, kOperationFetchAdd);
constexpr uint64_t kNothingCaught = ~uint64_t(0);

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

// 64 bytes the device may be writing while we read: 8-byte loads (each whole), twice; equal
// reads are one write's bytes, not a torn mix of two (each write changes the index field).
bool read_window(const uint8_t* window, uint8_t* out) {
  const auto* w = reinterpret_cast<const uint64_t*>(window);
  uint64_t a[kBlueFlameBytes / 8], b[kBlueFlameBytes / 8];
  for (uint32_t i = 0; i < kBlueFlameBytes / 8; ++i) a[i] = load_relaxed<Scope::kSystem>(w + i);
  fence_acquire<Scope::kSystem>();
  for (uint32_t i = 0; i < kBlueFlameBytes / 8; ++i) b[i] = load_relaxed<Scope::kSystem>(w + i);
  if (std::memcmp(a, b, sizeof a) != 0) return false;
  std::memcpy(out, a, sizeof a);
  return true;
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
    throw std::invalid_argument(
        "the send ring, the completion ring and the doorbell page are needed");
  if (reinterpret_cast<uintptr_t>(mem.doorbell) % kBlueFlameBytes)
    throw std::invalid_argument("the doorbell page must be 64-byte aligned (the BlueFlame window)");
  if (cfg.handler != NicHandler::kCpuProxy && cfg.handler != NicHandler::kGpuSmDb &&
      cfg.handler != NicHandler::kGpuSmBf)
    throw std::invalid_argument("nic handler " + std::to_string(int(cfg.handler)) +
                                ": the software ConnectX serves CPU proxy (1), GPU_SM_DB (2) "
                                "and GPU_SM_BF (6)");
  expected_psn_ = cfg.rq_psn & kPsnMask;
  if (cfg.handler == NicHandler::kGpuSmBf) {
    bf_caught_.assign(size_t(cfg.sq_wqe_num) * kWqeBytes, 0);
    bf_index_.assign(cfg.sq_wqe_num, kNothingCaught);
  }
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

void SoftConnectX::add_remote_region(uint32_t rkey, uint8_t* base, uint64_t va, uint32_t length) {
  if (num_remote_ == kMaxRemoteRegions)
    throw std::invalid_argument("remote regions: at most " + std::to_string(kMaxRemoteRegions));
  if (length == 0) throw std::invalid_argument("remote region " + std::to_string(rkey) + ": empty");
  for (uint32_t i = 0; i < num_remote_; ++i)
    if (remote_[i].rkey == rkey)
      throw std::invalid_argument("remote region rkey " + std::to_string(rkey) + ": already used");
  remote_[num_remote_++] = MemRegion{va, rkey, length, base};
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
  p.handler = cfg_.handler;
  verbs::fill_descriptor(p, out, out_bytes);
}

// How far the device has rung. CPU proxy: the count it stores. GPU_SM_DB and _BF: the 16-bit
// producer index of the doorbell record and of the doorbell word (submit_db rings the UAR, writes
// the record, rings again; submit_bf writes the WQE into the window, the record, then rings over
// the window's first 8 bytes), whichever is further: the device never runs more than the ring
// ahead of what was consumed, so each extends to 64 bits unambiguously; a WQE in the window is
// rung too (its index + 1).
uint64_t SoftConnectX::produced() {
  if (cfg_.handler == NicHandler::kCpuProxy) {
    const uint64_t n = load_relaxed<Scope::kSystem>(reinterpret_cast<uint64_t*>(mem_.doorbell));
    fence_acquire<Scope::kSystem>();
    return n;
  }
  const auto reach = [&](uint32_t pi16) {
    const uint32_t ahead = uint16_t(pi16 - uint16_t(consumed_));
    return ahead <= cfg_.sq_wqe_num ? consumed_ + ahead : consumed_;
  };
  const uint32_t dbr =
      load_acquire<Scope::kSystem>(reinterpret_cast<uint32_t*>(mem_.doorbell + kSqDbrOffset));
  uint8_t be[4];
  std::memcpy(be, &dbr, 4);
  uint64_t produced = reach(load_be32(be) & 0xFFFF);
  uint8_t db[kDoorbellBytes];
  const uint64_t word = load_relaxed<Scope::kSystem>(reinterpret_cast<uint64_t*>(mem_.doorbell));
  fence_acquire<Scope::kSystem>();
  std::memcpy(db, &word, kDoorbellBytes);
  if (word != last_ring_ && word != 0 && (load_be32(db + 4) >> 8) != cfg_.qpn)
    ++stats_.foreign_rings;  // a UAR names its QP; another's doorbell is not ours to follow
  last_ring_ = word;
  if (word != 0 && (load_be32(db + 4) >> 8) == cfg_.qpn) {
    const uint64_t rung = reach(load_be16(db + 1) + (doorbell_ds(db) ? 1 : 0));
    if (rung > produced) produced = rung;
  }
  return produced;
}

// BlueFlame: a WQE written into the window is kept by its index before the doorbell that
// submit_bf rings over the window's first 8 bytes can replace it (a ConnectX takes each write
// to its BlueFlame register as a transaction; in memory only the last bytes stay).
void SoftConnectX::catch_blueflame() {
  uint8_t bb[kWqeBytes];
  if (!read_window(mem_.doorbell, bb) || doorbell_ds(bb) == 0) return;  // torn, or a doorbell
  if ((load_be32(bb + kCtrlQpnDs) >> 8) != cfg_.qpn) return;
  const uint32_t ahead = uint16_t(load_be16(bb + 1) - uint16_t(consumed_));
  if (ahead >= cfg_.sq_wqe_num) return;  // consumed already
  const uint64_t index = consumed_ + ahead;
  const uint32_t slot = uint32_t(index & (cfg_.sq_wqe_num - 1));
  if (bf_index_[slot] == index) return;
  std::memcpy(bf_caught_.data() + size_t(slot) * kWqeBytes, bb, kWqeBytes);
  bf_index_[slot] = index;
}

// WQE `index` into `bb`: from the BlueFlame window where it was caught there, else from the send
// ring. The device publishes with a GPU-scope release only, so a WQE the doorbell covers may
// still read stale in the ring: its index field says so (false), and the next poll reads again.
bool SoftConnectX::fetch_wqe(uint64_t index, uint8_t* bb) {
  const uint32_t slot = uint32_t(index & (cfg_.sq_wqe_num - 1));
  if (cfg_.handler == NicHandler::kGpuSmBf) {
    catch_blueflame();
    if (bf_index_[slot] == index) {
      std::memcpy(bb, bf_caught_.data() + size_t(slot) * kWqeBytes, kWqeBytes);
      bf_index_[slot] = kNothingCaught;
      ++stats_.bf_wqes;
      return true;
    }
  }
  std::memcpy(bb, mem_.sq + size_t(slot) * kWqeBytes, kWqeBytes);
  return load_be16(bb + 1) == uint16_t(index);
}

size_t SoftConnectX::poll(const Emit& emit, uint64_t now_ns) {
  if (cfg_.handler == NicHandler::kGpuSmBf) catch_blueflame();
  const uint64_t produced = this->produced();
  size_t read = 0;
  while (consumed_ < produced) {
    uint8_t bb[kWqeBytes];
    if (!fetch_wqe(consumed_, bb)) {
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
  if (!r.ok() || !icrc_ok(r.frame) || r.frame.bth_hdr().dest_qp.get() != cfg_.qpn ||
      r.frame.op.transport != Transport::RC) {
    ++stats_.ignored;
    return false;
  }
  if (r.frame.op.is(kResponse)) {
    take_response(r.frame, emit, now_ns);
  } else {
    respond(r.frame, emit);
  }
  return true;
}

// The requester half: the peer's answers to our WQEs' packets.
void SoftConnectX::take_response(const FrameView& f, const Emit& emit, uint64_t now_ns) {
  if (!f.op.has(kAeth)) {  // a READ response: we send no READ
    ++stats_.ignored;
    return;
  }
  const uint32_t psn = f.bth_hdr().psn.get();
  const uint8_t aeth = f.ext_hdr<Aeth>(kAeth).syndrome();
  const AethKind kind = aeth_kind(aeth);  // rc_requester.h: the rules the engine's follow too
  if (kind == AethKind::kNak) {
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
    return;
  }
  if (kind != AethKind::kAck) return;  // RNR NAK (or reserved): the timer sends again
  ++stats_.acks;
  if (f.op.has(kAtomicAckEth)) {
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
}

// The responder half (IBA 9.7.5), on rt/protocol/rc_responder.h's verdicts: a request executes
// only at the PSN expected and in message order; WRITEs land where an rkey's region holds them,
// atomics on an aligned word of one; every answer comes back at the request's PSN.
void SoftConnectX::respond(const FrameView& f, const Emit& emit) {
  const uint32_t psn = f.bth_hdr().psn.get();
  if (f.op.is(kAtomic)) {
    if (atomic_is_replay(atomic_, psn, expected_psn_)) {  // its answer was lost: the same again
      ++stats_.duplicates;
      answer(atomic_ack_spec(cfg_.addressing, cfg_.peer_qpn, atomic_.psn, msn_, atomic_.orig), emit,
             false);
      return;
    }
    if (!accept_psn(psn, emit)) return;
    if (in_message_ != 0) {  // an atomic inside a message in progress: out of sequence
      ++stats_.sequence_errors;
      in_message_ = 0;
      answer(aeth_spec(cfg_.addressing, cfg_.peer_qpn, kAethNakInvalidRequest, psn, msn_), emit,
             true);
      return;
    }
    const AtomicOutcome a = atomic_execute(remote_, num_remote_, f);
    if (a.status != AtomicStatus::kDone) {
      ++stats_.out_of_range;
      answer(aeth_spec(cfg_.addressing, cfg_.peer_qpn, atomic_nak(a.status), psn, msn_), emit,
             true);
      return;
    }
    ++stats_.atomics;
    ++stats_.requests;
    atomic_ = AtomicReplay{psn, a.orig, true};
    expected_psn_ = psn_add(psn, 1);
    msn_ = psn_add(msn_, 1);
    answer(atomic_ack_spec(cfg_.addressing, cfg_.peer_qpn, psn, msn_, a.orig), emit, false);
    return;
  }
  if (!f.op.is(kWrite)) {  // SEND: no receive queue here; READ: not served
    ++stats_.unsupported;
    answer(aeth_spec(cfg_.addressing, cfg_.peer_qpn, kAethNakInvalidRequest, psn, msn_), emit,
           true);
    return;
  }
  if (!accept_psn(psn, emit)) return;
  if (!sequence_ok(in_message_, f.op)) {
    ++stats_.sequence_errors;
    in_message_ = 0;
    answer(aeth_spec(cfg_.addressing, cfg_.peer_qpn, kAethNakInvalidRequest, psn, msn_), emit,
           true);
    return;
  }
  if (!write_accept(write_, remote_, num_remote_, f)) {
    ++stats_.out_of_range;
    in_message_ = 0;
    answer(aeth_spec(cfg_.addressing, cfg_.peer_qpn, kAethNakRemoteAccessError, psn, msn_), emit,
           true);
    return;
  }
  std::memcpy(write_destination(write_, remote_), f.base + f.payload, f.payload_len);
  write_advance(write_, f.payload_len);
  stats_.bytes_placed += f.payload_len;
  ++stats_.requests;
  in_message_ = f.op.is(kLast) ? 0 : kWrite;
  if (f.op.is(kLast) && f.op.has(kImmDt)) {
    // No receive queue to complete it on: counted, its immediate kept.
    ++stats_.write_imms;
    stats_.last_imm = f.ext_hdr<ImmDt>(kImmDt).imm.get();
  }
  expected_psn_ = psn_add(psn, 1);
  if (f.op.is(kLast)) msn_ = psn_add(msn_, 1);
  if (f.bth_hdr().ack_requested())
    answer(aeth_spec(cfg_.addressing, cfg_.peer_qpn, kAethAck, psn, msn_), emit, false);
}

// The PSN verdict acted on: the expected one goes on; a duplicate is acknowledged again and not
// executed; one ahead is NAKed once (PSN sequence error at the one expected), then waited out.
bool SoftConnectX::accept_psn(uint32_t psn, const Emit& emit) {
  switch (rc_psn_verdict(psn, expected_psn_)) {
    case PsnVerdict::kExpected: nak_sent_ = false; return true;
    case PsnVerdict::kDuplicate:
      ++stats_.duplicates;
      answer(aeth_spec(cfg_.addressing, cfg_.peer_qpn, kAethAck, psn, msn_), emit, false);
      return false;
    case PsnVerdict::kAhead:
      ++stats_.psn_gaps;
      if (!nak_sent_) {
        nak_sent_ = true;
        answer(aeth_spec(cfg_.addressing, cfg_.peer_qpn, kAethNakPsnSeqError, expected_psn_, msn_),
               emit, true);
      }
      return false;
  }
  return false;
}

void SoftConnectX::answer(const FrameSpec& spec, const Emit& emit, bool nak) {
  uint8_t frame[128];
  const EncodeResult e = encode(spec, ByteSpan{}, MutByteSpan{frame, sizeof frame});
  if (!e.ok()) throw std::logic_error("software ConnectX: an acknowledgement does not encode");
  emit(frame, e.len);
  ++(nak ? stats_.naks_sent : stats_.acks_sent);
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
