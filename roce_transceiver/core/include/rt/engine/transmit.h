// The engine's transmit side: what the responder decided (responder.h, st.act)
// carried out by the team (carry_out): the payload placed, a completed message
// run by the handler with its reply encoded into a reserved tx slot and
// submitted, its completion record, then the RC answer (ACK, NAK or ATOMIC
// ACKNOWLEDGE); and the host's own sends (drain_host_tx). Nothing here decides:
// every PSN, MSN and syndrome comes from the decision.
#pragma once

#include "rt/engine/records.h"
#include "rt/engine/requester.h"
#include "rt/queues/copy_wide.h"

namespace rt {
namespace engine_detail {

// The tx slot at tx_pi holds a frame of `len` bytes: submit it and count it.
template <Scope S>
RT_HD inline void submit_counted(const EngineDesc& d, EngineState& st, uint32_t len) {
  tx_submit<S>(d.tx, st.tx_pi, len, 0, now_ns());
  count_all(st.tally, CountOf{Counter::kTxPackets, 1}, CountOf{Counter::kTxBytes, len});
}

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

// The RC answer the decision left (IBA 9.7.5.1): an ACK or NAK of `resp_psn` with the MSN
// it recorded, or an ATOMIC ACKNOWLEDGE with the value before (9.7.5.1.2).
template <Scope S>
RT_HD inline void send_response(const EngineDesc& d, EngineState& st, const Staging* stg,
                                const Actions& a) {
  if (a.response == Response::kAtomicAck) {
    const FrameSpec spec =
        atomic_ack_spec(d.reply_spec, d.qp.peer_qpn, a.resp_psn, a.resp_msn, a.orig);
    if (transmit<S>(d, st, stg, spec, ByteSpan())) count(st.tally, Counter::kAcksSent);
  } else if (transmit<S>(d, st, stg, ack_spec(d, a.syndrome, a.resp_psn, a.resp_msn), ByteSpan())) {
    count(st.tally, a.syndrome == kAethAck ? Counter::kAcksSent : Counter::kNaksSent);
  }
}

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

// Leader, with qp.retransmit: a handler's reply queued with the requester (requester.h),
// which sends it, and again until the peer acknowledges it. The tx ring being full drops
// nothing here: the reply waits in the replay store (the window's room was the decision's).
template <Scope S>
RT_HD RT_COLD inline void queue_reply(const EngineDesc& d, EngineState& st, HandlerReply& r,
                                      FrameSpec& spec) {
  count(st.tally, Counter::kMessages);
  if (r.n == kHandlerError) count(st.tally, Counter::kHandlerErrors);
  if (r.n < 0) return;
  r.flags &= uint8_t(~kCompletionReplyDropped);
  spec.psn = st.send_psn;
  if (rc_queue<S>(d, st, spec, ByteSpan(r.out, uint32_t(r.n))))
    count(st.tally, Counter::kReplies);
  else
    r.flags |= st.rc.error ? kCompletionReplyDropped : kCompletionHandlerError;
}

// Team-wide: hand a completed message to the handler (handle_team: by the team), then, on the
// leader, transmit its reply and record it.
template <Scope S, class Team = SoloTeam>
RT_HD inline void deliver(const EngineDesc& d, EngineState& st, const Staging* stg,
                          const Message& m, uint32_t psn, uint64_t rx_ts, const Team& t = Team{}) {
  FrameSpec spec = reply_send_spec(d);
  HandlerReply r = run_handler<S>(d, st, stg, m, payload_offset(spec), t);
  if (!t.leader()) return;
  if (rc_reliable(d)) {
    queue_reply<S>(d, st, r, spec);
  } else {
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
  }
  record_completion(SoloTeam{}, d, st, m, r, psn, rx_ts);
}

// The host's queued payloads, sent as SEND Only to the peer. Stops, without
// dropping, when the tx ring is full: the host ring is the backpressure.
template <Scope S>
RT_HD RT_COLD inline uint32_t drain_host_tx(const EngineDesc& d, EngineState& st,
                                            const Staging* stg) {
  uint32_t n = 0;
  const bool reliable = rc_reliable(d);
  for (; n < d.batch; ++n) {
    const RxDesc* desc = rx_poll<Scope::kSystem>(d.host_tx, st.host_ci);
    if (!desc) break;
    // With the requester the window is the backpressure (what is in it waits its turn),
    // except in the error state, where each send is counted as dropped.
    if (reliable ? !st.rc.error && !rc_window_room(d, st, 1)
                 : !tx_reserve<S>(d.tx, st.tx_pi, st.tx_ci_seen))
      break;
    FrameSpec spec = reply_send_spec(d);
    spec.psn = st.send_psn;
    const ByteSpan payload(d.host_tx.slot(st.host_ci), desc->len);
    if (reliable) {
      if (rc_queue<S>(d, st, spec, payload)) count(st.tally, Counter::kHostSends);
    } else if (transmit<S>(d, st, stg, spec, payload)) {
      st.send_psn = psn_add(st.send_psn, 1);
      count(st.tally, Counter::kHostSends);
    }
    ++st.host_ci;
  }
  if (n) rx_release<Scope::kSystem>(d.host_tx, st.host_ci);
  return n;
}

// Leader: the decision's sends, in the order the wire wants them: a delivered message's
// reply (and record), then the RC answer. Clears them.
template <Scope S>
RT_HD inline void send_actions(const EngineDesc& d, EngineState& st, const Staging* stg) {
  Actions& a = st.act;
  if (a.deliver) deliver<S>(d, st, stg, a.msg, a.msg_psn, a.msg_ts);
  if (a.response != Response::kNone) send_response<S>(d, st, stg, a);
  a.deliver = false;
  a.response = Response::kNone;
}

// Team-wide: the decision's message to a user's handler, which runs on every lane of the team
// (custom.h; on the GPU the warp, whose calls a user's module serves on a warp of its own:
// cuda/handler_warp.cuh). Out of line: the general path's, kept from the express path's
// registers (ptxas: 52 bytes of spills in the linked one-warp kernel when inlined).
template <Scope S, class Team>
RT_HD RT_COLD inline void deliver_to_user(const Team& t, const EngineDesc& d, EngineState& st,
                                          const Staging* stg) {
  deliver<S>(d, st, stg, st.act.msg, st.act.msg_psn, st.act.msg_ts, t);
  t.sync();  // every lane done with st.act.msg before the leader clears it
  if (t.leader()) st.act.deliver = false;
}

// Team-wide: the actions of the decision just made (st.act): the placement by every lane, a
// user's handler's message by the team (deliver_to_user), then, on the leader, what it sends
// (send_actions: a built-in handler's reply, then the RC answer). A team leaves st.act clear
// for the next decision.
template <Scope S, class Team>
RT_HD inline void carry_out(const Team& t, const EngineDesc& d, EngineState& st,
                            const Staging* stg) {
  const uint32_t n = st.act.place_len;
  if (n) {
    copy_bytes_team(t, st.act.place_dst, st.act.place_src, n);
    t.sync();  // every lane's stores (and reads of st.act) before a handler reads them
  }
  if (kRunsUserHandler && d.handler.kind == HandlerKind::kCustom) {
    const bool deliver = st.act.deliver;
    t.sync();  // every lane has read it before the leader clears it (found by the host warp
               // under TSan)
    if (deliver) deliver_to_user<S>(t, d, st, stg);
  }
  if (t.leader()) {
    if (n) st.act.place_len = 0;
    if (st.act.deliver || st.act.response != Response::kNone) send_actions<S>(d, st, stg);
  }
  t.sync();
}

}  // namespace engine_detail
}  // namespace rt
