// Steering: which of a transceiver's queues a packet goes to, as a ConnectX's
// flow-steering rules pick a receive queue. Each queue is an rx/tx ring pair
// served by its own engine (a block of warps, or a CPU thread), so streams
// that go to different queues are taken in parallel and never share state.
//
// - by destination QP: queue i is QP first_qpn + i (one QP per stream, as a
//   Holoscan Sensor Bridge gives each sensor its own);
// - by UDP source port: every queue is the one QP, and a packet goes to queue
//   src_port % count (one QP with several streams, each from its own port;
//   a sensor keeps its port for the life of the stream).
//
// The NIC steers (the loopback's inject() and preload(), the socket NIC's
// receive thread); the engines never look at another queue's packets.
#pragma once

#include "rt/protocol/decode.h"

namespace rt {

constexpr uint32_t kMaxQueues = 16;
constexpr uint32_t kNoQueue = 0xFFFFFFFFu;

enum class SteerBy : uint8_t { kQp, kUdpSport };

struct Steering {
  uint32_t count = 1;  // queues, 1 to kMaxQueues
  SteerBy by = SteerBy::kQp;
  uint32_t first_qpn = 0;  // kQp: queue i serves first_qpn + i; kUdpSport: the one QP

  // The QP queue `q` serves.
  RT_HD uint32_t qpn(uint32_t q) const { return by == SteerBy::kQp ? first_qpn + q : first_qpn; }
};

// The queue a decoded packet belongs to, or kNoQueue when no queue serves its
// destination QP. A packet decoded from the BTH on (UDP socket mode) has no
// UDP header here: by source port it goes to queue 0.
RT_HD inline uint32_t queue_of(const Steering& s, const FrameView& f) {
  const uint32_t qp = f.bth_hdr().dest_qp.get();
  if (s.by == SteerBy::kQp) {
    const uint32_t q = qp - s.first_qpn;  // wraps past count below first_qpn
    return q < s.count ? q : kNoQueue;
  }
  if (qp != s.first_qpn) return kNoQueue;
  return f.ip_version ? uint32_t(f.udp_hdr().src_port.get()) % s.count : 0u;
}

// Where the loopback wire puts a frame: its queue, or queue 0 for one that does not
// decode or that no queue serves, whose engine counts it as one queue would (malformed,
// another QP).
RT_HD inline uint32_t steer_frame(const Steering& s, const uint8_t* frame, uint32_t len) {
  if (s.count == 1) return 0;
  const DecodeResult r = decode(ByteSpan(frame, len));
  if (!r.ok()) return 0;
  const uint32_t q = queue_of(s, r.frame);
  return q == kNoQueue ? 0u : q;
}

}  // namespace rt
