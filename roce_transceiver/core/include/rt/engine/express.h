// The engine's front: how a team takes a frame off the rx ring (arrive), and
// the express path for SEND Onlys whose header the queue pair predicted
// (prediction.h). The express path accepts only what the general path
// (general.h) would, and changes the state the same way.
#pragma once

#include "rt/engine/general.h"
#include "rt/team.h"

namespace rt {
namespace engine_detail {

// A frame taken from the rx ring, where the team reads it.
struct Arrival {
  const uint8_t* frame;  // null: nothing arrived
  uint32_t len;
  uint64_t ts;
  // Read in the same trip as its descriptor, not after it: good only once
  // its ICRC matched; otherwise it is read again (stage_ordered).
  bool speculative;
};

// Team-wide: copy a frame of `len` bytes from its rx slot into a staging
// buffer next to the team, fresh from memory (16-byte aligned, rounded up).
template <class Team>
RT_HD inline void stage_frame(const Team& t, uint8_t* staging, const uint8_t* slot, uint32_t len) {
  // A lane's loads go out eight at a time before their stores: a long frame is a few
  // round trips to the ring, not one per 16 bytes.
  constexpr uint32_t kInFlight = 8;
  const uint32_t chunks = (len + kChunkBytes - 1) / kChunkBytes;
  auto* out = reinterpret_cast<Chunk16*>(staging);
  for (uint32_t base = t.lane(); base < chunks; base += kInFlight * t.size()) {
    Chunk16 v[kInFlight];
    for (uint32_t k = 0; k < kInFlight; ++k)
      if (base + k * t.size() < chunks) v[k] = load_fresh16(slot + (base + k * t.size()) * 16);
    for (uint32_t k = 0; k < kInFlight; ++k)
      if (base + k * t.size() < chunks) out[base + k * t.size()] = v[k];
  }
  t.sync();
}

// Team-wide: copy the frame of rx slot `ci` into the staging buffer, after an
// acquire on the descriptor the leader already read.
template <Scope S, class Team>
RT_HD inline void stage_ordered(const Team& t, const EngineDesc& d, uint32_t ci, Staging* stg,
                                uint32_t len) {
  if (t.leader()) fence_acquire<S>();
  t.sync();  // every lane's reads after the leader's acquire
  stage_frame(t, stg->rx, d.rx.slot(ci), len);
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
  record_completion(t, d, st, m, r, req.psn, a.ts);  // after the doorbell, by every lane
  if (t.leader()) {
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
}  // namespace rt
