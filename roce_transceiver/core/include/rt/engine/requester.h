// The RC requester of the engine's transmit side (qp.retransmit): every packet we send on an
// RC queue pair (a handler's reply, a host send) is kept until the peer acknowledges it, and
// sent again on a NAK (PSN sequence error), after an RNR NAK's timer, or when no
// acknowledgement came within qp.ack_timeout_us (go-back-N from the oldest, IBA 9.7.6).
//
// A packet is queued when its PSN is given: its frame lies in the replay store (a slot a PSN of
// the window, in the engine's own memory) and send_psn moves past it. The pump puts queued
// packets on the wire in PSN order, from `next_tx` up to send_psn, as the tx ring has room;
// a retransmission moves next_tx back to the oldest packet not acknowledged (una). The
// express path sends a reply itself only when nothing is queued before it (next_tx ==
// send_psn), and keeps its copy in the store the same way.
//
// The window is what the store holds: a request that would need a reply while qp.window
// packets are outstanding is refused with an RNR NAK (the peer sends it again after its
// timer; IBA 9.7.5.2.8), and the host's sends wait in their ring. Retries past qp.retry_count
// (timeouts and sequence NAKs without progress between them), RNR NAKs past qp.rnr_retry (7:
// for ever), or a NAK that is not about order (remote access, invalid request) put the
// requester in the error state (rc_errors): nothing more is sent, and each reply after is
// counted in rc_dropped, its completion record flagged reply dropped.
#pragma once

#include "rt/engine/state.h"
#include "rt/protocol/rc_requester.h"
#include "rt/queues/copy_wide.h"

