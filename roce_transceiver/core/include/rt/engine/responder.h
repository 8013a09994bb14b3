// The responder: what the queue pair does with a decoded packet that no faster
// step took (the express path, the frames stream's run). Small checks over the
// queue state in the order of IBA 9.7 (and of rxe's responder): ICRC, QP, P_Key,
// transport, PSN (check_psn), message order (check_sequence), then the request:
// SENDs assembled, RDMA WRITEs placed by RETH (the frames stream's by its policy,
// frame_stream.h), atomics executed. Each returns the next state and leaves the
// packet's actions in st.act (state.h): what to place, a message to deliver, the
// RC answer. Nothing here sends, runs a handler or copies a payload; transmit.h
// carries the actions out.
#pragma once

#include "rt/engine/frame_stream.h"
#include "rt/engine/requester.h"

namespace rt {
namespace engine_detail {

enum class Verdict : uint8_t { kAccept, kDrop };

// A frame's ICRC as a team found it before the responder, or unchecked.
enum class IcrcVerdict : uint8_t { kUnchecked, kGood, kBad };

// PSN check of a request (IBA 9.7.5.1.1 for RC, 9.7.5.2.x for UC; DESIGN.md section 3).
RT_HD inline Verdict check_psn(const EngineDesc& d, EngineState& st, const FrameView& f) {
  const uint32_t psn = f.bth_hdr().psn.get();
  if (d.qp.transport == Transport::RC) {
    const PsnVerdict v = rc_psn_verdict(psn, st.expected_psn);
    if (v == PsnVerdict::kExpected) {
      st.nak_sent = false;
      return Verdict::kAccept;
    }
    if (v == PsnVerdict::kDuplicate) {  // the ACK was lost; acknowledge again, do not execute
      count(st.tally, Counter::kDuplicates);
      answer(st, kAethAck, psn);
      return Verdict::kDrop;
    }
    count(st.tally, Counter::kPsnGaps);  // ahead: packets lost; NAK once, then wait
    if (!st.nak_sent) {
      answer(st, kAethNakPsnSeqError, st.expected_psn);
      st.nak_sent = true;
    }
    return Verdict::kDrop;
  }
  // UC: no ACKs, never stall (rxe check_psn). A PSN other than the expected
  // one aborts the message in progress; a First or Only resynchronises at
  // once, anything else waits for one.
  const bool starts = f.op.is(kFirst);
  if (st.resync) {
    if (!starts) {
      count(st.tally, Counter::kResyncDrops);
      return Verdict::kDrop;
    }
    st.resync = false;
    st.expected_psn = psn;
    return Verdict::kAccept;
  }
  if (psn == st.expected_psn || psn_wraps_at_20_bits(psn, st.expected_psn)) return Verdict::kAccept;
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

// A request the responder refuses (IBA 9.7.5.2): counted as `why`, the message in
// progress abandoned and, on RC, NAKed with `syndrome`.
RT_HD inline Verdict refuse(const EngineDesc& d, EngineState& st, Counter why, uint8_t syndrome,
                            uint32_t psn) {
  count(st.tally, why);
  st.in_message = 0;
  if (d.qp.transport == Transport::RC) answer(st, syndrome, psn);
  return Verdict::kDrop;
}

// First/Middle/Last order within a message (IBA 9.7.5.2.x): a Middle or Last
// needs a message in progress of the same kind; a First or Only may not
// interrupt one.
RT_HD inline Verdict check_sequence(const EngineDesc& d, EngineState& st, const FrameView& f) {
  if (sequence_ok(st.in_message, f.op)) return Verdict::kAccept;
  const uint32_t psn = f.bth_hdr().psn.get();
  refuse(d, st, Counter::kOpcodeSequence, kAethNakInvalidRequest, psn);
  // UC: the interrupted message is lost; a First/Only starts afresh.
  return d.qp.transport != Transport::RC && f.op.is(kFirst) ? Verdict::kAccept : Verdict::kDrop;
}

// P_Key match (IBA 10.9.3): the same 15-bit key, and not both limited members.
RT_HD inline bool pkey_matches(uint16_t pkey, uint16_t ours) {
  return (pkey & 0x7FFF) == (ours & 0x7FFF) && ((pkey | ours) & 0x8000);
}

// The region of ours an RDMA WRITE may land in, or -1 (rc_responder.h).
RT_HD inline int find_region(const EngineDesc& d, uint32_t rkey, uint64_t va, uint32_t len) {
  return ::rt::find_region(d.regions, d.num_regions, rkey, va, len);
}

// The message a packet completes, for the handler: delivered after its placement.
RT_HD inline void deliver_after(EngineState& st, const Message& m, uint32_t psn, uint64_t rx_ts) {
  st.act.deliver = true;
  st.act.msg = m;
  st.act.msg_psn = psn;
  st.act.msg_ts = rx_ts;
}

// SEND First/Middle/Last/Only: assembled in the message buffer, delivered on Last/Only.
RT_HD inline Verdict accept_send(const EngineDesc& d, EngineState& st, const FrameView& f,
                                 uint64_t rx_ts) {
  const uint8_t* payload = f.base + f.payload;
  const uint32_t psn = f.bth_hdr().psn.get();
  Message m{payload, f.payload_len, 0, f.op.has(kImmDt), f.bth_hdr().opcode};
  if (m.has_imm) m.imm = f.ext_hdr<ImmDt>(kImmDt).imm.get();
  if (f.op.is(kOnly)) {  // zero copy: the handler reads the rx slot
    deliver_after(st, m, psn, rx_ts);
    predict_from(st.pred, f);  // the next one will likely look the same
    return Verdict::kAccept;
  }
  if (f.op.is(kFirst)) st.msg_len = 0;
  if (f.payload_len > d.msg_buf_bytes - st.msg_len)  // longer than the assembly buffer
    return refuse(d, st, Counter::kMalformed, kAethNakInvalidRequest, psn);
  place(st, d.msg_buf + st.msg_len, payload, f.payload_len);
  st.msg_len += f.payload_len;
  if (!f.op.is(kLast)) {
    st.in_message = kSend;
    return Verdict::kAccept;
  }
  st.in_message = 0;
  m.data = d.msg_buf;
  m.len = st.msg_len;
  deliver_after(st, m, psn, rx_ts);
  return Verdict::kAccept;
}

// RDMA WRITE First/Middle/Last/Only: placed by RETH into a registered region; with
// immediate, the written bytes delivered to the handler once placed.
RT_HD inline Verdict accept_write(const EngineDesc& d, EngineState& st, const FrameView& f,
                                  uint64_t rx_ts) {
  const uint32_t psn = f.bth_hdr().psn.get();
  if (!write_accept(st.write, d.regions, d.num_regions, f))  // no region holds the RETH's
    return refuse(d, st, Counter::kOutOfRange, kAethNakRemoteAccessError, psn);
  if (d.handler.kind == HandlerKind::kFrames)
    return frames_write(d, st, f, rx_ts) ? Verdict::kAccept : Verdict::kDrop;
  const MemRegion& r = d.regions[st.write.region];
  place(st, write_destination(st.write, d.regions), f.base + f.payload, f.payload_len);
  write_advance(st.write, f.payload_len);
  st.in_message = f.op.is(kLast) ? 0 : kWrite;
  if (f.op.is(kLast) && f.op.has(kImmDt)) {
    const uint32_t written = uint32_t(st.write.next_va - st.write.start_va);
    const Message m{r.base + (st.write.start_va - r.va), written,
                    f.ext_hdr<ImmDt>(kImmDt).imm.get(), true, f.bth_hdr().opcode};
    deliver_after(st, m, psn, rx_ts);
    if (f.op.is(kOnly)) predict_from(st.pred, f);  // NVQLink's shape: the next one alike
  }
  return Verdict::kAccept;
}

// The ATOMIC ACKNOWLEDGE of the atomic at `psn` (IBA 9.7.5.1.2): the value before.
RT_HD inline void answer_atomic(EngineState& st, uint32_t psn, uint64_t orig) {
  st.act.response = Response::kAtomicAck;
  st.act.resp_psn = psn;
  st.act.resp_msn = st.msn;
  st.act.orig = orig;
}

// RC FETCH_ADD / COMPARE_SWAP (rc_responder.h: atomic_execute) on a signal word the peer
// increments after its WRITEs (GPUNetIO's put_signal), its PSN checked. The atomic is the
// decision's one execution: the value before is the answer, and a duplicate of the last
// atomic gets the same one (decide), not a second execution.
RT_HD RT_COLD inline void accept_atomic(const EngineDesc& d, EngineState& st, const FrameView& f) {
  const uint32_t psn = f.bth_hdr().psn.get();
  const AtomicOutcome a = atomic_execute(d.regions, d.num_regions, f);
  if (a.status != AtomicStatus::kDone) {
    count(st.tally, Counter::kOutOfRange);
    answer(st, atomic_nak(a.status), psn);
    return;
  }
  count(st.tally, Counter::kAtomics);
  st.atomic = AtomicReplay{psn, a.orig, true};
  st.expected_psn = psn_add(psn, 1);
  st.msn = psn_add(st.msn, 1);
  answer_atomic(st, psn, a.orig);
}

// ACKs and NAKs for the packets we sent: counted, and, with qp.retransmit, the requester's
// (requester.h: what they acknowledge, what goes again).
RT_HD inline void receive_response(const EngineDesc& d, EngineState& st, const FrameView& f) {
  if (!f.op.has(kAeth)) {
    count(st.tally, Counter::kUnsupported);
    return;
  }
  const uint8_t syndrome = f.ext_hdr<Aeth>(kAeth).syndrome();
  count(st.tally,
        aeth_kind(syndrome) == AethKind::kAck ? Counter::kAcksReceived : Counter::kNaksReceived);
  if (!rc_reliable(d)) return;
  rc_take_response(d, st, syndrome, f.bth_hdr().psn.get());
  if (aeth_kind(syndrome) == AethKind::kAck) predict_peer_ack(*d.peer_ack, f);  // express_ack's
}

// With qp.retransmit, a request that completes a message needs room for its reply in the
// window; without it, an RNR NAK (IBA 9.7.5.2.8): the peer sends it again after our timer,
// and nothing of it is executed now.
RT_HD inline bool refuse_not_ready(const EngineDesc& d, EngineState& st, const FrameView& f) {
  if (!rc_reliable(d) || d.handler.kind == HandlerKind::kFrames || !f.op.is(kLast) ||
      rc_window_room(d, st, 1) || st.rc.error)
    return false;
  if (f.op.flags & kWrite && !f.op.has(kImmDt)) return false;  // no message for the handler
  count(st.tally, Counter::kRnrNaksSent);
  answer(st, rnr_nak_syndrome(uint8_t(d.rc_rnr_timer)), f.bth_hdr().psn.get());
  return true;
}

// The responder's decision about a decoded packet (`r`, of `frame_len` bytes), in the
// order of the ring: counted, checked, and its actions left in st.act (which the caller
// has carried out, or cleared, since the last decision).
RT_HD RT_COLD inline void decide(const EngineDesc& d, EngineState& st, const DecodeResult& r,
                                 uint32_t frame_len, uint64_t rx_ts, IcrcVerdict icrc) {
  count(st.tally, Counter::kRxPackets);
  count(st.tally, Counter::kRxBytes, frame_len);
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
  if (!pkey_matches(bth.pkey.get(), d.qp.pkey)) {
    count(st.tally, Counter::kBadPkey);
    return;
  }
  if (f.op.transport != d.qp.transport) {
    count(st.tally, Counter::kMalformed);
    return;
  }
  if (f.op.is(kResponse)) {
    receive_response(d, st, f);
    return;
  }
  const uint32_t psn = bth.psn.get();
  if (f.op.is(kAtomic)) {
    // A duplicate of the last atomic gets its answer again; it is not executed twice.
    if (atomic_is_replay(st.atomic, psn, st.expected_psn)) {
      count(st.tally, Counter::kDuplicates);
      answer_atomic(st, st.atomic.psn, st.atomic.orig);
      return;
    }
    if (check_psn(d, st, f) == Verdict::kDrop) return;
    if (st.in_message != 0) {  // an atomic inside a message in progress: out of sequence
      refuse(d, st, Counter::kOpcodeSequence, kAethNakInvalidRequest, psn);
      return;
    }
    accept_atomic(d, st, f);
    return;
  }
  if (!(f.op.flags & (kSend | kWrite))) {  // READ: not served in this mode
    count(st.tally, Counter::kUnsupported);
    if (d.qp.transport == Transport::RC) answer(st, kAethNakInvalidRequest, psn);
    return;
  }
  if (check_psn(d, st, f) == Verdict::kDrop) return;
  if (check_sequence(d, st, f) == Verdict::kDrop) return;
  if (refuse_not_ready(d, st, f)) return;
  const Verdict v =
      (f.op.flags & kSend) ? accept_send(d, st, f, rx_ts) : accept_write(d, st, f, rx_ts);
  if (v == Verdict::kDrop) return;
  st.expected_psn = psn_add(psn, 1);
  if (d.qp.transport == Transport::RC) {
    if (f.op.is(kLast)) st.msn = psn_add(st.msn, 1);
    if (bth.ack_requested()) answer(st, kAethAck, psn);  // after the data and the reply
  }
}

}  // namespace engine_detail
}  // namespace rt
