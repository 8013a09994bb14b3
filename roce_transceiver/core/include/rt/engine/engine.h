// The data-path engine (Ethernet mode): the persistent loop's body.
//
// engine_step() polls a batch from the rx ring, validates each frame, runs
// the RoCE transport of one queue pair (UC or RC responder: PSN, message
// sequence, RETH placement, ACK/NAK), hands completed messages to the
// handler, transmits replies, releases the slots, then sends what the host
// queued and publishes the counters. The CPU executor calls it from a thread,
// the CUDA executor from a persistent kernel: this file is the one source.
//
// RT_HD code: no exceptions, no std containers, no virtual calls; every loop
// is bounded by a batch or a length.
#pragma once

#include "rt/byte_copy.h"
#include "rt/engine/completion.h"
#include "rt/engine/counters.h"
#include "rt/handlers/dispatch.h"
#include "rt/protocol/encode.h"
#include "rt/protocol/psn.h"
#include "rt/queues/copy_wide.h"
#include "rt/queues/rx_ring.h"
#include "rt/queues/tx_ring.h"

namespace rt {

// A registered memory region: where RDMA WRITEs with its rkey may land.
struct MemRegion {
  uint64_t va;  // the address peers use
  uint32_t rkey;
  uint32_t length;
  uint8_t* base;  // where the executor writes byte 0 of the region
};
constexpr uint32_t kMaxRegions = 8;

struct QpConfig {
  uint32_t qpn;         // our QP: packets for any other are dropped
  uint32_t peer_qpn;    // where replies and ACKs go
  Transport transport;  // RC or UC
  uint16_t pkey;        // 0xFFFF (default partition) matches any full-member key
  uint32_t rx_psn;      // first PSN expected from the peer
  uint32_t tx_psn;      // first PSN we send
};

// Read-only for the loop; built by the host before start.
struct EngineDesc {
  QpConfig qp;
  FrameSpec reply_spec;  // our addresses -> the peer's; opcode, PSN, QP set per packet
  MemRegion regions[kMaxRegions];
  uint32_t num_regions;
  HandlerDesc handler;
  uint8_t* msg_buf;  // assembles multi-packet SENDs
  uint32_t msg_buf_bytes;
  uint8_t* reply_scratch;  // the handler's output when the tx ring is full
  uint32_t reply_scratch_bytes;
  uint32_t batch;  // rx packets per step at most
  bool check_icrc;
  bool record_completions;
  RxRing rx;           // wire in
  TxRing tx;           // wire out
  RxRing host_tx;      // host -> engine: payloads to SEND to the peer
  TxRing completions;  // engine -> host: CompletionRecord per message
  Counters* counters;  // host-visible
};

// The loop's own state, in memory close to the executor.
struct EngineState {
  uint32_t rx_ci;
  uint32_t rx_released;  // slots given back so far (<= rx_ci)
  uint32_t host_ci;
  uint32_t tx_pi;
  uint32_t tx_ci_seen;  // last reading of the tx consumer index
  uint32_t comp_pi;
  uint32_t comp_ci_seen;     // last reading of the completion consumer index
  uint32_t passes;           // loop passes, for work done only every so often
  uint32_t since_publish;    // messages since the counters were last published
  uint32_t expected_psn;     // next PSN from the peer
  uint32_t send_psn;         // next PSN we send
  uint32_t msn;              // RC: messages completed, carried in AETH
  uint16_t in_message;       // 0, kSend or kWrite: the kind of the message in progress
  bool resync;               // UC: after a gap, drop until a First or Only
  bool nak_sent;             // RC: one NAK per gap (IBA C9-110)
  uint32_t msg_len;          // SEND bytes assembled so far
  uint32_t write_region;     // WRITE in progress: region index,
  uint64_t write_start_va;   // where it started,
  uint64_t write_next_va;    // where the next packet lands,
  uint32_t write_remaining;  // and what the RETH still allows
  CounterTally tally;
};

// Staging buffers for an executor whose rings sit across PCIe from it (a
// kernel polling pinned host memory): each frame is copied in, and each reply
// out, with 16-byte accesses issued together, instead of being read and written
// byte by byte over the bus. Null: the engine works in the ring slots directly.
struct Staging {
  uint8_t* rx;  // slot_bytes, 16-byte aligned
  uint8_t* tx;  // slot_bytes, 16-byte aligned
  // Set by an executor that polled and staged the next frame itself (the
  // CUDA kernel, with the whole warp): rx index + 1 of the frame in `rx`, and
  // its length and timestamp. 0: nothing staged.
  uint32_t staged = 0;
  uint32_t staged_len = 0;
  uint64_t staged_ts = 0;
};

RT_HD inline void engine_init(const EngineDesc& d, EngineState* st) {
  *st = EngineState{};
  st->expected_psn = d.qp.rx_psn & kPsnMask;
  st->send_psn = d.qp.tx_psn & kPsnMask;
}

namespace engine_detail {

enum class Verdict : uint8_t { kAccept, kDrop };

// Encode `spec` into `out` (the reserved slot, or the staging buffer that is
// then copied to it) and submit. False when encoding fails (counted).
template <Scope S>
RT_HD inline bool encode_and_submit(const EngineDesc& d, EngineState& st, const Staging* stg,
                                    uint8_t* slot, uint8_t* out, const FrameSpec& spec,
                                    ByteSpan payload) {
  const EncodeResult e = encode(spec, payload, MutByteSpan(out, d.tx.slot_bytes));
  if (!e.ok()) {
    count(st.tally, Counter::kHandlerErrors);
    return false;
  }
  if (stg) copy_wide(slot, out, e.len);
  tx_submit<S>(d.tx, st.tx_pi, e.len, 0, now_ns());
  count(st.tally, Counter::kTxPackets);
  count(st.tally, Counter::kTxBytes, e.len);
  return true;
}

// Transmit one frame of `spec`, copying `payload` in. False when the tx ring
// is full or the frame does not encode (both counted).
template <Scope S>
RT_HD inline bool transmit(const EngineDesc& d, EngineState& st, const Staging* stg,
                           const FrameSpec& spec, ByteSpan payload) {
  uint8_t* slot = tx_reserve<S>(d.tx, st.tx_pi, st.tx_ci_seen);
  if (!slot) {
    count(st.tally, Counter::kTxRingFull);
    return false;
  }
  return encode_and_submit<S>(d, st, stg, slot, stg ? stg->tx : slot, spec, payload);
}

// RC ACK or NAK (IBA 9.7.5.1): AETH syndrome and our MSN, PSN of the packet acknowledged.
template <Scope S>
RT_HD inline void send_aeth(const EngineDesc& d, EngineState& st, const Staging* stg,
                            uint8_t syndrome, uint32_t psn) {
  FrameSpec spec = d.reply_spec;
  spec.opcode = make_opcode(Transport::RC, 0x11);  // ACKNOWLEDGE
  spec.dest_qp = d.qp.peer_qpn;
  spec.psn = psn & kPsnMask;
  spec.syndrome = syndrome;
  spec.msn = st.msn & kPsnMask;
  spec.ack_req = false;
  if (transmit<S>(d, st, stg, spec, ByteSpan()))
    count(st.tally, syndrome == kAethAck ? Counter::kAcksSent : Counter::kNaksSent);
}

// PSN check of a request (IBA 9.7.5.1.1 for RC, 9.7.5.2.x for UC; DESIGN.md section 3).
template <Scope S>
RT_HD inline Verdict check_psn(const EngineDesc& d, EngineState& st, const Staging* stg,
                               const FrameView& f) {
  const uint32_t psn = f.bth_hdr().psn.get();
  const int32_t diff = psn_diff(psn, st.expected_psn);
  if (d.qp.transport == Transport::RC) {
    if (diff == 0) {
      st.nak_sent = false;
      return Verdict::kAccept;
    }
    if (diff < 0) {  // a duplicate: the ACK was lost; acknowledge again, do not execute
      count(st.tally, Counter::kDuplicates);
      send_aeth<S>(d, st, stg, kAethAck, psn);
      return Verdict::kDrop;
    }
    count(st.tally, Counter::kPsnGaps);  // ahead: packets lost; NAK once, then wait
    if (!st.nak_sent) {
      send_aeth<S>(d, st, stg, kAethNakPsnSeqError, st.expected_psn);
      st.nak_sent = true;
    }
    return Verdict::kDrop;
  }
  // UC: no ACKs, never stall (rxe check_psn). A PSN other than the expected
  // one aborts the message in progress; a First or Only resynchronises at
  // once, anything else waits for one.
  const bool starts = f.op.is(kFirst);
  if (st.resync) {
    if (!starts) return Verdict::kDrop;
    st.resync = false;
    st.expected_psn = psn;
    return Verdict::kAccept;
  }
  if (diff == 0) return Verdict::kAccept;
  // UC has no duplicates: behind or ahead, the PSN broke the sequence (a sender
  // that restarted its PSNs, as an HSB sensor does, must be heard at once).
  count(st.tally, Counter::kPsnGaps);
  st.in_message = 0;
  if (starts) {
    st.expected_psn = psn;
    return Verdict::kAccept;
  }
  st.resync = true;
  return Verdict::kDrop;
}

// First/Middle/Last order within a message (IBA 9.7.5.2.x): a Middle or Last
// needs a message in progress of the same kind; a First or Only may not
// interrupt one.
template <Scope S>
RT_HD inline Verdict check_sequence(const EngineDesc& d, EngineState& st, const Staging* stg,
                                    const FrameView& f) {
  const uint16_t kind = f.op.flags & (kSend | kWrite);
  const bool starts = f.op.is(kFirst);
  if (starts ? st.in_message == 0 : st.in_message == kind) return Verdict::kAccept;
  count(st.tally, Counter::kOpcodeSequence);
  if (d.qp.transport == Transport::RC) {
    send_aeth<S>(d, st, stg, kAethNakInvalidRequest, f.bth_hdr().psn.get());
    st.in_message = 0;
    return Verdict::kDrop;
  }
  st.in_message = 0;  // UC: the interrupted message is lost; a First/Only starts afresh
  return starts ? Verdict::kAccept : Verdict::kDrop;
}

// The region an RDMA WRITE may land in, or -1. Overflow-safe: va + len is
// never computed where it could wrap.
RT_HD inline int find_region(const EngineDesc& d, uint32_t rkey, uint64_t va, uint32_t len) {
  for (uint32_t i = 0; i < d.num_regions; ++i) {
    const MemRegion& r = d.regions[i];
    if (r.rkey != rkey) continue;
    if (va < r.va || va - r.va > r.length || len > r.length - (va - r.va)) return -1;
    return int(i);
  }
  return -1;
}

// Hand a completed message to the handler, transmit its reply, record it.
template <Scope S>
RT_HD inline void deliver(const EngineDesc& d, EngineState& st, const Staging* stg,
                          const Message& m, uint32_t psn, uint64_t rx_ts) {
  count(st.tally, Counter::kMessages);
  FrameSpec spec = d.reply_spec;
  spec.opcode = make_opcode(d.qp.transport, 0x04);  // SEND_ONLY
  spec.dest_qp = d.qp.peer_qpn;
  spec.ack_req = d.qp.transport == Transport::RC;
  const uint32_t offset = payload_offset(spec);
  uint8_t* slot = tx_reserve<S>(d.tx, st.tx_pi, st.tx_ci_seen);
  // The largest payload whose padded length and ICRC still fit the slot.
  const uint32_t room =
      d.tx.slot_bytes > offset + kIcrcBytes ? (d.tx.slot_bytes - offset - kIcrcBytes) & ~3u : 0;
  uint8_t* frame_out = slot ? (stg ? stg->tx : slot) : nullptr;
  uint8_t* out = frame_out ? frame_out + offset : d.reply_scratch;
  const int n = handle(d.handler, m, out, slot ? room : d.reply_scratch_bytes);
  uint8_t flags = m.has_imm ? kCompletionHasImm : 0;
  if (n == kHandlerError) {
    count(st.tally, Counter::kHandlerErrors);
    flags |= kCompletionHandlerError;
  } else if (n >= 0) {
    if (!slot) {
      count(st.tally, Counter::kTxRingFull);
      flags |= kCompletionReplyDropped;
    } else {
      spec.psn = st.send_psn;
      if (encode_and_submit<S>(d, st, stg, slot, frame_out, spec, ByteSpan(out, uint32_t(n)))) {
        st.send_psn = psn_add(st.send_psn, 1);
        count(st.tally, Counter::kReplies);
      } else {
        flags |= kCompletionHandlerError;
      }
    }
  }
  if (!d.record_completions) return;
  uint8_t* rec = tx_reserve<Scope::kSystem>(d.completions, st.comp_pi, st.comp_ci_seen);
  if (!rec) {
    count(st.tally, Counter::kCompletionDrops);
    return;
  }
  CompletionRecord& c = *reinterpret_cast<CompletionRecord*>(rec);
  const uint32_t half = completion_data_bytes(d.completions.slot_bytes);
  const uint32_t req_n = m.len < half ? m.len : half;
  const uint32_t rep_n = n > 0 ? (uint32_t(n) < half ? uint32_t(n) : half) : 0;
  c.request_len = m.len;
  c.reply_len = n;
  c.imm = m.imm;
  c.opcode = m.opcode;
  c.flags = flags;
  c.psn = psn;
  c.rx_timestamp_ns = rx_ts;
  c.done_timestamp_ns = now_ns();
  copy_bytes(rec + sizeof(CompletionRecord), m.data, req_n);
  copy_bytes(rec + sizeof(CompletionRecord) + half, out, rep_n);
  tx_submit<Scope::kSystem>(d.completions, st.comp_pi, sizeof(CompletionRecord) + 2 * half, 0,
                            c.done_timestamp_ns);
}

// SEND First/Middle/Last/Only: assemble, deliver on Last/Only.
template <Scope S>
RT_HD inline Verdict execute_send(const EngineDesc& d, EngineState& st, const Staging* stg,
                                  const FrameView& f, uint64_t rx_ts) {
  const uint8_t* payload = f.base + f.payload;
  const uint32_t psn = f.bth_hdr().psn.get();
  Message m{payload, f.payload_len, 0, f.op.has(kImmDt), f.bth_hdr().opcode};
  if (m.has_imm) m.imm = f.ext_hdr<ImmDt>(kImmDt).imm.get();
  if (f.op.is(kOnly)) {  // zero copy: the handler reads the rx slot
    deliver<S>(d, st, stg, m, psn, rx_ts);
    return Verdict::kAccept;
  }
  if (f.op.is(kFirst)) st.msg_len = 0;
  if (f.payload_len > d.msg_buf_bytes - st.msg_len) {
    count(st.tally, Counter::kMalformed);  // longer than the assembly buffer
    st.in_message = 0;
    if (d.qp.transport == Transport::RC) send_aeth<S>(d, st, stg, kAethNakInvalidRequest, psn);
    return Verdict::kDrop;
  }
  copy_bytes(d.msg_buf + st.msg_len, payload, f.payload_len);
  st.msg_len += f.payload_len;
  if (!f.op.is(kLast)) {
    st.in_message = kSend;
    return Verdict::kAccept;
  }
  st.in_message = 0;
  m.data = d.msg_buf;
  m.len = st.msg_len;
  deliver<S>(d, st, stg, m, psn, rx_ts);
  return Verdict::kAccept;
}

// RDMA WRITE First/Middle/Last/Only: place by RETH into a registered region;
// with immediate, deliver the written bytes to the handler.
template <Scope S>
RT_HD inline Verdict execute_write(const EngineDesc& d, EngineState& st, const Staging* stg,
                                   const FrameView& f, uint64_t rx_ts) {
  const uint32_t psn = f.bth_hdr().psn.get();
  if (f.op.has(kReth)) {
    const Reth& reth = f.ext_hdr<Reth>(kReth);
    const uint64_t va = reth.va.get();
    const uint32_t len = reth.dma_len.get();
    const int region = f.payload_len <= len ? find_region(d, reth.rkey.get(), va, len) : -1;
    if (region < 0) {
      count(st.tally, Counter::kOutOfRange);
      st.in_message = 0;
      if (d.qp.transport == Transport::RC) send_aeth<S>(d, st, stg, kAethNakRemoteAccessError, psn);
      return Verdict::kDrop;
    }
    st.write_region = uint32_t(region);
    st.write_start_va = va;
    st.write_next_va = va;
    st.write_remaining = len;
  } else if (f.payload_len > st.write_remaining) {  // Middle/Last beyond the RETH's length
    count(st.tally, Counter::kOutOfRange);
    st.in_message = 0;
    if (d.qp.transport == Transport::RC) send_aeth<S>(d, st, stg, kAethNakRemoteAccessError, psn);
    return Verdict::kDrop;
  }
  const MemRegion& r = d.regions[st.write_region];
  copy_bytes(r.base + (st.write_next_va - r.va), f.base + f.payload, f.payload_len);
  st.write_next_va += f.payload_len;
  st.write_remaining -= f.payload_len;
  st.in_message = f.op.is(kLast) ? 0 : kWrite;
  if (f.op.is(kLast) && f.op.has(kImmDt)) {
    const uint32_t written = uint32_t(st.write_next_va - st.write_start_va);
    const Message m{r.base + (st.write_start_va - r.va), written,
                    f.ext_hdr<ImmDt>(kImmDt).imm.get(), true, f.bth_hdr().opcode};
    deliver<S>(d, st, stg, m, psn, rx_ts);
  }
  return Verdict::kAccept;
}

// ACKs and NAKs for the SENDs we transmitted (RC requester side, counted only:
// this engine does not retransmit).
RT_HD inline void receive_response(EngineState& st, const FrameView& f) {
  if (!f.op.has(kAeth)) {
    count(st.tally, Counter::kUnsupported);
    return;
  }
  const uint8_t syndrome = f.ext_hdr<Aeth>(kAeth).syndrome();
  count(st.tally, (syndrome & 0x60) == 0 ? Counter::kAcksReceived : Counter::kNaksReceived);
}

template <Scope S>
RT_HD inline void receive_packet(const EngineDesc& d, EngineState& st, const Staging* stg,
                                 ByteSpan frame, uint64_t rx_ts) {
  count(st.tally, Counter::kRxPackets);
  count(st.tally, Counter::kRxBytes, frame.size);
  const DecodeResult r = decode(frame);
  if (!r.ok()) {
    count(st.tally, Counter::kMalformed);
    return;
  }
  const FrameView& f = r.frame;
  if (d.check_icrc && !icrc_ok(f)) {  // RC too: a corrupt packet is dropped silently
    count(st.tally, Counter::kIcrcErrors);
    return;
  }
  const Bth& bth = f.bth_hdr();
  if (bth.dest_qp.get() != d.qp.qpn) {
    count(st.tally, Counter::kWrongQp);
    return;
  }
  // P_Key match (IBA 10.9.3): same 15-bit key, and not both limited members.
  const uint16_t pkey = bth.pkey.get();
  if ((pkey & 0x7FFF) != (d.qp.pkey & 0x7FFF) || !((pkey | d.qp.pkey) & 0x8000)) {
    count(st.tally, Counter::kBadPkey);
    return;
  }
  if (f.op.transport != d.qp.transport) {
    count(st.tally, Counter::kMalformed);
    return;
  }
  if (f.op.is(kResponse)) {
    receive_response(st, f);
    return;
  }
  if (!(f.op.flags & (kSend | kWrite))) {  // READ and atomics: not served in this mode
    count(st.tally, Counter::kUnsupported);
    if (d.qp.transport == Transport::RC)
      send_aeth<S>(d, st, stg, kAethNakInvalidRequest, bth.psn.get());
    return;
  }
  if (check_psn<S>(d, st, stg, f) == Verdict::kDrop) return;
  if (check_sequence<S>(d, st, stg, f) == Verdict::kDrop) return;
  const Verdict v = (f.op.flags & kSend) ? execute_send<S>(d, st, stg, f, rx_ts)
                                         : execute_write<S>(d, st, stg, f, rx_ts);
  if (v == Verdict::kDrop) return;
  st.expected_psn = psn_add(bth.psn.get(), 1);
  if (d.qp.transport == Transport::RC) {
    if (f.op.is(kLast)) st.msn = psn_add(st.msn, 1);
    if (bth.ack_requested()) send_aeth<S>(d, st, stg, kAethAck, bth.psn.get());
  }
}

// The host's queued payloads, sent as SEND Only to the peer. Stops, without
// dropping, when the tx ring is full: the host ring is the backpressure.
template <Scope S>
RT_HD inline uint32_t drain_host_tx(const EngineDesc& d, EngineState& st, const Staging* stg) {
  uint32_t n = 0;
  for (; n < d.batch; ++n) {
    const RxDesc* desc = rx_poll<Scope::kSystem>(d.host_tx, st.host_ci);
    if (!desc) break;
    if (!tx_reserve<S>(d.tx, st.tx_pi, st.tx_ci_seen)) break;
    FrameSpec spec = d.reply_spec;
    spec.opcode = make_opcode(d.qp.transport, 0x04);  // SEND_ONLY
    spec.dest_qp = d.qp.peer_qpn;
    spec.ack_req = d.qp.transport == Transport::RC;
    spec.psn = st.send_psn;
    if (transmit<S>(d, st, stg, spec, ByteSpan(d.host_tx.slot(st.host_ci), desc->len))) {
      st.send_psn = psn_add(st.send_psn, 1);
      count(st.tally, Counter::kHostSends);
    }
    ++st.host_ci;
  }
  if (n) rx_release<Scope::kSystem>(d.host_tx, st.host_ci);
  return n;
}

}  // namespace engine_detail

// One pass of the loop. Returns the work done (packets and host sends), so an
// executor can back off when it is 0. S is the scope of the wire rings (rx,
// tx): kSystem when the far side is a CPU thread, kDevice when it is a GPU
// block. The host-facing rings and the counters are always kSystem.
template <Scope S>
RT_HD inline uint32_t engine_step(const EngineDesc& d, EngineState& st, Staging* stg = nullptr,
                                  uint32_t max_rx = 0xFFFFFFFFu) {
  const uint32_t limit = max_rx < d.batch ? max_rx : d.batch;
  uint32_t done = 0;
  for (; done < limit; ++done) {
    const uint8_t* frame;
    uint32_t len;
    uint64_t ts;
    if (stg && stg->staged == st.rx_ci + 1) {  // polled and staged by the executor
      frame = stg->rx;
      len = stg->staged_len;
      ts = stg->staged_ts;
      stg->staged = 0;
    } else {
      const RxDesc* desc = rx_poll<S>(d.rx, st.rx_ci);
      if (!desc) break;
      len = desc->len < d.rx.slot_bytes ? desc->len : d.rx.slot_bytes;
      ts = desc->timestamp_ns;
      frame = d.rx.slot(st.rx_ci);
      if (stg) {
        copy_wide(stg->rx, frame, len);
        frame = stg->rx;
      }
    }
    engine_detail::receive_packet<S>(d, st, stg, ByteSpan(frame, len), ts);
    ++st.rx_ci;
  }
  ++st.passes;
  // Slots go back in bulk (each release is a fence and a bus write), and at
  // once when the loop goes idle, so a producer never waits on a lazy release.
  const uint32_t held = st.rx_ci - st.rx_released;
  if (held && (done == 0 || held >= (d.rx.depth() >> 2))) {
    rx_release<S>(d.rx, st.rx_ci);
    st.rx_released = st.rx_ci;
  }
  // The host's send ring is polled every 16th pass: sends are not on the
  // request/reply critical path, and each poll may cross the bus.
  if ((st.passes & 15) == 0) done += engine_detail::drain_host_tx<S>(d, st, stg);
  st.since_publish += done;
  if (st.tally.dirty && (done == 0 || st.since_publish >= 32)) {
    publish<Scope::kSystem>(st.tally, d.counters);
    st.since_publish = 0;
  }
  return done;
}

}  // namespace rt