namespace rt {

// The most packets a requester keeps (qp.window): each is a tx slot in the engine's memory.
constexpr uint32_t kMaxRcWindow = 4096;

namespace engine_detail {

RT_HD inline bool rc_reliable(const EngineDesc& d) {
  return d.rc_retransmit && d.qp.transport == Transport::RC;
}

// Packets sent (or queued) and not yet acknowledged.
RT_HD inline uint32_t rc_outstanding(const EngineState& st) {
  return uint32_t(psn_diff(st.send_psn, st.rc.una));
}

// Room for `n` more packets in the window (always, without the requester).
RT_HD inline bool rc_window_room(const EngineDesc& d, const EngineState& st, uint32_t n) {
  return !rc_reliable(d) || rc_outstanding(st) + n <= d.rc_window;
}

// The express path may send `n` replies itself: room in the window, nothing queued ahead of
// them, the requester not in error.
RT_HD inline bool rc_express_ok(const EngineDesc& d, const EngineState& st, uint32_t n) {
  return !rc_reliable(d) ||
         (!st.rc.error && st.rc.next_tx == st.send_psn && rc_outstanding(st) + n <= d.rc_window);
}

// The store's slot for the packet at `psn`.
RT_HD inline uint8_t* rc_replay_slot(const EngineDesc& d, uint32_t psn) {
  return d.replay + size_t(psn & (d.rc_window - 1)) * d.tx.slot_bytes;
}

// Leader: the packet at `psn` (its frame already in its store slot) is `len` bytes long.
// `sent`: the caller put it on the wire too (next_tx moves with send_psn).
RT_HD inline void rc_kept(const EngineDesc& d, EngineState& st, uint32_t psn, uint32_t len,
                          bool sent) {
  d.replay_len[psn & (d.rc_window - 1)] = len;
  if (sent && st.rc.next_tx == psn) st.rc.next_tx = st.rc.sent_end = psn_add(psn, 1);
}

// Leader: the error state. What is queued is not sent; the store is the error's.
RT_HD RT_COLD inline void rc_fail(EngineState& st) {
  if (!st.rc.error) count(st.tally, Counter::kRcErrors);
  count(st.tally, Counter::kRcDropped, rc_outstanding(st));
  st.rc.error = true;
  st.rc.una = st.rc.next_tx = st.send_psn;
  st.rc.deadline_ns = 0;
}

// Leader: queued packets onto the wire, in PSN order, while the tx ring has room and no RNR
// timer runs. Returns the packets sent.
template <Scope S>
RT_HD RT_COLD inline uint32_t rc_pump(const EngineDesc& d, EngineState& st, uint64_t now) {
  uint32_t sent = 0;
  if (st.rc.error || (st.rc.resume_ns && now < st.rc.resume_ns)) return 0;
  st.rc.resume_ns = 0;
  while (st.rc.next_tx != st.send_psn) {
    uint8_t* slot = tx_reserve<S>(d.tx, st.tx_pi, st.tx_ci_seen);
    if (!slot) break;
    const uint32_t psn = st.rc.next_tx;
    const uint32_t len = d.replay_len[psn & (d.rc_window - 1)];
    copy_wide(slot, rc_replay_slot(d, psn), len);
    tx_submit<S>(d.tx, st.tx_pi, len, 0, now);
    count_all(st.tally, CountOf{Counter::kTxPackets, 1}, CountOf{Counter::kTxBytes, len});
    // Behind the highest PSN sent so far: a packet sent before, sent again.
    if (psn_before(psn, st.rc.sent_end))
      count(st.tally, Counter::kRcRetransmits);
    else
      st.rc.sent_end = psn_add(psn, 1);
    st.rc.next_tx = psn_add(psn, 1);
    ++sent;
  }
  return sent;
}

// Leader: the packet of `spec` (its PSN send_psn) and `payload` queued and put on the wire
// as the pump can. False: in the error state (counted as dropped), or it does not encode
// (counted as a handler error).
template <Scope S>
RT_HD RT_COLD inline bool rc_queue(const EngineDesc& d, EngineState& st, const FrameSpec& spec,
                                   ByteSpan payload) {
  if (st.rc.error) {
    count(st.tally, Counter::kRcDropped);
    return false;
  }
  const EncodeResult e =
      encode(spec, payload, MutByteSpan(rc_replay_slot(d, spec.psn), d.tx.slot_bytes));
  if (!e.ok()) {
    count(st.tally, Counter::kHandlerErrors);
    return false;
  }
  rc_kept(d, st, spec.psn, e.len, false);
  st.send_psn = psn_add(spec.psn, 1);
  rc_pump<S>(d, st, now_ns());
  return true;
}

// Leader: an ACK, NAK or RNR NAK at `psn` for what we sent (rc_requester.h's verdict).
RT_HD RT_COLD inline void rc_take_response(const EngineDesc& d, EngineState& st, uint8_t syndrome,
                                           uint32_t psn) {
  if (st.rc.error) return;
  const ResponseVerdict v = rc_response_verdict(syndrome, psn, st.rc.una, st.send_psn);
  if (v.action == ResponseAction::kStale) return;
  if (v.acked) {  // progress: the retries start again, and so does the timer
    st.rc.una = psn_add(st.rc.una, v.acked);
    if (psn_before(st.rc.next_tx, st.rc.una)) st.rc.next_tx = st.rc.una;
    st.rc.retries = st.rc.rnr_retries = 0;
    st.rc.deadline_ns = 0;
    count(st.tally, Counter::kRcAcked, v.acked);
  }
  switch (v.action) {
    case ResponseAction::kResend:
      if (++st.rc.retries > d.rc_retry) return rc_fail(st);
      if (psn_before(v.from, st.rc.next_tx)) st.rc.next_tx = v.from;
      st.rc.deadline_ns = 0;
      return;
    case ResponseAction::kRnrWait:
      count(st.tally, Counter::kRnrNaksReceived);
      if (d.rc_rnr_retry != kRnrRetryForever && ++st.rc.rnr_retries > d.rc_rnr_retry)
        return rc_fail(st);
      st.rc.next_tx = v.from;
      st.rc.resume_ns = now_ns() + v.wait_ns;
      st.rc.deadline_ns = 0;
      return;
    case ResponseAction::kFatal: return rc_fail(st);
    default: return;
  }
}

// Leader, at the end of a pass: the timer of the oldest packet outstanding (started at the
// first look that finds one; a timeout sends again from it), then what is queued. Returns the
// work done: packets sent, and a timeout (so that the loop, idle until then, settles again
// and publishes what it counted).
template <Scope S>
RT_HD RT_COLD inline uint32_t rc_service(const EngineDesc& d, EngineState& st) {
  if (st.rc.error || rc_outstanding(st) == 0) return 0;
  const uint64_t now = now_ns();
  uint32_t work = 0;
  if (st.rc.resume_ns == 0 && st.rc.next_tx != st.rc.una) {  // something on the wire
    if (st.rc.deadline_ns == 0) {
      st.rc.deadline_ns = now + uint64_t(d.rc_timeout_us) * 1000;
    } else if (now >= st.rc.deadline_ns) {
      count(st.tally, Counter::kRcTimeouts);
      if (++st.rc.retries > d.rc_retry) {
        rc_fail(st);
        return 1;
      }
      st.rc.next_tx = st.rc.una;
      st.rc.deadline_ns = 0;
      work = 1;
    }
  }
  return work + rc_pump<S>(d, st, now);
}

}  // namespace engine_detail
}  // namespace rt
