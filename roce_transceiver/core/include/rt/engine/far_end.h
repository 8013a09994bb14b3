// The far end of the loopback wire: a peer that sends requests into the
// engine's rx ring and takes the engine's replies from its tx ring, stamping
// each message so round trips are measured where they start and end.
//
// Written once, like the engine: a CPU thread runs far_end_run() when the far
// end is "cpu" (its two halves in turn), a block of a kernel when it is "gpu"
// (far_end_send() and far_end_receive() on a lane of a warp each, so that
// building one request never waits for checking another's reply). A queue's
// far end is one such thread or block; several queues have one each.
//
// Requests and the replies they must get are real RoCEv2 frames, built once
// by the host as templates (FrameTemplates): per request only its PSN (and,
// for echo, its number in the payload) changes, and with it the ICRC, which
// CRC-32's linearity gives from a table (FramePatch), so a request costs a
// copy and a few stores. A reply equal to its template, patched the same way,
// is right byte for byte; any other is decoded, its ICRC computed, and
// classified (an RC ACK, a bad frame, a wrong payload).
//
// Replies are matched to requests by order: one QP, one engine, no reordering
// on a loopback. window = 1 is a ping-pong (latency). With interval_ns the
// load is offered open loop: request i is due at start + i * interval, goes
// out at its due time or as soon after as the window and the ring allow, and
// its round trip is counted from its due time, so a loop that falls behind
// shows its queue in the latencies (no coordinated omission). A request that
// goes out more than late_ns after its due time is counted late; with drop_ns,
// one that could not go out within drop_ns of its due time is dropped: counted,
// never sent (its PSN goes to the next request), never silently skipped.
//
// With `acks` (the engine's RC requester on, qp.retransmit) the far end is an RC responder
// for the replies too: the sender publishes an ACK of the latest reply matched (one for all
// the replies since the last, as ACKs coalesce) on its own, before it stamps and sends its
// next requests, and, once every request is out, of the last reply, so the engine's
// requester has nothing outstanding when the run ends. A reply sent again is taken once and
// acknowledged again. Its MSN is 0: the requester reads the PSN alone.
#pragma once

#include "rt/byte_copy.h"
#include "rt/protocol/encode.h"
#include "rt/protocol/psn.h"
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

// A request's entry of `times` that was dropped (no round trip).
constexpr uint64_t kFarEndDropped = ~uint64_t(0);

struct FarEndResult {
  uint32_t status;  // FarEndStatus
  uint32_t sent;
  uint32_t received;
  uint32_t wrong;        // replies whose payload differed from the expectation
  uint32_t bad_frames;   // replies that did not decode, had a bad ICRC or a wrong opcode/QP
  uint32_t ring_full;    // times the engine's rx ring was full (the request was retried)
  uint64_t elapsed_ns;   // first send (the schedule's start) to last reply
  uint32_t rx_end;       // producer and consumer indices where the run stopped,
  uint32_t tx_end;       //   so the next run (or the host) continues from there
  uint32_t late;         // requests sent more than late_ns after their due time
  uint32_t dropped;      // requests not sent: not out within drop_ns of their due time
  uint32_t matched;      // entries of `times` the replies got to (latencies or dropped below)
  uint32_t slow_checks;  // frames from the engine checked by decoding (not their template)
  uint64_t max_lag_ns;   // the latest a request went out after its due time
  uint64_t start_ns;     // the far end's clock at the schedule's start
  uint64_t last_reply_ns;
  // The far end's own part, on its clock: building and publishing each request (inside its
  // round trip: from its send time to the doorbell), and checking each reply (after the
  // round trip ends; a ping-pong's next request waits for it).
  uint64_t send_ns;
  uint64_t check_ns;
};

// Where the bytes that change from request to request sit in a template, and
// what each does to its ICRC. CRC-32 is affine in its input: for frames of one
// length, icrc(T ^ x) = icrc(T) ^ L(x) with L linear, so the ICRC of a template
// (zeros at these bytes) with bytes b_k written there is icrc(T) ^ the XOR of
// delta[k][b_k], and the host computes the table once.
constexpr uint32_t kPatchBytes = 7;  // BTH's PSN (3, big-endian), the request number (4, LE)
constexpr uint32_t kNoSeq = 0xFFFFFFFFu;

struct FramePatch {
  uint32_t psn_at;        // offset of the PSN's first byte (BTH byte 9)
  uint32_t seq_at;        // offset of the request number, or kNoSeq
  const uint32_t* delta;  // [kPatchBytes][256]: PSN bytes 0..2, then the number's 0..3
};

