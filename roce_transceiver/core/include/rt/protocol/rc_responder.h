// The RC responder's rules (IBA 9.7.5, 9.4.5), as verdicts: written once and called by both
// RC responders of this project, the engine's responder (engine/responder.h) and the software
// ConnectX's responder half (verbs/soft_connectx.h). Each check returns what the rule says;
// the caller acts on it (sends the ACK or NAK the verdict names, counts, places the bytes), so
// the acting stays with whoever owns the rings and the counters.
#pragma once

#include "rt/platform.h"
#include "rt/protocol/decode.h"
#include "rt/protocol/encode.h"
#include "rt/protocol/psn.h"

namespace rt {

// A registered memory region: where RDMA WRITEs and atomics with its rkey may land.
struct MemRegion {
  uint64_t va;  // the address peers use
  uint32_t rkey;
  uint32_t length;
  uint8_t* base;  // where byte 0 of the region is written
};

// The region an access of `len` bytes at `va` under `rkey` may touch, or -1. Overflow-safe:
// va + len is never computed where it could wrap.
RT_HD inline int find_region(const MemRegion* regions, uint32_t count, uint32_t rkey, uint64_t va,
                             uint64_t len) {
  for (uint32_t i = 0; i < count; ++i) {
    const MemRegion& r = regions[i];
    if (r.rkey != rkey) continue;
    if (va < r.va || va - r.va > r.length || len > r.length - (va - r.va)) return -1;
    return int(i);
  }
  return -1;
}

// A request's PSN against the one expected (IBA 9.7.5.1.1): the expected one is executed; one
// behind is a duplicate (its ACK was lost: acknowledge again, do not execute, C9-104); one ahead
// means packets were lost (NAK PSN sequence error once, then wait, C9-110).
enum class PsnVerdict : uint8_t { kExpected, kDuplicate, kAhead };

RT_HD inline PsnVerdict rc_psn_verdict(uint32_t psn, uint32_t expected) {
  const int32_t diff = psn_diff(psn, expected);
  return diff == 0 ? PsnVerdict::kExpected : diff < 0 ? PsnVerdict::kDuplicate : PsnVerdict::kAhead;
}

// First/Middle/Last order (IBA 9.7.5.2.x): a Middle or Last needs a message in progress of the
// same kind (`in_message`: 0, kSend or kWrite); a First or Only may not interrupt one.
RT_HD inline bool sequence_ok(uint16_t in_message, const OpcodeInfo& op) {
  const uint16_t kind = op.flags & (kSend | kWrite);
  return op.is(kFirst) ? in_message == 0 : in_message == kind;
}

// An RDMA WRITE message in progress: where it started, where its next packet lands, and what
// its RETH still allows.
struct WriteProgress {
  uint32_t region;
  uint64_t start_va;
  uint64_t next_va;
  uint32_t remaining;
};

// Whether a WRITE packet may be placed (IBA 9.7.5.1.3, C9-88): a First or Only names by its RETH
// a region that holds the whole dma_len, and its payload fits that length (`w` starts over
// there); a Middle or Last fits what the RETH still allows. False: NAK remote access error,
// nothing placed. Where the packet lands is write_destination(); write_advance() moves past it.
RT_HD inline bool write_accept(WriteProgress& w, const MemRegion* regions, uint32_t count,
                               const FrameView& f) {
  if (!f.op.has(kReth)) return f.payload_len <= w.remaining;
  const Reth& reth = f.ext_hdr<Reth>(kReth);
  const uint64_t va = reth.va.get();
  const uint32_t len = reth.dma_len.get();
  const int region =
      f.payload_len <= len ? find_region(regions, count, reth.rkey.get(), va, len) : -1;
  if (region < 0) return false;
  w = WriteProgress{uint32_t(region), va, va, len};
  return true;
}

RT_HD inline uint8_t* write_destination(const WriteProgress& w, const MemRegion* regions) {
  const MemRegion& r = regions[w.region];
  return r.base + (w.next_va - r.va);
}

RT_HD inline void write_advance(WriteProgress& w, uint32_t n) {
  w.next_va += n;
  w.remaining -= n;
}

// The last atomic executed, replayed to a duplicate of it instead of executing it twice (IBA
// 9.4.5, C9-108: a responder keeps the results of its recent atomics; here the last one).
struct AtomicReplay {
  uint32_t psn;
  uint64_t orig;
  bool valid;
};

RT_HD inline bool atomic_is_replay(const AtomicReplay& r, uint32_t psn, uint32_t expected) {
  return r.valid && psn == r.psn && psn_diff(psn, expected) < 0;
}

// FETCH_ADD / COMPARE_SWAP (IBA 9.4.5) on an aligned 8-byte word of a region, at system scope
// (the word may be a signal another processor polls). kMisaligned: NAK invalid request;
// kNoRegion: NAK remote access error; nothing executed in either case.
enum class AtomicStatus : uint8_t { kDone, kMisaligned, kNoRegion };
struct AtomicOutcome {
  AtomicStatus status;
  uint64_t orig;  // the value before (kDone)
};

RT_HD inline AtomicOutcome atomic_execute(const MemRegion* regions, uint32_t count,
                                          const FrameView& f) {
  const AtomicEth& a = f.ext_hdr<AtomicEth>(kAtomicEth);
  const uint64_t va = a.va.get();
  if (va % 8) return {AtomicStatus::kMisaligned, 0};  // IBA: an atomic's address is aligned
  const int region = find_region(regions, count, a.rkey.get(), va, 8);
  if (region < 0) return {AtomicStatus::kNoRegion, 0};
  const MemRegion& r = regions[region];
  uint64_t* word = reinterpret_cast<uint64_t*>(r.base + (va - r.va));
  const bool add = (f.bth_hdr().opcode & 0x1F) == kOperationFetchAdd;  // else COMPARE_SWAP
  const uint64_t orig = add ? fetch_add_system(word, a.swap_add.get())
                            : compare_swap_system(word, a.compare.get(), a.swap_add.get());
  return {AtomicStatus::kDone, orig};
}

// The NAK syndrome for an atomic that was not executed.
RT_HD inline uint8_t atomic_nak(AtomicStatus s) {
  return s == AtomicStatus::kMisaligned ? kAethNakInvalidRequest : kAethNakRemoteAccessError;
}

// An RC ACK or NAK (IBA 9.7.5.1): AETH syndrome and the responder's MSN, at the PSN of the
// packet acknowledged. `base`: the responder's addresses towards the requester.
RT_HD inline FrameSpec aeth_spec(const FrameSpec& base, uint32_t peer_qpn, uint8_t syndrome,
                                 uint32_t psn, uint32_t msn) {
  FrameSpec spec = base;
  spec.opcode = make_opcode(Transport::RC, kOperationAcknowledge);
  spec.dest_qp = peer_qpn;
  spec.psn = psn & kPsnMask;
  spec.syndrome = syndrome;
  spec.msn = msn & kPsnMask;
  spec.ack_req = false;
  return spec;
}

// ATOMIC ACKNOWLEDGE (IBA 9.7.5.1.2): the value before, at the request's PSN.
RT_HD inline FrameSpec atomic_ack_spec(const FrameSpec& base, uint32_t peer_qpn, uint32_t psn,
                                       uint32_t msn, uint64_t orig) {
  FrameSpec spec = aeth_spec(base, peer_qpn, kAethAck, psn, msn);
  spec.opcode = make_opcode(Transport::RC, kOperationAtomicAcknowledge);
  spec.orig = orig;
  return spec;
}

}  // namespace rt
