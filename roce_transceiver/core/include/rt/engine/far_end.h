// The far end of the loopback wire: a peer that sends requests into the
// engine's rx ring and takes the engine's replies from its tx ring, stamping
// each message so round trips are measured where they start and end.
//
// Written once, like the engine: a CPU thread runs far_end_run() when the far
// end is "cpu", a block of the persistent kernel when it is "gpu". Requests are
// real RoCEv2 frames (encode), replies are decoded and their ICRC checked.
//
// Replies are matched to requests by order: one QP, one engine, no reordering
// on a loopback. window = 1 is a ping-pong (latency); a larger window with an
// interval is an offered load (throughput).
#pragma once

#include "rt/byte_copy.h"
#include "rt/protocol/encode.h"
#include "rt/queues/copy_wide.h"
#include "rt/queues/rx_ring.h"
#include "rt/queues/tx_ring.h"

namespace rt {

enum class FarEndStatus : uint32_t { kRunning = 0, kDone, kTimeout, kStopped, kBadConfig };

inline const char* far_end_status_name(uint32_t s) {
  switch (FarEndStatus(s)) {
    case FarEndStatus::kRunning: return "running";
    case FarEndStatus::kDone: return "done";
    case FarEndStatus::kTimeout: return "timeout";
    case FarEndStatus::kStopped: return "stopped";
    case FarEndStatus::kBadConfig: return "bad_config";
  }
  return "unknown";
}

struct FarEndResult {
  uint32_t status;  // FarEndStatus
  uint32_t sent;
  uint32_t received;
  uint32_t wrong;       // replies whose payload differed from the expectation
  uint32_t bad_frames;  // replies that did not decode, had a bad ICRC or a wrong opcode/QP
  uint32_t ring_full;   // times the engine's rx ring was full (the request was retried)
  uint64_t elapsed_ns;  // first send to last reply
  uint32_t rx_end;      // producer and consumer indices where the run stopped,
  uint32_t tx_end;      //   so the next run (or the host) continues from there
};

struct FarEndDesc {
  RxRing rx;                // the engine's rx ring: we produce
  TxRing tx;                // the engine's tx ring: we consume
  FrameSpec spec;           // peer -> engine addresses, QP, opcode; PSN set per request
  uint32_t own_qpn;         // the far end's QP: replies must be addressed to it
  const uint8_t* payloads;  // num_payloads requests of payload_len bytes, used in turn
  uint32_t payload_len;
  uint32_t num_payloads;
  const uint8_t* expected;  // expected reply payload per request (same rotation), or
  uint32_t expected_len;    //   nullptr: a reply must equal its request (echo)
  uint32_t count;           // requests to send
  uint32_t window;          // requests in flight at most (1: ping-pong)
  uint64_t interval_ns;     // between sends (0: as fast as the window allows)
  uint64_t timeout_ns;      // the whole run, from its start
  uint32_t first_psn;
  uint32_t rx_start;        // our producer index into rx where this run starts
  uint32_t tx_start;        // our consumer index into tx where this run starts
  uint32_t seq_in_payload;  // 1: write the request number into payload bytes 0..3 (echo)
  uint64_t* times;          // count entries: send time, replaced by the round trip (ns)
  uint8_t* frame;           // scratch for one reply frame (tx.slot_bytes, 16-byte aligned)
  FarEndResult* result;
};

namespace far_end_detail {

// The request payload of request `i`: the rotation entry, with the request
// number in its first 4 bytes (little-endian) when asked.
RT_HD inline void request_payload(const FarEndDesc& d, uint32_t i, uint8_t* out) {
  copy_bytes(out, d.payloads + size_t(i % d.num_payloads) * d.payload_len, d.payload_len);
  if (d.seq_in_payload && d.payload_len >= 4) store_le32(out, i);
}

enum class ReplyKind : uint8_t { kReply, kAck, kBad };

// Classify one frame from the engine for request `i` and check its payload.
RT_HD inline ReplyKind check_reply(const FarEndDesc& d, uint32_t i, const uint8_t* frame,
                                   uint32_t len, bool* payload_ok) {
  const DecodeResult r = decode(ByteSpan(frame, len));
  if (!r.ok() || !icrc_ok(r.frame)) return ReplyKind::kBad;
  const FrameView& f = r.frame;
  if (f.bth_hdr().dest_qp.get() != d.own_qpn) return ReplyKind::kBad;
  if (f.op.is(kResponse) && f.op.has(kAeth)) return ReplyKind::kAck;  // RC ACKs of requests
  if (!(f.op.flags & kSend)) return ReplyKind::kBad;
  const uint8_t* got = f.base + f.payload;
  if (d.expected) {
    const uint8_t* want = d.expected + size_t(i % d.num_payloads) * d.expected_len;
    *payload_ok = f.payload_len == d.expected_len && same_bytes(got, want, d.expected_len);
  } else {
    const uint8_t* src = d.payloads + size_t(i % d.num_payloads) * d.payload_len;
    // With the request number in bytes 0..3, those are compared with it.
    const uint32_t skip = d.seq_in_payload && d.payload_len >= 4 ? 4 : 0;
    *payload_ok = f.payload_len == d.payload_len && (!skip || load_le32(got) == i) &&
                  same_bytes(got + skip, src + skip, d.payload_len - skip);
  }
  return ReplyKind::kReply;
}

}  // namespace far_end_detail

// Run to completion, timeout or stop. `stop` is polled with acquire at the
// system scope (the host sets it).
template <Scope S>
RT_HD inline void far_end_run(const FarEndDesc& d, const uint32_t* stop) {
  using namespace far_end_detail;
  FarEndResult& res = *d.result;
  res = FarEndResult{};
  res.rx_end = d.rx_start;
  res.tx_end = d.tx_start;
  if (d.num_payloads == 0 || d.window == 0 || d.frame == nullptr) {
    res.status = uint32_t(FarEndStatus::kBadConfig);
    return;
  }
  uint32_t prod = d.rx_start;  // we are the rx ring's only producer during the run
  // Frames the engine sent before this run are not replies to it: skip them.
  uint32_t ci = load_acquire<S>(d.tx.producer);
  tx_consume<S>(d.tx, ci);
  FrameSpec spec = d.spec;
  const uint32_t payload_at = payload_offset(spec);
  const uint64_t start = now_ns();
  uint64_t next_send = start;
  uint64_t last_reply = start;
  for (uint32_t pass = 0;; ++pass) {
    if (res.received == d.count) {
      res.status = uint32_t(FarEndStatus::kDone);
      break;
    }
    // The clock and the stop flag are read every 64th pass: on a GPU each read
    // is a memory round trip that would sit between a reply and its detection.
    if ((pass & 63) == 0) {
      if (now_ns() - start > d.timeout_ns) {
        res.status = uint32_t(FarEndStatus::kTimeout);
        break;
      }
      if (load_acquire<Scope::kSystem>(stop)) {
        res.status = uint32_t(FarEndStatus::kStopped);
        break;
      }
    }
    bool idle = true;
    if (res.sent < d.count && res.sent - res.received < d.window &&
        (d.interval_ns == 0 || now_ns() >= next_send)) {
      // Build the request in the slot itself: no second copy on the critical path.
      if (uint8_t* slot = rx_reserve<S>(d.rx, prod)) {
        spec.psn = psn_add(d.first_psn, res.sent);
        request_payload(d, res.sent, slot + payload_at);
        const EncodeResult e = encode(spec, ByteSpan(slot + payload_at, d.payload_len),
                                      MutByteSpan(slot, d.rx.slot_bytes));
        if (!e.ok()) {
          res.status = uint32_t(FarEndStatus::kBadConfig);
          break;
        }
        const uint64_t t = now_ns();
        rx_publish<S>(d.rx, prod, e.len, t);
        d.times[res.sent] = t;
        ++res.sent;
        next_send = d.interval_ns ? next_send + d.interval_ns : t;
        idle = false;
      } else {
        ++res.ring_full;
      }
    }
    if (const TxDesc* td = tx_poll<S>(d.tx, ci)) {
      const uint64_t t = now_ns();
      bool payload_ok = false;
      const uint32_t len = td->len < d.tx.slot_bytes ? td->len : d.tx.slot_bytes;
      // Stage the reply next to us (16-byte loads) before decoding it byte by byte.
      copy_wide(d.frame, d.tx.slot(ci), len);
      const ReplyKind kind = check_reply(d, res.received, d.frame, len, &payload_ok);
      if (kind == ReplyKind::kReply && res.received < res.sent) {
        d.times[res.received] = t - d.times[res.received];
        if (!payload_ok) ++res.wrong;
        ++res.received;
        last_reply = t;
      } else if (kind != ReplyKind::kAck) {
        ++res.bad_frames;  // undecodable, or a reply to nothing we sent
      }
      ++ci;
      tx_consume<S>(d.tx, ci);
      idle = false;
    }
    if (idle) spin_pause();
  }
  res.elapsed_ns = last_reply - start;
  res.rx_end = prod;
  res.tx_end = ci;
}

}  // namespace rt