// Frames built once: `count` of `len` bytes, `stride` bytes apart (a multiple
// of 16, the first 16-byte aligned), each with zeros at the patch bytes and
// the ICRC those zeros give.
struct FrameTemplates {
  const uint8_t* frames;
  uint32_t count;
  uint32_t len;
  uint32_t stride;
  uint32_t payload_at;  // where the payload starts in each frame
  uint32_t payload_len;
  FramePatch patch;
};

struct FarEndDesc {
  RxRing rx;                // the engine's rx ring: we produce
  TxRing tx;                // the engine's tx ring: we consume
  FrameTemplates requests;  // request i is requests[i % count], patched
  FrameTemplates replies;   // the reply request i must get: replies[i % count], patched
  FrameTemplates acks;      // count 1: the ACK of a reply, PSN patched; count 0: no ACKs
  uint32_t own_qpn;         // the far end's QP: replies must be addressed to it
  uint32_t count;           // requests to offer
  uint32_t window;          // requests in flight at most (1: ping-pong)
  uint64_t interval_ns;     // between due times (0: as fast as the window allows)
  uint64_t phase_ns;        // the first due time after the start (queues share a schedule)
  uint64_t late_ns;         // later than this after its due time: late
  uint64_t drop_ns;         // not out this long after its due time: dropped (0: never)
  uint64_t timeout_ns;      // the whole run, from its start
  uint32_t first_psn;
  uint32_t rx_start;  // our producer index into rx where this run starts
  uint32_t tx_start;  // our consumer index into tx where this run starts
  uint64_t* times;    // count entries: due (or send) time, replaced by the round trip
  uint8_t* frame;     // scratch for one reply frame (tx.slot_bytes, 16-byte aligned)
  uint8_t* expect;    // scratch for the reply expected (tx.slot_bytes, 16-byte aligned)
  FarEndResult* result;
};

// What the two halves share while they run on different warps (a CPU thread runs both):
// each word has one writer. The progress words are relaxed: the receiver reads `sent` and
// `offered` only with a reply in hand, and the release that published its request came
// after both stores (and after the `times` entries below them); the sender needs
// `received` only eventually, for its window. The *_over words end the run, with
// release / acquire: what a half wrote before its own is the other's after.
struct FarEndShared {
  uint32_t sent;           // sender: requests published (raised before each is published)
  uint32_t offered;        // sender: requests sent or dropped, the index of the next one
  uint32_t received;       // receiver: replies matched
  uint32_t sender_over;    // sender: a FarEndStatus once it has nothing more to do
  uint32_t receiver_over;  // receiver: a FarEndStatus once the run is over for it
  uint64_t reply_mark;     // receiver, with acks: ACKs due so far << 32 | the PSN to ACK
};

