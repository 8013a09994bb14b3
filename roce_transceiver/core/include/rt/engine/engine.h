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
#include "rt/engine/frames.h"
#include "rt/engine/prediction.h"
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
  FramesDesc frames;  // handler kFrames
  uint8_t* msg_buf;   // assembles multi-packet SENDs
  uint32_t msg_buf_bytes;
  uint8_t* reply_scratch;  // the handler's output when the tx ring is full
  uint32_t reply_scratch_bytes;
  uint32_t batch;  // rx packets per step at most
  bool check_icrc;
  bool record_completions;
  bool express;        // predicted SEND Onlys skip decoding (prediction.h)
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
  uint32_t idle_passes;      // passes in a row that found nothing
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
  Prediction pred;    // the express path's view of the queue pair
  FrameState frames;  // handler kFrames: the frame in progress
};

// Staging buffers for an executor whose rings sit across the bus from it (a
// kernel and pinned host memory, or device memory and a kernel's shared
// memory): the team copies each frame in, and each reply out, with 16-byte
// accesses issued together, instead of reading and writing the ring byte by
// byte. Null: the engine works in the ring slots directly.
struct Staging {
  uint8_t* rx;  // slot_bytes, 16-byte aligned
  uint8_t* tx;  // slot_bytes, 16-byte aligned
};

// Our SEND Only to the peer; its PSN is set per packet.
RT_HD inline FrameSpec reply_send_spec(const EngineDesc& d) {
  FrameSpec spec = d.reply_spec;
  spec.opcode = make_opcode(d.qp.transport, 0x04);  // SEND_ONLY
  spec.dest_qp = d.qp.peer_qpn;
  spec.ack_req = d.qp.transport == Transport::RC;
  return spec;
}

RT_HD inline void engine_init(const EngineDesc& d, EngineState* st) {
  *st = EngineState{};
  st->expected_psn = d.qp.rx_psn & kPsnMask;
  st->send_psn = d.qp.tx_psn & kPsnMask;
  predict_reply(st->pred, reply_send_spec(d));
}

