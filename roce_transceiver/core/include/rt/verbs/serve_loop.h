// Verbs mode's data path (docs/verbs_mode.md, "The exchange"): one-sided, as NVSHMEM and NCCL
// GIN do it. A request lands in slot i % slots of our ring by the peer's RDMA WRITE, followed
// by its FETCH_ADD of 1 on our signal word, both executed by our NIC (the software ConnectX's
// responder, as a ConnectX would); the loop only polls that memory: it waits on the signal, runs
// the handler
// (the Ethernet mode's, handlers/dispatch.h) and answers with a put_signal: an RDMA WRITE into
// the same slot of the peer's ring, then a FETCH_ADD of 1 on the peer's signal word.
//
// The queue pair is a policy, so the same loop runs in the persistent kernel (GPUNetIO's
// device API, cuda/verbs_kernels.cu) and on a CPU thread (WQEs written by the host,
// host/host_queue_pair.h), both against the software ConnectX:
//   uint64_t put_signal(const PutSignal&)  posts the WRITE and the FETCH_ADD, returns a ticket
//   int poll(uint64_t ticket)              0 done, EBUSY not yet, anything else an error
//   void idle()                            nothing to do this turn (a CPU thread may yield)
#pragma once

#include <cerrno>
#include <cstdint>

#include "rt/handlers/dispatch.h"
#include "rt/platform.h"
#include "rt/queues/copy_wide.h"

namespace rt::verbs {

// Every slot, request or reply, starts with this header (little-endian); the payload follows.
constexpr uint32_t kSlotHeaderBytes = 8;
constexpr uint32_t kSlotLenOffset = 0;     // u32: payload bytes
constexpr uint32_t kSlotStatusOffset = 4;  // u32: 0, or the handler's error (replies)
// Tickets of the replies in flight live in the loop's registers / stack: one per slot.
constexpr uint32_t kMaxServeSlots = 64;
// A request and its reply are copied through the loop's stack (see serve_one): at most this
// much a slot, a multiple of 16 (the slots' 16-byte copies).
constexpr uint32_t kMaxServeSlotBytes = 1024;
constexpr uint32_t kServeSlotAlign = 16;
// What the first copy of a request takes: its header and the payload of a small one, in one
// round trip across the bus (copy_wide's batch of eight 16-byte loads).
constexpr uint32_t kServeFirstFetch = 128;

enum ServeStatus : uint32_t {
  kReplyOk = 0,
  kReplyRequestTooLong = 1,  // the request's length field is beyond its slot
  kReplyHandlerError = 2,    // the handler refused the request (e.g. a short QEC syndrome)
};

// Why the loop ended (ServeShared::state).
enum ServeState : uint32_t {
  kServeRunning = 0,
  kServeStopped = 1,       // asked to stop
  kServeNoCompletion = 2,  // a reply's completion did not come within completion_timeout_ns
  kServeCqError = 3,       // a reply completed with an error (ServeShared::cq_status)
  kServeDone = 4,          // served max_requests and saw every completion
};

struct ServeDesc {
  const uint8_t* requests = nullptr;  // our ring: slots x slot_bytes, where our NIC places the
  const uint64_t* signal = nullptr;   // peer's WRITEs; requests landed so far (its FETCH_ADDs)
  uint32_t slots = 16;
  uint32_t slot_bytes = 256;
  HandlerDesc handler{};
  uint8_t* staging = nullptr;  // replies are built here: slots x slot_bytes, then 8 bytes per
  uint64_t staging_addr = 0;   // slot for the FETCH_ADD's result; its address in WQEs
  uint32_t lkey = 0;
  uint64_t peer_ring = 0;  // the peer's ring (slots x slot_bytes) and signal word
  uint32_t peer_ring_rkey = 0;
  uint64_t peer_signal = 0;
  uint32_t peer_signal_rkey = 0;
  uint64_t max_requests = 0;  // 0: until stopped
  uint64_t completion_timeout_ns = 1000000000ull;
};

// Written by the loop, read by the host while it runs (relaxed, one writer).
struct ServeShared {
  uint64_t served = 0;     // requests answered (put_signal posted)
  uint64_t completed = 0;  // of those, completions seen
  uint64_t handler_errors = 0;
  uint64_t state = kServeRunning;
  uint64_t cq_status = 0;
};

struct PutSignal {
  uint64_t raddr;
  uint32_t rkey;
  uint64_t laddr;
  uint32_t lkey;
  uint32_t bytes;
  uint64_t signal_raddr;
  uint32_t signal_rkey;
  uint64_t sink_laddr;  // where the FETCH_ADD's old value lands
};

RT_HD inline uint32_t slot_le32(const uint8_t* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}
RT_HD inline void slot_store_le32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = uint8_t(v >> (8 * i));
}

