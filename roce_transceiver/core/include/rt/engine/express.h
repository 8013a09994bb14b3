// The engine's front: how a team takes a frame off the rx ring (arrive), and
// the express path for the requests whose header the queue pair predicted
// (prediction.h): SEND Onlys and WRITE Onlys with Immediate, UC or RC, with
// or without an ACK request. The express path accepts only what the responder
// (responder.h) would, changes the state the same way and sends the same frames
// in the same order as its actions carried out (transmit.h).
#pragma once

#include "rt/engine/responder.h"
#include "rt/engine/transmit.h"
#include "rt/engine/word_frame.h"
#include "rt/protocol/icrc_words.h"
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

// Team-wide: rx sequence number `seq`, whose descriptor another thread's acquire saw
// published (a poll of the crew's): its length and stamp read after an acquire, the frame
// copied into `staging` next to the team, or (null) read in place.
template <Scope S, class Team>
RT_HD inline Arrival arrive_at(const Team& t, const EngineDesc& d, uint32_t seq, uint8_t* staging) {
  uint32_t len = 0;
  uint64_t ts = 0;
  if (t.leader()) {
    fence_acquire<S>();  // after the poll's acquire, by another team of the crew
    const Chunk16 head =
        load_fresh16(reinterpret_cast<const uint8_t*>(&d.rx.descs[seq & d.rx.mask()]));
    len = uint32_t(head.lo);
    ts = head.hi;
  }
  len = t.from_leader(len);
  len = len < d.rx.slot_bytes ? len : d.rx.slot_bytes;
  ts = t.from_leader(ts);
  t.sync();  // every lane's reads after the leader's acquire
  if (!staging) return Arrival{d.rx.slot(seq), len, ts, false};
  stage_frame(t, staging, d.rx.slot(seq), len);
  return Arrival{staging, len, ts, false};
}