namespace far_end_detail {

// The clock and the stop flag are read every 64th pass of a spin: on a GPU each
// read would sit between a reply and its detection.
constexpr uint32_t kCheckEvery = 64;

RT_HD inline uint32_t patch_delta(const FramePatch& p, uint32_t psn, uint32_t seq) {
  const uint32_t* t = p.delta;
  uint32_t x = t[0 * 256 + ((psn >> 16) & 0xFF)] ^ t[1 * 256 + ((psn >> 8) & 0xFF)] ^
               t[2 * 256 + (psn & 0xFF)];
  if (p.seq_at != kNoSeq)
    x ^= t[3 * 256 + (seq & 0xFF)] ^ t[4 * 256 + ((seq >> 8) & 0xFF)] ^
         t[5 * 256 + ((seq >> 16) & 0xFF)] ^ t[6 * 256 + (seq >> 24)];
  return x;
}

// Template `i % count` into `out` (16-byte aligned, round16(len) bytes of room),
// with request `i`'s PSN and number, and the ICRC they give.
RT_HD inline void build_frame(const FrameTemplates& t, uint32_t i, uint32_t psn, uint8_t* out) {
  copy_wide(out, t.frames + size_t(i % t.count) * t.stride, t.len);
  out[t.patch.psn_at] = uint8_t(psn >> 16);
  out[t.patch.psn_at + 1] = uint8_t(psn >> 8);
  out[t.patch.psn_at + 2] = uint8_t(psn);
  if (t.patch.seq_at != kNoSeq) store_le32(out + t.patch.seq_at, i);
  uint8_t* icrc = out + t.len - kIcrcBytes;
  store_le32(icrc, load_le32(icrc) ^ patch_delta(t.patch, psn, i));
}

enum class ReplyKind : uint8_t { kReply, kAck, kBad };

// Classify one frame from the engine for request `i` by decoding it, and check its payload
// against the template's. `psn` gets a reply's PSN.
RT_HD inline ReplyKind check_reply(const FarEndDesc& d, uint32_t i, const uint8_t* frame,
                                   uint32_t len, bool* payload_ok, uint32_t* psn) {
  const DecodeResult r = decode(ByteSpan(frame, len));
  if (!r.ok() || !icrc_ok(r.frame)) return ReplyKind::kBad;
  const FrameView& f = r.frame;
  if (f.bth_hdr().dest_qp.get() != d.own_qpn) return ReplyKind::kBad;
  if (f.op.is(kResponse) && f.op.has(kAeth)) return ReplyKind::kAck;  // RC ACKs of requests
  if (!(f.op.flags & kSend)) return ReplyKind::kBad;
  *psn = f.bth_hdr().psn.get();
  const FrameTemplates& t = d.replies;
  const uint8_t* got = f.base + f.payload;
  const uint8_t* want = t.frames + size_t(i % t.count) * t.stride + t.payload_at;
  // The request number's bytes are zero in the template: compared with the number itself.
  const uint32_t skip = t.patch.seq_at != kNoSeq ? 4 : 0;
  *payload_ok = f.payload_len == t.payload_len && (!skip || load_le32(got) == i) &&
                same_bytes(got + skip, want + skip, t.payload_len - skip);
  return ReplyKind::kReply;
}

// The sender's own state.
struct Sender {
  uint32_t prod;           // our producer index into rx
  uint32_t released_seen;  // the engine's release index when last read
  uint32_t sent, offered, dropped, late, ring_full;
  uint32_t acked;  // with acks: the ACKs sent so far (reply_mark's count when all are)
  uint64_t max_lag;
  uint32_t passes;
  uint64_t send_ns;  // each request's time from its send stamp to its publish, added up
};

// Requests a sender publishes behind one fence at most: those due at once (flat out, or a
// schedule it is behind on), so a fence is not on every request when the loop is fast.
constexpr uint32_t kSendBurst = 8;

// One try at the next requests: each dropped if overdue past drop_ns, sent if due and the
// window and the ring have room, up to kSendBurst of them published together. True when
// it did something.
template <Scope S>
RT_HD inline bool send_step(const FarEndDesc& d, Sender& s, FarEndShared& sh, uint64_t start,
                            const uint32_t& received) {
  uint64_t now = now_ns();
  uint32_t built = 0;
  bool dropped = false;
  // With acks: the replies matched since the last ACK, acknowledged on their own before any
  // request is stamped, as a NIC acknowledges a reply the moment it lands and its host's next
  // request comes after (the ACK bundled with the request would put its handling on the
  // request's round trip, which no NIC does).
  bool acked = false;
  if (d.acks.count) {
    // After the receiver's release of `received`, which follows its mark.
    load_acquire<Scope::kDevice>(&sh.received);
    const uint64_t mark = load_relaxed<Scope::kDevice>(&sh.reply_mark);
    if (uint32_t(mark >> 32) != s.acked) {
      if (s.prod - s.released_seen >= d.rx.depth())
        s.released_seen = load_acquire<S>(d.rx.released);
      if (s.prod - s.released_seen < d.rx.depth()) {
        build_frame(d.acks, 0, uint32_t(mark) & kPsnMask, d.rx.slot(s.prod));
        rx_describe(d.rx, s.prod, d.acks.len, now);
        rx_publish_run<S>(d.rx, s.prod, 1);
        s.acked = uint32_t(mark >> 32);
        acked = true;
        now = now_ns();
      }
    }
  }
  while (built < kSendBurst && s.offered < d.count) {
    uint64_t due = 0;
    if (d.interval_ns) {
      due = start + d.phase_ns + uint64_t(s.offered) * d.interval_ns;
      if (now < due) break;
      if (d.drop_ns && now - due > d.drop_ns) {
        d.times[s.offered] = kFarEndDropped;
        ++s.dropped;
        ++s.offered;
        dropped = true;
        continue;
      }
    }
    if (s.sent + built - received >= d.window) break;
    // The engine's release index is read only when the ring looks full (each read is a trip
    // to where the engine writes it).
    const uint32_t prod = s.prod + built;
    if (prod - s.released_seen >= d.rx.depth()) {
      s.released_seen = load_acquire<S>(d.rx.released);
      if (prod - s.released_seen >= d.rx.depth()) {
        ++s.ring_full;
        break;
      }
    }
    build_frame(d.requests, s.offered, psn_add(d.first_psn, s.sent + built), d.rx.slot(prod));
    rx_describe(d.rx, prod, d.requests.len, now);
    if (d.interval_ns) {
      const uint64_t lag = now - due;
      if (lag > d.late_ns) ++s.late;
      if (lag > s.max_lag) s.max_lag = lag;
    }
    d.times[s.offered] = d.interval_ns ? due : now;
    ++s.offered;
    ++built;
  }
  if (built) {
    // `sent` before the requests are published: their replies come after both.
    s.sent += built;
    store_relaxed<Scope::kDevice>(&sh.sent, s.sent);
    rx_publish_run<S>(d.rx, s.prod, built);
    s.send_ns += uint64_t(built) * (now_ns() - now);
  }
  if (built || dropped) store_relaxed<Scope::kDevice>(&sh.offered, s.offered);
  return built || dropped || acked;
}

// With acks: every reply acknowledged (and every one sent again), so that the engine's
// requester has nothing outstanding when the run ends.
RT_HD inline bool acks_sent(const FarEndDesc& d, const Sender& s, FarEndShared& sh) {
  if (!d.acks.count) return true;
  if (load_acquire<Scope::kDevice>(&sh.received) != s.sent) return false;
  return s.acked == uint32_t(load_relaxed<Scope::kDevice>(&sh.reply_mark) >> 32);
}

RT_HD inline void finish_sender(const FarEndDesc& d, const Sender& s) {
  FarEndResult& res = *d.result;
  res.sent = s.sent;
  res.dropped = s.dropped;
  res.late = s.late;
  res.ring_full = s.ring_full;
  res.max_lag_ns = s.max_lag;
  res.rx_end = s.prod;
  res.send_ns = s.send_ns;
}

// The receiver's own state.
struct Receiver {
  uint32_t ci;        // our consumer index into tx
  uint32_t seen;      // the engine's producer index when last read
  uint32_t consumed;  // what we told the engine we consumed
  uint32_t next;      // the request the next reply answers (dropped ones skipped)
  uint32_t received, wrong, bad, slow;
  uint32_t reply_psn;  // the next reply's PSN, once a reply has been decoded
  bool psn_known;
  uint32_t acks;  // with acks: ACKs due (a reply matched, or one sent again: reply_mark)
  uint64_t last_reply;
  uint32_t passes;
  uint64_t check_ns;  // each reply's time from its arrival to its check's end, added up
};

// Consumed slots go back every eighth of the ring (each release is a store and a
// fence the engine does not need sooner: it reads our index only when its ring
// looks full), and whenever we are idle.
template <Scope S>
RT_HD inline void give_back(const FarEndDesc& d, Receiver& r, bool idle) {
  const uint32_t every = d.tx.depth() >= 16 ? d.tx.depth() / 8 : 1;
  if (r.ci != r.consumed && (idle || r.ci - r.consumed >= every)) {
    tx_consume<S>(d.tx, r.ci);
    r.consumed = r.ci;
  }
}

// One frame from the engine, if there is one. True when it took one. The producer index is
// read (with acquire) only once the frames it showed last are taken.
template <Scope S>
RT_HD inline bool receive_step(const FarEndDesc& d, Receiver& r, FarEndShared& sh, uint64_t start) {
  if (r.ci == r.seen) {
    r.seen = load_acquire<S>(d.tx.producer);
    if (r.ci == r.seen) {
      give_back<S>(d, r, true);
      return false;
    }
  }
  const TxDesc* td = &d.tx.descs[r.ci & d.tx.mask()];
  const uint64_t t = now_ns();
  const uint32_t len = td->len < d.tx.slot_bytes ? td->len : d.tx.slot_bytes;
  // Stage the reply next to us (16-byte loads) before looking at it byte by byte.
  copy_wide(d.frame, d.tx.slot(r.ci), len);
  const uint32_t sent = load_relaxed<Scope::kDevice>(&sh.sent);
  if (r.received < sent) {
    // Dropped requests got no reply: the next sent one is this reply's.
    const uint32_t offered = load_relaxed<Scope::kDevice>(&sh.offered);
    while (r.next < offered && d.times[r.next] == kFarEndDropped) ++r.next;
  }
  bool ok = false;
  ReplyKind kind;
  if (r.psn_known && len == d.replies.len) {
    build_frame(d.replies, r.next, r.reply_psn, d.expect);
    ok = same_bytes(d.frame, d.expect, len);
  }
  uint32_t psn = 0;
  if (ok) {
    kind = ReplyKind::kReply;
    psn = r.reply_psn;
  } else {
    ++r.slow;
    kind = check_reply(d, r.next, d.frame, len, &ok, &psn);
  }
  if (kind == ReplyKind::kReply && d.acks.count && r.psn_known && psn_diff(psn, r.reply_psn) < 0) {
    // The engine's requester sent a reply again (its ACK was late): a responder takes it
    // once, and acknowledges where it stands again.
    store_relaxed<Scope::kDevice>(&sh.reply_mark,
                                  uint64_t(++r.acks) << 32 | psn_add(r.reply_psn, kPsnMask));
    store_release<Scope::kDevice>(&sh.received, r.received);
  } else if (kind == ReplyKind::kReply && r.received < sent) {
    // On a schedule the due time is known here; else the sender wrote the send time.
    const uint64_t from =
        d.interval_ns ? start + d.phase_ns + uint64_t(r.next) * d.interval_ns : d.times[r.next];
    d.times[r.next] = t - from;
    if (!ok) ++r.wrong;
    ++r.next;
    if (d.acks.count) {  // the ACK due first, then the count the sender acquires it with
      store_relaxed<Scope::kDevice>(&sh.reply_mark, uint64_t(++r.acks) << 32 | psn);
      store_release<Scope::kDevice>(&sh.received, ++r.received);
    } else {
      store_relaxed<Scope::kDevice>(&sh.received, ++r.received);
    }
    r.last_reply = t;
    r.reply_psn = psn_add(psn, 1);
    r.psn_known = true;
  } else if (kind != ReplyKind::kAck) {
    ++r.bad;  // undecodable, or a reply to nothing we sent
  }
  ++r.ci;
  give_back<S>(d, r, false);
  r.check_ns += now_ns() - t;
  return true;
}

RT_HD inline void finish_receiver(const FarEndDesc& d, Receiver& r, uint64_t start) {
  FarEndResult& res = *d.result;
  res.received = r.received;
  res.wrong = r.wrong;
  res.bad_frames = r.bad;
  res.slow_checks = r.slow;
  res.matched = r.next;
  res.last_reply_ns = r.last_reply;
  res.elapsed_ns = r.last_reply > start ? r.last_reply - start : 0;
  res.tx_end = r.ci;
  res.check_ns = r.check_ns;
}

// Whether the run must end now (a timeout, or the host's stop), as a status.
RT_HD inline uint32_t must_end(const FarEndDesc& d, uint64_t start, const uint32_t* stop) {
  if (now_ns() - start > d.timeout_ns) return uint32_t(FarEndStatus::kTimeout);
  if (load_acquire<Scope::kSystem>(stop)) return uint32_t(FarEndStatus::kStopped);
  return 0;
}

// The checks every run starts with; false (and status bad_config) when it cannot run.
RT_HD inline bool far_end_begin(const FarEndDesc& d) {
  FarEndResult& res = *d.result;
  res = FarEndResult{};
  res.rx_end = d.rx_start;
  res.tx_end = d.tx_start;
  if (d.requests.count == 0 || d.replies.count == 0 || d.window == 0 || d.frame == nullptr ||
      d.expect == nullptr || d.requests.len > d.rx.slot_bytes) {
    res.status = uint32_t(FarEndStatus::kBadConfig);
    return false;
  }
  return true;
}

}  // namespace far_end_detail