namespace engine_detail {

// The tx slot at tx_pi holds a frame of `len` bytes: submit it and count it.
template <Scope S>
RT_HD inline void submit_counted(const EngineDesc& d, EngineState& st, uint32_t len) {
  tx_submit<S>(d.tx, st.tx_pi, len, 0, now_ns());
  count(st.tally, Counter::kTxPackets);
  count(st.tally, Counter::kTxBytes, len);
}

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
  submit_counted<S>(d, st, e.len);
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

// The handler's answer to one message, and where its reply frame is built.
struct HandlerReply {
  uint8_t* slot;   // the tx slot reserved for the reply, or null: the ring is full
  uint8_t* frame;  // where the reply frame is built: the slot, or the staging buffer
  uint8_t* out;    // the reply payload (in `frame`, or the scratch buffer)
  int n;           // what the handler returned
  uint8_t flags;   // the completion's flags so far
};

// Team-wide: run the handler on a completed message; its reply payload goes
// `offset` bytes into the reply frame. Every lane gets the same answer.
// Counts nothing (count_handled() does): the express path runs handlers
// before its ICRC verdict, and drops what they wrote if the frame is bad.
template <Scope S, class Team = SoloTeam>
RT_HD inline HandlerReply run_handler(const EngineDesc& d, EngineState& st, const Staging* stg,
                                      const Message& m, uint32_t offset, const Team& t = Team{}) {
  uint64_t slot = 0;
  if (t.leader()) slot = reinterpret_cast<uintptr_t>(tx_reserve<S>(d.tx, st.tx_pi, st.tx_ci_seen));
  HandlerReply r;
  r.slot = reinterpret_cast<uint8_t*>(t.from_leader(slot));
  // The largest payload whose padded length and ICRC still fit the slot.
  const uint32_t room =
      d.tx.slot_bytes > offset + kIcrcBytes ? (d.tx.slot_bytes - offset - kIcrcBytes) & ~3u : 0;
  r.frame = r.slot ? (stg ? stg->tx : r.slot) : nullptr;
  r.out = r.frame ? r.frame + offset : d.reply_scratch;
  r.n = handle_team(t, d.handler, m, r.out, r.slot ? room : d.reply_scratch_bytes);
  r.flags = m.has_imm ? kCompletionHasImm : 0;
  if (r.n == kHandlerError)
    r.flags |= kCompletionHandlerError;
  else if (r.n >= 0 && !r.slot)
    r.flags |= kCompletionReplyDropped;
  return r;
}

// Leader: count a message the handler took, and what became of its reply.
RT_HD inline void count_handled(EngineState& st, const HandlerReply& r) {
  count(st.tally, Counter::kMessages);
  if (r.n == kHandlerError)
    count(st.tally, Counter::kHandlerErrors);
  else if (r.n >= 0 && !r.slot)
    count(st.tally, Counter::kTxRingFull);
}

// The host's record of one message: request and reply bytes, as much as fits.
RT_HD RT_COLD inline void record_completion(const EngineDesc& d, EngineState& st, const Message& m,
                                            const HandlerReply& r, uint32_t psn, uint64_t rx_ts) {
  if (!d.record_completions) return;
  uint8_t* rec = tx_reserve<Scope::kSystem>(d.completions, st.comp_pi, st.comp_ci_seen);
  if (!rec) {
    count(st.tally, Counter::kCompletionDrops);
    return;
  }
  CompletionRecord& c = *reinterpret_cast<CompletionRecord*>(rec);
  const uint32_t half = completion_data_bytes(d.completions.slot_bytes);
  const uint32_t req_n = m.len < half ? m.len : half;
  const uint32_t rep_n = r.n > 0 ? (uint32_t(r.n) < half ? uint32_t(r.n) : half) : 0;
  c.request_len = m.len;
  c.reply_len = r.n;
  c.imm = m.imm;
  c.opcode = m.opcode;
  c.flags = r.flags;
  c.psn = psn;
  c.rx_timestamp_ns = rx_ts;
  c.done_timestamp_ns = now_ns();
  copy_bytes(rec + sizeof(CompletionRecord), m.data, req_n);
  copy_bytes(rec + sizeof(CompletionRecord) + half, r.out, rep_n);
  tx_submit<Scope::kSystem>(d.completions, st.comp_pi, sizeof(CompletionRecord) + 2 * half, 0,
                            c.done_timestamp_ns);
}

// Hand a completed message to the handler, transmit its reply, record it.
template <Scope S>
RT_HD inline void deliver(const EngineDesc& d, EngineState& st, const Staging* stg,
                          const Message& m, uint32_t psn, uint64_t rx_ts) {
  FrameSpec spec = reply_send_spec(d);
  HandlerReply r = run_handler<S>(d, st, stg, m, payload_offset(spec));
  count_handled(st, r);
  if (r.n >= 0 && r.slot) {
    spec.psn = st.send_psn;
    if (encode_and_submit<S>(d, st, stg, r.slot, r.frame, spec, ByteSpan(r.out, uint32_t(r.n)))) {
      st.send_psn = psn_add(st.send_psn, 1);
      count(st.tally, Counter::kReplies);
    } else {
      r.flags |= kCompletionHandlerError;
    }
  }
  record_completion(d, st, m, r, psn, rx_ts);
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
    predict_from(st.pred, f);  // the next one will likely look the same
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

// The frames handler's WRITE (frames.h), after the RETH checks of
// execute_write: the page must be in the frames region and hold the packet,
// and not be held by the host; the frame's account is kept, and its end is
// left pending for the team (finish_frame). False: dropped (counted).
template <Scope S>
RT_HD inline bool frames_write(const EngineDesc& d, EngineState& st, const Staging* stg,
                               const FrameView& f, uint64_t rx_ts) {
  FrameState& fs = st.frames;
  const FramesDesc& fd = d.frames;
  const MemRegion& r = d.regions[st.write_region];
  const uint32_t psn = f.bth_hdr().psn.get();
  const uint64_t at = st.write_next_va - r.va;  // region offset of this packet's first byte
  const uint32_t page = uint32_t(at / fd.page_bytes);
  if (st.write_region != fd.region || page >= fd.pages ||
      at % fd.page_bytes + f.payload_len > fd.page_bytes) {
    count(st.tally, Counter::kOutOfRange);  // frames live in whole pages of their region
    st.in_message = 0;
    if (d.qp.transport == Transport::RC) send_aeth<S>(d, st, stg, kAethNakRemoteAccessError, psn);
    return false;
  }
  if (!fs.open) {
    fs.open = true;
    fs.dropped = false;
    fs.bytes = 0;
    fs.page = page;
    fs.psn_first = psn;
    fs.packets = 0;
    fs.rx_first_ns = rx_ts;
    fs.meta = HsbMetadataFields{};
    ++fs.packets;
  } else if (psn != fs.last_psn) {  // the same PSN right again is a duplicate: not a packet more
    if (psn_diff(psn, fs.psn_first) < 0) fs.psn_first = psn;  // a late one from the start
    ++fs.packets;
  }
  fs.last_psn = psn;
  fs.rx_last_ns = rx_ts;
  const bool end = f.op.is(kLast) && f.op.has(kImmDt);
  if (page_busy(fs, page)) {  // held by the host: freed since?
    if (load_acquire<Scope::kSystem>(&fd.page_free[page]))
      set_page_busy(fs, page, false);
    else
      fs.dropped = true;
  }
  if (!page_busy(fs, page)) {
    copy_bytes(r.base + at, f.base + f.payload, f.payload_len);
    const bool meta = end && fd.metadata;  // the record, not frame data
    const uint64_t reach = at % fd.page_bytes + f.payload_len;
    if (!meta && reach > fs.bytes) fs.bytes = reach;
    if (meta && f.payload_len >= sizeof(HsbFrameMetadata))
      fs.meta = hsb_metadata_decode(*reinterpret_cast<const HsbFrameMetadata*>(f.base + f.payload));
  } else {
    count(st.tally, Counter::kFramePageBusy);
  }
  st.write_next_va += f.payload_len;
  st.write_remaining -= f.payload_len;
  st.in_message = f.op.is(kLast) ? 0 : kWrite;
  if (end) {
    fs.open = false;
    fs.imm = f.ext_hdr<ImmDt>(kImmDt).imm.get();
    fs.end_page = hsb_imm_page(fs.imm);
    fs.end_psn = psn;
    // Lost: the PSNs the frame spans that never arrived (reordered ones did).
    const int32_t span = psn_diff(psn, fs.psn_first) + 1;
    fs.lost = span > int32_t(fs.packets) ? uint32_t(span) - fs.packets : 0;
    if (fs.dropped)
      count(st.tally, Counter::kFramesDropped);
    else
      fs.pending = true;
  }
  return true;
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
  if (d.handler.kind == HandlerKind::kFrames)
    return frames_write<S>(d, st, stg, f, rx_ts) ? Verdict::kAccept : Verdict::kDrop;
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

// A frame's ICRC as a team found it before the general path, or unchecked.
enum class IcrcVerdict : uint8_t { kUnchecked, kGood, kBad };

template <Scope S>
RT_HD RT_COLD inline void receive_packet(const EngineDesc& d, EngineState& st, const Staging* stg,
                                         ByteSpan frame, uint64_t rx_ts,
                                         IcrcVerdict icrc = IcrcVerdict::kUnchecked) {
  count(st.tally, Counter::kRxPackets);
  count(st.tally, Counter::kRxBytes, frame.size);
  const DecodeResult r = decode(frame);
  if (!r.ok()) {
    count(st.tally, Counter::kMalformed);
    return;
  }
  const FrameView& f = r.frame;
  const bool icrc_bad = icrc == IcrcVerdict::kUnchecked ? !icrc_ok(f) : icrc == IcrcVerdict::kBad;
  if (d.check_icrc && icrc_bad) {  // RC too: a corrupt packet is dropped silently
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
RT_HD RT_COLD inline uint32_t drain_host_tx(const EngineDesc& d, EngineState& st,
                                            const Staging* stg) {
  uint32_t n = 0;
  for (; n < d.batch; ++n) {
    const RxDesc* desc = rx_poll<Scope::kSystem>(d.host_tx, st.host_ci);
    if (!desc) break;
    if (!tx_reserve<S>(d.tx, st.tx_pi, st.tx_ci_seen)) break;
    FrameSpec spec = reply_send_spec(d);
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

// What a warp reads of a slot together with its descriptor: 16 bytes a lane.
constexpr uint32_t kReadAheadBytes = 512;

// A frame taken from the rx ring, where the team reads it.
struct Arrival {
  const uint8_t* frame;  // null: nothing arrived
  uint32_t len;
  uint64_t ts;
  // Read in the same trip as its descriptor, not after it: good only once
  // its ICRC matched; otherwise it is read again (stage_ordered).
  bool speculative;
};

// Team-wide: copy the frame of rx slot `ci` into the staging buffer, after an
// acquire on the descriptor the leader already read.
template <Scope S, class Team>
RT_HD inline void stage_ordered(const Team& t, const EngineDesc& d, uint32_t ci, Staging* stg,
                                uint32_t len) {
  if (t.leader()) fence_acquire<S>();
  t.sync();  // every lane's reads after the leader's acquire
  const uint8_t* slot = d.rx.slot(ci);
  for (uint32_t c = t.lane(); c * kChunkBytes < len; c += t.size())
    reinterpret_cast<Chunk16*>(stg->rx)[c] = load_fresh16(slot + c * kChunkBytes);
  t.sync();
}

// Team-wide: the frame at st.rx_ci if its producer published it. With
// staging, the leader reads the descriptor while every lane reads its chunk
// of the slot, all in one bus round trip; such a frame is speculative.
template <Scope S, class Team>
RT_HD inline Arrival arrive(const Team& t, const EngineDesc& d, const EngineState& st,
                            Staging* stg) {
  const uint32_t ci = st.rx_ci;
  const RxDesc* desc = &d.rx.descs[ci & d.rx.mask()];
  uint32_t ready = 0, len = 0;
  uint64_t ts = 0;
  if (!stg) {
    if (t.leader() && rx_poll<S>(d.rx, ci)) {
      ready = 1;
      len = desc->len;
      ts = desc->timestamp_ns;
    }
  } else {
    Chunk16 head{};
    if (t.leader()) head = load_fresh16(reinterpret_cast<const uint8_t*>(desc));
    const uint32_t ahead = (d.rx.slot_bytes < kReadAheadBytes ? d.rx.slot_bytes : kReadAheadBytes);
    const uint8_t* slot = d.rx.slot(ci);
    for (uint32_t c = t.lane(); c * kChunkBytes < ahead; c += t.size())
      reinterpret_cast<Chunk16*>(stg->rx)[c] = load_fresh16(slot + c * kChunkBytes);
    if (t.leader() && (uint32_t(head.lo >> 32) & kRxPhaseBit) == d.rx.phase(ci)) {
      ready = 1;
      len = uint32_t(head.lo);
      ts = head.hi;
    }
  }
  if (!t.from_leader(ready)) return Arrival{};
  len = t.from_leader(len);
  len = len < d.rx.slot_bytes ? len : d.rx.slot_bytes;
  if (!stg) return Arrival{d.rx.slot(ci), len, t.from_leader(ts), false};
  ts = t.from_leader(ts);
  t.sync();
  // Unchecked by an ICRC, or longer than what was read ahead: read it again, in order.
  if (!d.check_icrc || len > kReadAheadBytes) {
    stage_ordered<S>(t, d, ci, stg, len);
    return Arrival{stg->rx, len, ts, false};
  }
  return Arrival{stg->rx, len, ts, true};
}

// Team-wide: the end of a frame the leader left pending (frames_write): the
// CRC of its page by the whole team, then, on the leader, its record for the
// host. The page is the host's from then until it is released.
template <Scope S, class Team>
RT_HD inline void finish_frame(const Team& t, const EngineDesc& d, EngineState& st) {
  FrameState& fs = st.frames;
  const FramesDesc& fd = d.frames;
  const bool meta = fd.metadata;
  // With metadata the sensor's byte count is the frame: a frame that lost
  // packets then fails its CRC instead of looking short and whole.
  const uint64_t bytes =
      meta && fs.meta.bytes_written <= fd.page_bytes ? fs.meta.bytes_written : fs.bytes;
  const uint8_t* page = d.regions[fd.region].base + uint64_t(fs.page) * fd.page_bytes;
  const uint32_t crc = crc32_team(t, page, bytes);
  if (t.leader()) {
    fs.pending = false;
    uint8_t* slot = d.record_completions
                        ? tx_reserve<Scope::kSystem>(d.completions, st.comp_pi, st.comp_ci_seen)
                        : nullptr;
    if (!slot || completion_data_bytes(d.completions.slot_bytes) < sizeof(FrameRecord)) {
      count(st.tally, Counter::kCompletionDrops);  // the host fell behind: no record, page kept
      count(st.tally, Counter::kFramesDropped);
    } else {
      FrameRecord rec{};
      rec.bytes = bytes;
      rec.ptp_s = fs.meta.ptp_s;
      rec.ptp_ns = fs.meta.ptp_ns;
      rec.rx_first_ns = fs.rx_first_ns;
      rec.rx_last_ns = fs.rx_last_ns;
      rec.frame_number = meta ? fs.meta.frame_number : fs.completed;
      rec.page = fs.page;
      rec.crc32 = crc;
      rec.metadata_crc32 = fs.meta.crc32;
      rec.psn_first = fs.psn_first;
      rec.psn_last = fs.end_psn;
      rec.packets = fs.packets;
      rec.packets_lost = fs.lost;
      rec.flags = (fs.end_page == fs.page ? kFramePageMatch : 0u) |
                  (meta ? kFrameHasMetadata : 0u) |
                  (meta && crc == fs.meta.crc32 ? kFrameCrcOk : 0u) |
                  (meta && bytes == fs.bytes ? kFrameBytesOk : 0u);
      if (meta && !(rec.flags & kFrameCrcOk)) count(st.tally, Counter::kFrameCrcErrors);
      fd.page_free[fs.page] = 0;  // the host's now; published by the record's release below
      set_page_busy(fs, fs.page, true);
      CompletionRecord& c = *reinterpret_cast<CompletionRecord*>(slot);
      c = CompletionRecord{};
      c.request_len = uint32_t(sizeof(FrameRecord));
      c.reply_len = kNoReply;
      c.imm = fs.imm;
      c.opcode = 0x2B;
      c.flags = kCompletionFrame | kCompletionHasImm;
      c.psn = fs.end_psn;
      c.rx_timestamp_ns = fs.rx_last_ns;
      c.done_timestamp_ns = now_ns();
      copy_bytes(slot + sizeof(CompletionRecord), reinterpret_cast<const uint8_t*>(&rec),
                 uint32_t(sizeof rec));
      tx_submit<Scope::kSystem>(d.completions, st.comp_pi,
                                uint32_t(sizeof(CompletionRecord) + sizeof rec), 0,
                                c.done_timestamp_ns);
      count(st.tally, Counter::kFrames);
      ++fs.completed;
    }
  }
  t.sync();
}

// Team-wide, for a frame the general path takes: its ICRC checked by every
// lane (a long WRITE costs one thread tens of microseconds on a GPU). The
// leader decodes to find the layout; a frame that does not decode is left to
// the general path, which says why.
template <class Team>
RT_HD inline IcrcVerdict icrc_verdict(const Team& t, const EngineDesc& d, const uint8_t* frame,
                                      uint32_t len) {
  if constexpr (Team::kLanes == 1) {
    return IcrcVerdict::kUnchecked;  // one thread: receive_packet's own check is as fast
  } else {
    // Below a read-ahead's worth one thread's CRC costs about what the
    // leader's extra decode would.
    if (!d.check_icrc || len <= kReadAheadBytes) return IcrcVerdict::kUnchecked;
    uint32_t ok = 0, l3 = 0, l3_len = 0, version = 0, masked = 0, end = 0;
    if (t.leader()) {
      const DecodeResult r = decode(ByteSpan(frame, len));
      if (r.ok()) {
        const FrameView& f = r.frame;
        ok = 1;
        l3 = f.l3;
        l3_len = f.l3_len;
        version = f.ip_version;
        masked = f.bth + uint32_t(sizeof(Bth)) - f.l3;
        end = f.icrc;
      }
    }
    if (!t.from_leader(ok)) return IcrcVerdict::kUnchecked;
    const IcrcLayout l{t.from_leader(l3),     t.from_leader(l3_len), t.from_leader(version),
                       t.from_leader(masked), t.from_leader(end),    nullptr};
    if (!icrc_team_fits(l)) return IcrcVerdict::kUnchecked;
    const bool good = icrc_team(t, frame, l) == load_le32(frame + l.end);
    return good ? IcrcVerdict::kGood : IcrcVerdict::kBad;
  }
}

// Team-wide: take a predicted SEND Only (prediction.h) the short way:
// compare the header, check the ICRC with every lane, run the handler, patch
// the reply template. True when the frame was taken; false leaves it, and
// the state, to the general path. Everything counted and changed here is what
// receive_packet() counts and changes for the same frame.
template <Scope S, class Team>
RT_HD inline bool express(const Team& t, const EngineDesc& d, EngineState& st, Staging* stg,
                          const Arrival& a) {
  if (!d.express || st.in_message || st.resync || st.pred.reply.len == 0) return false;
  if ((reinterpret_cast<uintptr_t>(a.frame) & 15) || d.rx.slot_bytes < kPredictBytes) return false;
  ExpressRequest req;
  if (!predicted(t, st.pred, a.frame, a.len, &req) || req.psn != st.expected_psn) return false;
  // The reply is built before the request's ICRC is known, so both CRCs are
  // taken in one pass; a request that fails its ICRC leaves its reply unsent
  // and its counters untouched (handlers are pure: handler.h).
  if (stg) {  // the template, a chunk a lane, before the handler writes the payload behind it
    copy_wide_team(t, stg->tx, st.pred.reply.bytes, st.pred.reply.len);
    t.sync();
  }
  const Message m{a.frame + req.payload, req.payload_len, 0, false,
                  a.frame[req.layout.l3 + req.layout.masked - uint32_t(sizeof(Bth))]};
  const HandlerReply r = run_handler<S>(d, st, stg, m, st.pred.reply.len, t);
  uint32_t reply_len = 0;
  if (t.leader() && r.n >= 0 && r.slot)
    reply_len = patch_reply(st.pred, r.frame, uint32_t(r.n), st.send_psn, stg != nullptr);
  reply_len = t.from_leader(reply_len);
  t.sync();  // the leader's header and the handler's payload, seen by every lane
  uint8_t* slot = d.tx.slot(st.tx_pi);
  uint8_t* out = stg ? stg->tx : slot;
  IcrcLayout l = st.pred.reply.layout;
  l.end = reply_len - kIcrcBytes;
  l.masks = st.pred.reply.icrc_masks;
  const bool verify = d.check_icrc || a.speculative;
  uint32_t rx_icrc = 0, tx_icrc = 0;
  if (verify && reply_len) {
    icrc_team2(t, a.frame, req.layout, out, l, &rx_icrc, &tx_icrc);
  } else if (verify) {
    rx_icrc = icrc_team(t, a.frame, req.layout);
  } else if (reply_len) {
    tx_icrc = icrc_team(t, out, l);
  }
  if (verify && rx_icrc != load_le32(a.frame + req.layout.end)) return false;
  if (t.leader()) {
    count(st.tally, Counter::kRxPackets);
    count(st.tally, Counter::kRxBytes, a.len);
    count(st.tally, Counter::kExpress);
    count_handled(st, r);
  }
  if (reply_len) {
    if (t.leader()) store_le32(out + l.end, tx_icrc);
    t.sync();
    if (stg) {
      copy_wide_team(t, slot, out, reply_len);
      t.sync();  // every lane's stores before the leader's doorbell
    }
    if (t.leader()) {
      submit_counted<S>(d, st, reply_len);
      st.send_psn = psn_add(st.send_psn, 1);
      count(st.tally, Counter::kReplies);
    }
  }
  if (t.leader()) {
    record_completion(d, st, m, r, req.psn, a.ts);
    st.expected_psn = psn_add(req.psn, 1);
    if (d.qp.transport == Transport::RC) {
      st.nak_sent = false;
      st.msn = psn_add(st.msn, 1);
    }
  }
  t.sync();
  return true;
}

}  // namespace engine_detail

// Idle passes before the loop gives slots back and publishes its counters.
constexpr uint32_t kSettlePasses = 8;

// One pass of the loop, run by a team (team.h): a CPU thread alone, or a
// warp. Returns the work done (packets and host sends), so an executor can
// back off when it is 0. S is the scope of the wire rings (rx, tx): kSystem
// when the far side is a CPU thread, kDevice when it is a GPU block. The
// host-facing rings and the counters are always kSystem. `st` is shared by the
// team (a warp keeps it in shared memory).
template <Scope S, class Team>
RT_HD inline uint32_t engine_step(const Team& t, const EngineDesc& d, EngineState& st,
                                  Staging* stg = nullptr, uint32_t max_rx = 0xFFFFFFFFu) {
  using namespace engine_detail;
  const uint32_t limit = max_rx < d.batch ? max_rx : d.batch;
  uint32_t done = 0;
  for (; done < limit; ++done) {
    const Arrival a = arrive<S>(t, d, st, stg);
    if (!a.frame) break;
    if (!express<S>(t, d, st, stg, a)) {
      if (a.speculative) stage_ordered<S>(t, d, st.rx_ci, stg, a.len);
      const IcrcVerdict icrc = icrc_verdict(t, d, a.frame, a.len);
      if (t.leader()) receive_packet<S>(d, st, stg, ByteSpan(a.frame, a.len), a.ts, icrc);
      t.sync();
      if (st.frames.pending) finish_frame<S>(t, d, st);
    }
    if (t.leader()) ++st.rx_ci;
    t.sync();
  }
  if (t.leader()) {
    ++st.passes;
    // The host's send ring is polled every 16th pass: sends are not on the
    // request/reply critical path, and each poll may cross the bus.
    if ((st.passes & 15) == 0) done += drain_host_tx<S>(d, st, stg);
    st.idle_passes = done ? 0 : st.idle_passes + 1;
    // Once the loop has been idle a few passes: not in the pass right after a
    // reply, where the next request is likely on its way.
    const bool settled = st.idle_passes == kSettlePasses;
    // Slots go back in bulk (each release is a fence and a bus write), and
    // when the loop settles, so a producer never waits long on a lazy release.
    const uint32_t held = st.rx_ci - st.rx_released;
    if (held && (settled || held >= (d.rx.depth() >> 2))) {
      rx_release<S>(d.rx, st.rx_ci);
      st.rx_released = st.rx_ci;
    }
    st.since_publish += done;
    if (st.tally.dirty && (settled || st.since_publish >= 32)) {
      publish<Scope::kSystem>(st.tally, d.counters);
      st.since_publish = 0;
    }
  }
  done = t.from_leader(done);
  t.sync();
  return done;
}

// A CPU thread's pass: the team of one.
template <Scope S>
inline uint32_t engine_step(const EngineDesc& d, EngineState& st, Staging* stg = nullptr,
                            uint32_t max_rx = 0xFFFFFFFFu) {
  return engine_step<S>(SoloTeam{}, d, st, stg, max_rx);
}

}  // namespace rt