// Team-wide: rx sequence number `seq`, which a poll of the crew's saw published, read in one
// bus round trip: the leader's load of its descriptor beside every lane's of its first
// kReadAheadBytes, into `staging`, with no fence of its own. Such a frame is speculative (it
// may still be the slot's last one): the express path's checks of its ICRC and PSN take it or
// leave it to arrive_at(), which reads it again in order. One longer than the read-ahead, or
// unchecked, is read in order now.
template <Scope S, class Team>
RT_HD inline Arrival arrive_ahead_at(const Team& t, const EngineDesc& d, uint32_t seq,
                                     uint8_t* staging) {
  Chunk16 head{};
  if (t.leader())
    head = load_fresh16(reinterpret_cast<const uint8_t*>(&d.rx.descs[seq & d.rx.mask()]));
  const uint32_t ahead = d.rx.slot_bytes < kReadAheadBytes ? d.rx.slot_bytes : kReadAheadBytes;
  const uint8_t* slot = d.rx.slot(seq);
  for (uint32_t c = t.lane(); c * kChunkBytes < ahead; c += t.size())
    reinterpret_cast<Chunk16*>(staging)[c] = load_fresh16(slot + c * kChunkBytes);
  uint32_t len = t.from_leader(uint32_t(head.lo));
  len = len < d.rx.slot_bytes ? len : d.rx.slot_bytes;
  const uint64_t ts = t.from_leader(head.hi);
  t.sync();
  if (!d.check_icrc || len > kReadAheadBytes) return arrive_at<S>(t, d, seq, staging);
  return Arrival{staging, len, ts, true};
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

// Team-wide, for a frame the responder takes: its ICRC checked by every
// lane (a long WRITE costs one thread tens of microseconds on a GPU). The
// leader decodes to find the layout; a frame that does not decode is left to
// the responder, which says why.
template <class Team>
RT_HD inline IcrcVerdict icrc_verdict(const Team& t, const EngineDesc& d, const uint8_t* frame,
                                      uint32_t len) {
  if constexpr (Team::kLanes == 1) {
    return IcrcVerdict::kUnchecked;  // one thread: the responder's own check is as fast
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

// Where a predicted WRITE Only with Immediate lands.
struct WriteTarget {
  uint8_t* dst;     // the region's byte at the RETH's address
  uint64_t va;      // the RETH's address
  uint32_t len;     //   and DMA length
  uint32_t region;  // the region's index
  uint32_t imm;
};

// The RETH checks of accept_write (rkey, bounds, a payload within the DMA
// length) on a predicted WRITE: true with `w` filled when it may land; false
// leaves it to the responder, which counts and NAKs it. Every lane reads the
// same bytes and finds the same.
RT_HD inline bool write_target(const EngineDesc& d, const Prediction& p, const uint8_t* frame,
                               const ExpressRequest& req, WriteTarget* w) {
  if (d.handler.kind == HandlerKind::kFrames) return false;  // frames_write keeps frames' accounts
  const Reth& reth = *reinterpret_cast<const Reth*>(frame + p.reth);
  w->va = reth.va.get();
  w->len = reth.dma_len.get();
  const int region =
      req.payload_len <= w->len ? find_region(d, reth.rkey.get(), w->va, w->len) : -1;
  if (region < 0) return false;
  const MemRegion& r = d.regions[region];
  w->region = uint32_t(region);
  w->dst = r.base + (w->va - r.va);
  w->imm = reinterpret_cast<const ImmDt*>(frame + p.reth + sizeof(Reth))->imm.get();
  return true;
}

// Leader: whether the tx ring has `n` slots free from st.tx_pi on, by the last reading of
// its consumer index, read again when that looks full.
template <Scope S>
RT_HD inline bool tx_fits(const EngineDesc& d, EngineState& st, uint32_t n) {
  if (n == 0 || st.tx_pi + n - 1 - st.tx_ci_seen < d.tx.depth()) return true;
  return tx_reserve<S>(d.tx, st.tx_pi + n - 1, st.tx_ci_seen) != nullptr;
}

// Team-wide: whether the tx ring has `n` slots free from st.tx_pi on, by the
// last reading of its consumer index; read again (by the leader, across the
// bus) only when that looks full. Without them the responder's path decides
// what goes (it counts what does not).
template <Scope S, class Team>
RT_HD inline bool tx_room(const Team& t, const EngineDesc& d, EngineState& st, uint32_t n) {
  if (st.tx_pi + n - 1 - st.tx_ci_seen < d.tx.depth()) return true;
  t.sync();  // every lane's reading before the leader's (found by the host warp under TSan)
  uint32_t room = 0;
  if (t.leader()) room = tx_fits<S>(d, st, n);
  return t.from_leader(room) != 0;
}

// What express() reports to a profiler (bench ops) between its pieces:
// mark(k) after piece k. The engine's own is empty.
struct NoMarks {
  RT_HD void mark(uint32_t) const {}
};

// The pieces express() marks, in order.
enum ExpressPiece : uint32_t {
  kPieceMatch,     // header, PSN and lengths compared, the request's ICRC checked, room found
  kPieceHandler,   // a WRITE placed, the handler run (an echo's reply is read in place)
  kPiecePatch,     // the reply (and an RC ACK) loaded a word a lane, lengths and PSN patched in
  kPieceIcrc,      // the reply's ICRC (and the ACK's), from the registers
  kPieceCopy,      // the reply and the ACK stored in their tx slots
  kPieceDoorbell,  // submitted
  kPieceBooks,     // counters, completion, PSN, MSN: after the doorbell
  kExpressPieces
};

// A request the express path takes: what its match found, then what its handler left.
struct ExpressTake {
  ExpressRequest req;
  WriteTarget w;
  Message m;
  HandlerReply r;
  const uint8_t* body;  // the reply's bytes as laid out in its frame (its payload at offset)
  uint32_t reply_len;   // 0: no reply (the handler's kNoReply or error)
  uint32_t ack_len;     // 0: no ACK
  bool write, ack;
  // The tx slots it takes: its reply's and its ACK's.
  RT_HD uint32_t frames() const { return uint32_t(reply_len ? 1 : 0) + uint32_t(ack ? 1 : 0); }
};

// Team-wide: does the request in `a` take the express path, at PSN `psn`? Its header,
// lengths, PSN and (when checked) ICRC compared in one pass (predicted()), an RC ACK's
// template there when it asks for one, a WRITE's RETH good. Fills x->req, w, write, ack.
// Changes nothing: false leaves the frame, and the state, to the responder.
template <class Team>
RT_HD inline bool express_match(const Team& t, const EngineDesc& d, const EngineState& st,
                                const Arrival& a, uint32_t psn, ExpressTake* x) {
  if (!d.express || st.in_message || st.resync || st.pred.reply.len == 0) return false;
  if ((reinterpret_cast<uintptr_t>(a.frame) & 15) || d.rx.slot_bytes < kPredictBytes) return false;
  const Prediction& p = st.pred;
  const bool verify = d.check_icrc || a.speculative;
  if (!predicted(t, p.expect, p.care, a.frame, a.len, psn, verify, &x->req)) return false;
  x->ack = d.qp.transport == Transport::RC && x->req.ack_req;
  if (x->ack && p.ack.len == 0) return false;
  x->write = p.reth != 0;
  return !x->write || write_target(d, p, a.frame, x->req, &x->w);
}

// Team-wide: a matched request's WRITE placed and its handler run, the reply's payload
// written at `out` + the reply header's length (where it lies in its frame), `slot`
// the reply's tx slot when known (a handler's HandlerReply). The request is taken: its
// ICRC matched, so a WRITE's data lands before its handler reads it from the region (as
// the responder has it).
template <class Team>
RT_HD inline void express_handle(const Team& t, const EngineDesc& d, const Prediction& p,
                                 const Arrival& a, uint8_t* out, uint8_t* slot, ExpressTake* x) {
  const ExpressRequest& req = x->req;
  if (x->write) copy_bytes_team(t, x->w.dst, a.frame + req.payload, req.payload_len);
  const uint8_t opcode = a.frame[req.layout.l3 + req.layout.masked - uint32_t(sizeof(Bth))];
  x->m = x->write ? Message{x->w.dst, req.payload_len, x->w.imm, true, opcode}
                  : Message{a.frame + req.payload, req.payload_len, 0, false, opcode};
  const Message& m = x->m;
  // The largest payload whose padded length and ICRC still fit the slot.
  const uint32_t offset = p.reply.len;
  const uint32_t room =
      d.tx.slot_bytes > offset + kIcrcBytes ? (d.tx.slot_bytes - offset - kIcrcBytes) & ~3u : 0;
  // The echo's reply is its request's payload: read where it lies in the request (a
  // SEND's, a word-aligned distance from the reply's) when the reply is short, not copied.
  const uint32_t echo_len = offset + m.len + ((4 - (m.len & 3)) & 3) + kIcrcBytes;
  const bool echo_in_place = d.handler.kind == HandlerKind::kEcho && !x->write && m.len <= room &&
                             ((req.payload - offset) & 3) == 0 && echo_len <= kWordFrameBytes;
  HandlerReply& r = x->r;
  r.slot = slot;
  r.frame = out;
  x->body = out;
  if (echo_in_place) {
    r.out = const_cast<uint8_t*>(m.data);  // only read (a completion record's copy)
    r.n = int(m.len);
    x->body = m.data - offset;
  } else {
    r.out = out + offset;
    r.n = handle_team(t, d.handler, m, r.out, room);  // ends with the team synchronised
  }
  r.flags = uint8_t((m.has_imm ? kCompletionHasImm : 0) |
                    (r.n == kHandlerError ? kCompletionHandlerError : 0));
  const uint32_t n = r.n >= 0 ? uint32_t(r.n) : 0;
  x->reply_len = r.n >= 0 ? offset + n + ((4 - (n & 3)) & 3) + kIcrcBytes : 0;
  x->ack_len = x->ack ? p.ack.len + kIcrcBytes : 0;
}

// Team-wide: a taken request's reply (PSN `send_psn`) stored in tx slot `slot` and its ACK
// (MSN `msn`) in `ack_slot`, each built a word a lane in registers (word_frame.h): the
// templates and the payload loaded once, patched and checksummed there, stored once. A
// reply longer than the registers hold has its head stored over `out`, where the handler
// wrote the rest, and its ICRC computed over memory; `staged`: `out` is not the slot, so the
// frame is copied there. Ends with the team synchronised (every lane's stores done).
// `keep` (qp.retransmit): the requester's replay slot, which gets the reply's frame too.
template <class Team, class Marks>
RT_HD inline void express_build(const Team& t, const Prediction& p, const ExpressTake& x,
                                uint8_t* out, bool staged, uint8_t* slot, uint8_t* ack_slot,
                                uint32_t send_psn, uint32_t msn, const Marks& marks,
                                uint8_t* keep = nullptr) {
  const uint32_t offset = p.reply.len;
  const uint32_t reply_len = x.reply_len;
  const uint32_t n = x.r.n >= 0 ? uint32_t(x.r.n) : 0;
  WordFrame<Team> rf, af;
  if (reply_len) {
    rf.load(t, p.reply.bytes, offset, x.body, offset + n);
    patch_reply(t, p, rf, n, send_psn);
  }
  if (x.ack) {
    af.load(t, p.ack.bytes, p.ack.len, nullptr, 0);
    patch_ack(t, p, af, x.req.psn, msn);
  }
  marks.mark(kPiecePatch);
  IcrcLayout l = p.reply.layout;
  l.end = reply_len - kIcrcBytes;
  l.masks = p.reply.icrc_masks;
  IcrcLayout al = p.ack.layout;
  al.masks = p.ack.icrc_masks;
  // Up to 128 bytes the reply's ICRC comes from the registers too.
  const bool short_reply = reply_len && reply_len <= kWordFrameBytes && icrc_words_fit(l);
  const uint32_t reply_part = short_reply ? rf.icrc_part(t, l) : 0;
  const uint32_t ack_part = x.ack ? af.icrc_part(t, al) : 0;
  if (short_reply) rf.put(t, l.end, ~t.xor_all(reply_part), 4);
  if (x.ack) af.put(t, al.end, ~t.xor_all(ack_part), 4);
  marks.mark(kPieceIcrc);
  if (short_reply) {
    rf.store(t, slot, reply_len);
    if (keep) rf.store(t, keep, reply_len);
  } else if (reply_len) {
    // Longer: the head from the registers, the rest where the handler wrote it, the ICRC
    // over memory.
    rf.store(t, out, reply_len < kWordFrameBytes ? reply_len : kWordFrameBytes);
    if (t.leader())
      for (uint32_t i = offset + n; i < l.end; ++i)
        if (i >= kWordFrameBytes) out[i] = 0;  // the pad past the registers' words
    t.sync();
    const uint32_t icrc = icrc_words_fit(l) ? icrc_words(t, out, l) : icrc_team(t, out, l);
    if (t.leader()) store_le32(out + l.end, icrc);
    t.sync();
    if (staged) copy_wide_team(t, slot, out, reply_len);
    if (keep) copy_wide_team(t, keep, out, reply_len);
  }
  if (x.ack) af.store(t, ack_slot, x.ack_len);
  t.sync();  // every lane's stores before the leader's doorbell
}

// Leader: what decide(), count_handled(), submit_counted() and send_response() count for a
// taken request of `len` bytes, at once (independent adds, one dirty mask).
RT_HD inline void express_count(EngineState& st, uint32_t len, const ExpressTake& x) {
  const uint32_t sent = (x.reply_len ? 1 : 0) + (x.ack ? 1 : 0);
  count_all(st.tally, CountOf{Counter::kRxPackets, 1}, CountOf{Counter::kRxBytes, len},
            CountOf{Counter::kExpress, 1}, CountOf{Counter::kMessages, 1},
            CountOf{Counter::kTxPackets, sent}, CountOf{Counter::kTxBytes, x.reply_len + x.ack_len},
            CountOf{Counter::kReplies, x.reply_len ? 1u : 0u},
            CountOf{Counter::kAcksSent, x.ack ? 1u : 0u});
  if (x.r.n == kHandlerError) count(st.tally, Counter::kHandlerErrors);
}

// Leader: the state after a taken request, as decide() and accept_write leave it.
RT_HD inline void express_advance(const EngineDesc& d, EngineState& st, const ExpressTake& x) {
  if (x.reply_len) {
    if (rc_reliable(d)) rc_kept(d, st, st.send_psn, x.reply_len, true);
    st.send_psn = psn_add(st.send_psn, 1);
  }
  st.expected_psn = psn_add(x.req.psn, 1);
  if (d.qp.transport == Transport::RC) {
    st.nak_sent = false;
    st.msn = psn_add(st.msn, 1);
  }
  if (x.write) {
    st.write.region = x.w.region;
    st.write.start_va = x.w.va;
    st.write.next_va = x.w.va + x.req.payload_len;
    st.write.remaining = x.w.len - x.req.payload_len;
  }
}

// Team-wide: take a predicted request (prediction.h) the short way: compare
// the header and check the ICRC in one pass of every lane, place a WRITE's
// payload, run the handler, build the reply from its template and, on RC for an
// ACK request, the ACK from its template, a word a lane in registers. True when the frame was
// taken; false leaves it, and the state, to the responder. Everything counted, changed and sent
// here is what decide() counts and changes, and carry_out() sends, for the same frame: the reply,
// then the ACK (IBA 9.7.5.1: the MSN counts this message, the PSN is its), here both behind one
// doorbell. (A crew takes several at once: express_batch.h.)
template <Scope S, class Team, class Marks = NoMarks>
RT_HD inline bool express(const Team& t, const EngineDesc& d, EngineState& st, Staging* stg,
                          const Arrival& a, const Marks& marks = Marks{}) {
  ExpressTake x;
  if (!express_match(t, d, st, a, st.expected_psn, &x)) return false;
  // Room for the reply and the ACK: without it the responder's path counts what is dropped.
  if (!tx_room<S>(t, d, st, x.ack ? 2 : 1)) return false;
  // qp.retransmit: a reply goes this way only with room for it in the window and nothing
  // queued before it (the handler has not said yet whether it answers).
  if (!rc_express_ok(d, st, 1)) return false;
  marks.mark(kPieceMatch);
  const uint32_t pi = st.tx_pi;  // read once: the leader's doorbell advances it
  uint8_t* slot = d.tx.slot(pi);
  // Where the handler writes the reply's payload, at its place in the frame.
  uint8_t* out = stg ? stg->tx : slot;
  express_handle(t, d, st.pred, a, out, slot, &x);
  marks.mark(kPieceHandler);
  // The ACK after the reply.
  express_build(t, st.pred, x, out, stg != nullptr, slot, d.tx.slot(pi + (x.reply_len ? 1 : 0)),
                st.send_psn, psn_add(st.msn, 1), marks,
                rc_reliable(d) ? rc_replay_slot(d, st.send_psn) : nullptr);
  marks.mark(kPieceCopy);
  if (t.leader()) {
    // Stamped with the request's arrival: the replies leave in the same step, and
    // reading the clock here would cost the round trip ~200 SM cycles (bench ops).
    if (x.reply_len && x.ack)
      tx_prepare(d.tx, st.tx_pi, x.reply_len, 0, a.ts);  // rung by the ACK's
    if (x.ack)
      tx_submit<S>(d.tx, st.tx_pi, x.ack_len, 0, a.ts);
    else if (x.reply_len)
      tx_submit<S>(d.tx, st.tx_pi, x.reply_len, 0, a.ts);
  }
  marks.mark(kPieceDoorbell);
  // The books after the doorbell, off the round trip.
  if (t.leader()) express_count(st, a.len, x);
  // Out of line (a call costs the step ~500 SM cycles of saved registers, bench ops), so
  // only when wanted.
  if (d.record_completions) record_completion(t, d, st, x.m, x.r, x.req.psn, a.ts);
  if (t.leader()) express_advance(d, st, x);
  t.sync();
  marks.mark(kPieceBooks);
  return true;
}

// Team-wide, qp.retransmit: take the peer's ACK of what we sent the short way, when it looks
// like the last one the general path took (predict_peer_ack): its header compared and its
// ICRC checked in one pass, then the requester's verdict (requester.h) on the leader. True
// when taken; false leaves it to the responder. Counts what decide() and receive_response()
// count for it.
// Out of line: kept from the request path's registers.
template <Scope S, class Team>
RT_HD RT_COLD inline bool express_ack_take(const Team& t, const EngineDesc& d, EngineState& st,
                                           const Arrival& a) {
  if (reinterpret_cast<uintptr_t>(a.frame) & 15) return false;
  ExpressRequest ack;
  if (!predicted(t, d.peer_ack->expect, d.peer_ack->care, a.frame, a.len, kAnyPsn,
                 d.check_icrc || a.speculative, &ack))
    return false;
  t.sync();  // every lane has read the prediction and the state before the leader moves on
  if (t.leader()) {
    const IcrcLayout& l = ack.layout;
    const uint32_t aeth = l.l3 + l.masked;  // right after the BTH
    count_all(st.tally, CountOf{Counter::kRxPackets, 1}, CountOf{Counter::kRxBytes, a.len},
              CountOf{Counter::kAcksReceived, 1}, CountOf{Counter::kExpress, 1});
    rc_take_response(d, st, a.frame[aeth], ack.psn);
  }
  return true;
}

template <Scope S, class Team>
RT_HD inline bool express_ack(const Team& t, const EngineDesc& d, EngineState& st,
                              const Arrival& a) {
  return rc_reliable(d) && d.peer_ack->expect.len != 0 && express_ack_take<S>(t, d, st, a);
}

}  // namespace engine_detail
}  // namespace rt