// A far end's two halves' state: a CPU thread's for its run; a GPU far end's between epochs
// (the kernel returns every epoch and is launched again, as the engine's:
// docs/gpu_sharing.md), in memory the host can read.
struct FarEndCarry {
  far_end_detail::Sender s;
  far_end_detail::Receiver r;
  FarEndShared sh;
  uint64_t start;  // the schedule's start, on the far end's clock
  uint32_t begun;  // the run's checks passed and its state is set
  uint32_t over;   // the run ended: its result is written
};

// A far end's first and last steps (a GPU far end's on one thread of its block): the run's
// checks and both halves' start (false: bad_config, written), and its result once both
// halves are over.
template <Scope S>
RT_HD inline bool far_end_carry_begin(const FarEndDesc& d, FarEndCarry& c) {
  using namespace far_end_detail;
  if (c.begun) return true;
  if (!far_end_begin(d)) {
    c.over = 1;
    return false;
  }
  c.s = far_end_detail::Sender{};
  c.s.prod = d.rx_start;
  c.s.released_seen = load_acquire<S>(d.rx.released);
  c.r = far_end_detail::Receiver{};
  // Frames the engine sent before this run are not replies to it: skip them.
  c.r.ci = c.r.consumed = c.r.seen = load_acquire<S>(d.tx.producer);
  tx_consume<S>(d.tx, c.r.ci);
  c.sh = FarEndShared{};
  c.start = now_ns();
  d.result->start_ns = c.start;
  c.begun = 1;
  return true;
}