// Builds the reply to the request in slot `slot` into its staging slot; returns its bytes,
// header included. A request the handler cannot take is answered with an empty payload and a
// status, so that the peer's count of replies stays the count of its requests.
//
// The ring and the staging slots are pinned host memory on the GPU: the request comes in with
// 16-byte loads issued together (the handler's byte loads would each wait for the bus), and the
// reply is built on the stack and goes out the same way.
RT_HD inline uint32_t serve_one(const ServeDesc& d, uint32_t slot, uint64_t* handler_errors) {
  alignas(kServeSlotAlign) uint8_t req[kMaxServeSlotBytes];
  alignas(kServeSlotAlign) uint8_t out[kMaxServeSlotBytes];
  const uint8_t* src = d.requests + size_t(slot) * d.slot_bytes;
  const uint32_t first = d.slot_bytes < kServeFirstFetch ? d.slot_bytes : kServeFirstFetch;
  copy_wide(req, src, first);
  const uint32_t room = d.slot_bytes - kSlotHeaderBytes;
  const uint32_t len = slot_le32(req + kSlotLenOffset);
  if (len <= room && kSlotHeaderBytes + len > first)
    copy_wide(req + first, src + first, kSlotHeaderBytes + len - first);
  uint32_t status = kReplyOk;
  int n = 0;
  if (len > room) {
    status = kReplyRequestTooLong;
  } else {
    const Message m{req + kSlotHeaderBytes, len, 0, false, 0};
    n = handle(d.handler, m, out + kSlotHeaderBytes, room);
    if (n < 0) status = kReplyHandlerError;
  }
  if (status != kReplyOk) {
    ++*handler_errors;
    n = 0;
  }
  slot_store_le32(out + kSlotLenOffset, uint32_t(n));
  slot_store_le32(out + kSlotStatusOffset, status);
  copy_wide(d.staging + size_t(slot) * d.slot_bytes, out, kSlotHeaderBytes + uint32_t(n));
  return kSlotHeaderBytes + uint32_t(n);
}

// What the loop carries from one pass to the next: on the GPU it lives in device memory
// between epochs (the kernel returns every epoch_us and is launched again, as the engine's
// does: docs/gpu_sharing.md), on a CPU thread in the thread's frame.
struct ServeProgress {
  uint64_t served = 0;     // requests answered (put_signal posted)
  uint64_t completed = 0;  // of those, completions seen
  uint64_t errors = 0;     // handler errors
  uint64_t state = kServeRunning;
  uint64_t cq_status = 0;
  uint64_t tickets[kMaxServeSlots] = {};  // the reply in flight of each slot
};

