// The RC requester's rules (IBA 9.7.5.1, 9.7.6, 9.7.7) as verdicts: what an ACK, a NAK or an
// RNR NAK from the responder means for the packets we have outstanding, and the RNR timer's
// encoding. The engine's requester (engine/requester.h) and the software ConnectX's requester
// half both act on these; neither decides them itself.
#pragma once

#include "rt/protocol/aeth.h"
#include "rt/protocol/psn.h"

namespace rt {

// The AETH syndrome's kind (IBA table 44: bits 6:5).
enum class AethKind : uint8_t { kAck, kRnrNak, kReserved, kNak };

RT_HD constexpr AethKind aeth_kind(uint8_t syndrome) { return AethKind((syndrome >> 5) & 3); }

// An RNR NAK's syndrome: the timer's 5-bit code (IBA table 45) the requester waits before it
// sends the refused packet again.
RT_HD constexpr uint8_t rnr_nak_syndrome(uint8_t timer) { return uint8_t(0x20 | (timer & 0x1F)); }

// IBA table 45: the RNR NAK timer's codes in units of 10 us (code 0 is the longest, 655.36 ms).
RT_HD constexpr uint64_t rnr_timer_ns(uint8_t code) {
  constexpr uint32_t kTens[32] = {65536, 1,    2,    3,     4,     6,     8,     12,
                                  16,    24,   32,   48,    64,    96,    128,   192,
                                  256,   384,  512,  768,   1024,  1536,  2048,  3072,
                                  4096,  6144, 8192, 12288, 16384, 24576, 32768, 49152};
  return uint64_t(kTens[code & 0x1F]) * 10'000;
}

// What a response does to the outstanding packets [una, next).
enum class ResponseAction : uint8_t {
  kStale,    // about nothing outstanding (a late or repeated answer): ignored
  kAcked,    // `acked` packets from una on are acknowledged
  kResend,   // acknowledged up to `from`; send again from there (NAK PSN sequence error)
  kRnrWait,  // acknowledged up to `from`; wait the RNR timer, then send again from there
  kFatal,    // acknowledged up to `from`; the packet at `from` failed (remote access, invalid
             // request, remote operation error): the queue pair goes to the error state
};

struct ResponseVerdict {
  ResponseAction action;
  uint32_t acked;    // packets from una on that the response acknowledges
  uint32_t from;     // kResend / kRnrWait / kFatal: the PSN the responder refused
  uint64_t wait_ns;  // kRnrWait: the responder's RNR timer
};

// The verdict on a response at `psn` with `syndrome`, while [una, next) is outstanding. An ACK
// acknowledges every packet through its PSN (ACKs coalesce, IBA 9.7.5.1.1); a NAK or an RNR
// NAK at PSN p acknowledges every packet before p (C9-127, C9-130).
RT_HD inline ResponseVerdict rc_response_verdict(uint8_t syndrome, uint32_t psn, uint32_t una,
                                                 uint32_t next) {
  ResponseVerdict v{ResponseAction::kStale, 0, psn, 0};
  const int32_t outstanding = psn_diff(next, una);
  const int32_t at = psn_diff(psn, una);  // where the response points, from una
  const AethKind kind = aeth_kind(syndrome);
  if (kind == AethKind::kAck) {
    if (at < 0 || at >= outstanding) return v;
    v.action = ResponseAction::kAcked;
    v.acked = uint32_t(at) + 1;
    return v;
  }
  if (at < 0 || at >= outstanding || kind == AethKind::kReserved) return v;
  v.acked = uint32_t(at);
  if (kind == AethKind::kRnrNak) {
    v.action = ResponseAction::kRnrWait;
    v.wait_ns = rnr_timer_ns(syndrome & 0x1F);
  } else {
    v.action = syndrome == kAethNakPsnSeqError ? ResponseAction::kResend : ResponseAction::kFatal;
  }
  return v;
}

// A retry count of 7 is "retry for ever" for RNR NAKs (IBA 9.7.5.2.8, C9-144); for the
// transport's own retries (timeouts, sequence NAKs) 7 is seven.
constexpr uint32_t kRnrRetryForever = 7;

}  // namespace rt