RT_HD inline void far_end_carry_finish(const FarEndDesc& d, FarEndCarry& c, uint32_t status) {
  using namespace far_end_detail;
  finish_sender(d, c.s);
  finish_receiver(d, c.r, c.start);
  d.result->status = status;
  c.over = 1;
}

// A far end's two halves on one thread, to completion, timeout or stop. `stop`
// is polled with acquire at the system scope (the host sets it).
template <Scope S>
RT_HD inline void far_end_run(const FarEndDesc& d, const uint32_t* stop) {
  using namespace far_end_detail;
  FarEndCarry c{};
  if (!far_end_carry_begin<S>(d, c)) return;
  Sender& s = c.s;
  Receiver& r = c.r;
  uint32_t status = 0;
  for (uint32_t pass = 0;; ++pass) {
    if (s.offered == d.count && r.received == s.sent && acks_sent(d, s, c.sh)) {
      status = uint32_t(FarEndStatus::kDone);
      break;
    }
    if (pass % kCheckEvery == 0 && (status = must_end(d, c.start, stop)) != 0) break;
    const bool sent = send_step<S>(d, s, c.sh, c.start, r.received);
    const bool got = receive_step<S>(d, r, c.sh, c.start);
    if (!sent && !got) spin_pause();
  }
  give_back<S>(d, r, true);
  far_end_carry_finish(d, c, status);
}