// The loop's roles, as the engine's (classify, execute, publish) with the queue pair as the
// policy: classify reads how many requests have landed; execute is serve_one; publish posts
// the reply's put_signal; retire takes its completion back.
namespace serve_roles {

// Requests landed and not yet served (bounded by max_requests).
RT_HD inline uint64_t landed(const ServeDesc& d, const ServeProgress& p) {
  uint64_t n = load_relaxed<Scope::kSystem>(d.signal);
  if (d.max_requests && n > d.max_requests) n = d.max_requests;
  return n > p.served ? n - p.served : 0;
}

// The reply just built in `slot`'s staging goes out: an RDMA WRITE into the same slot of the
// peer's ring, then +1 on its signal word.
template <class Qp>
RT_HD inline void publish(const ServeDesc& d, Qp& qp, ServeProgress& p, uint32_t slot,
                          uint32_t bytes) {
  const uint64_t off = uint64_t(slot) * d.slot_bytes;
  const PutSignal ps{d.peer_ring + off,
                     d.peer_ring_rkey,
                     d.staging_addr + off,
                     d.lkey,
                     bytes,
                     d.peer_signal,
                     d.peer_signal_rkey,
                     d.staging_addr + uint64_t(d.slots) * d.slot_bytes + 8ull * slot};
  p.tickets[slot] = qp.put_signal(ps);
  ++p.served;
}

// Retires the oldest reply in flight; `wait`: until it completes or its deadline passes.
// False when the loop must end (state says why).
template <class Qp>
RT_HD inline bool retire(const ServeDesc& d, Qp& qp, ServeProgress& p, bool wait) {
  const uint64_t deadline = now_ns() + d.completion_timeout_ns;
  for (;;) {
    const int st = qp.poll(p.tickets[p.completed % d.slots]);
    if (st == 0) {
      ++p.completed;
      return true;
    }
    if (st != EBUSY) {
      p.cq_status = uint64_t(uint32_t(st));
      p.state = kServeCqError;
      return false;
    }
    if (!wait) return true;
    if (now_ns() > deadline) {
      p.state = kServeNoCompletion;
      return false;
    }
  }
}

RT_HD inline void report(const ServeProgress& p, ServeShared* shared) {
  store_relaxed<Scope::kSystem>(&shared->served, p.served);
  store_relaxed<Scope::kSystem>(&shared->completed, p.completed);
  store_relaxed<Scope::kSystem>(&shared->handler_errors, p.errors);
}

}  // namespace serve_roles

// Serves until `stop` reads non-zero (checked while idle; the replies in flight are waited
// for), max_requests are served and completed, a completion fails or does not come, or the
// clock passes `until_ns` (an epoch's end: the loop is then still running, its progress in
// `p`). True while it runs. The peer keeps at most `slots` requests outstanding (its credit is
// our signal on its side), so a request never overwrites one that is still being read.
// Everything shared is read and written at system scope: the counters sit in host memory the
// host reads while a kernel runs, the signal word is written by our NIC's thread, the stop flag
// by the host.
template <class Qp>
RT_HD inline bool serve_pass(const ServeDesc& d, Qp& qp, ServeProgress& p, ServeShared* shared,
                             const uint32_t* stop, uint64_t until_ns) {
  using namespace serve_roles;
  while (p.state == kServeRunning) {
    if (d.max_requests && p.completed == d.max_requests) {
      p.state = kServeDone;
      break;
    }
    if (uint64_t n = landed(d, p)) {
      fence_acquire<Scope::kSystem>();  // the requests' bytes were placed before their signal
      for (; n; --n) {
        // The staging slot is free once the reply that last used it has completed.
        if (p.served - p.completed == d.slots && !retire(d, qp, p, true)) break;
        const uint32_t slot = uint32_t(p.served % d.slots);
        publish(d, qp, p, slot, serve_one(d, slot, &p.errors));
        report(p, shared);
      }
      if (p.state == kServeRunning && now_ns() >= until_ns) return true;
      continue;
    }
    if (p.completed < p.served) {
      if (!retire(d, qp, p, false)) break;
      report(p, shared);
    }
    if (load_acquire<Scope::kSystem>(stop)) {
      // Replies in flight complete first: stopping must not leave a WQE the NIC still owns.
      while (p.completed < p.served && retire(d, qp, p, true)) {
      }
      if (p.state == kServeRunning) p.state = kServeStopped;
      break;
    }
    if (now_ns() >= until_ns) return true;
    qp.idle();
  }
  report(p, shared);
  store_relaxed<Scope::kSystem>(&shared->cq_status, p.cq_status);
  store_relaxed<Scope::kSystem>(&shared->state, p.state);
  return false;
}

// The whole loop in one pass (a CPU thread).
template <class Qp>
RT_HD inline void serve_loop(const ServeDesc& d, Qp& qp, ServeShared* shared,
                             const uint32_t* stop) {
  ServeProgress p;
  serve_pass(d, qp, p, shared, stop, ~uint64_t(0));
}

}  // namespace rt::verbs