// The sending half alone (a GPU far end's first warp), until the run is over for it or the
// clock passes `until` (an epoch's end: `s` carries on in the next). `sh` is shared with
// far_end_receive() on another warp.
template <Scope S>
RT_HD inline void far_end_send(const FarEndDesc& d, far_end_detail::Sender& s, FarEndShared& sh,
                               uint64_t start, const uint32_t* stop, uint64_t until) {
  using namespace far_end_detail;
  uint32_t status = 0;
  // With acks the sender stays to acknowledge the last reply.
  for (uint32_t pass = 0; s.offered < d.count || !acks_sent(d, s, sh); ++pass) {
    if (pass % kCheckEvery == 0) {
      if (load_acquire<Scope::kDevice>(&sh.receiver_over)) break;
      if ((status = must_end(d, start, stop)) != 0) break;
      if (now_ns() >= until) return;
    }
    const uint32_t received = load_relaxed<Scope::kDevice>(&sh.received);
    if (!send_step<S>(d, s, sh, start, received)) spin_pause();
  }
  store_release<Scope::kDevice>(&sh.sender_over, status ? status : uint32_t(FarEndStatus::kDone));
}

// The receiving half alone (a GPU far end's second warp). It decides when the run is over:
// returns its status then, 0 when the clock passed `until` first.
template <Scope S>
RT_HD inline uint32_t far_end_receive(const FarEndDesc& d, far_end_detail::Receiver& r,
                                      FarEndShared& sh, uint64_t start, const uint32_t* stop,
                                      uint64_t until) {
  using namespace far_end_detail;
  uint32_t status = 0;
  for (uint32_t pass = 0;; ++pass) {
    if (pass % kCheckEvery == 0) {
      if ((status = must_end(d, start, stop)) != 0) break;
      if (now_ns() >= until) return 0;
    }
    if (receive_step<S>(d, r, sh, start)) continue;
    // Idle: is the run over? (After the sender's release, `sent` is its last.)
    const uint32_t sender = load_acquire<Scope::kDevice>(&sh.sender_over);
    if (sender && r.received == load_relaxed<Scope::kDevice>(&sh.sent)) {
      status = sender;  // done, or why the sender stopped
      break;
    }
    spin_pause();
  }
  give_back<S>(d, r, true);
  store_release<Scope::kDevice>(&sh.receiver_over, status);
  return status;
}

}  // namespace rt
