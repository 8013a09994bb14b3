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

// Team-wide: whether the tx ring has `n` slots free from st.tx_pi on, by the
// last reading of its consumer index; read again (by the leader, across the
// bus) only when that looks full. Without them the responder's path decides
// what goes (it counts what does not).
template <Scope S, class Team>
RT_HD inline bool tx_room(const Team& t, const EngineDesc& d, EngineState& st, uint32_t n) {
  if (st.tx_pi + n - 1 - st.tx_ci_seen < d.tx.depth()) return true;
  t.sync();  // every lane's reading before the leader's (found by the host warp under TSan)
  uint32_t room = 0;
  if (t.leader()) room = tx_reserve<S>(d.tx, st.tx_pi + n - 1, st.tx_ci_seen) != nullptr;
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

// Team-wide: take a predicted request (prediction.h) the short way: compare
// the header and check the ICRC in one pass of every lane, place a WRITE's
// payload, run the handler, build the reply from its template and, on RC for an
// ACK request, the ACK from its template, a word a lane in registers. True when the frame was
// taken; false leaves it, and the state, to the responder. Everything counted, changed and sent
// here is what decide() counts and changes, and carry_out() sends, for the same frame: the reply,
// then the ACK (IBA 9.7.5.1: the MSN counts this message, the PSN is its), here both behind one
// doorbell.
template <Scope S, class Team, class Marks = NoMarks>
RT_HD inline bool express(const Team& t, const EngineDesc& d, EngineState& st, Staging* stg,
                          const Arrival& a, const Marks& marks = Marks{}) {
  if (!d.express || st.in_message || st.resync || st.pred.reply.len == 0) return false;
  if ((reinterpret_cast<uintptr_t>(a.frame) & 15) || d.rx.slot_bytes < kPredictBytes) return false;
  Prediction& p = st.pred;
  const bool verify = d.check_icrc || a.speculative;
  ExpressRequest req;
  if (!predicted(t, p, a.frame, a.len, st.expected_psn, verify, &req)) return false;
  const bool rc = d.qp.transport == Transport::RC;
  const bool ack = rc && req.ack_req;
  if (ack && p.ack.len == 0) return false;
  // Room for the reply and the ACK: without it the responder's path counts what is dropped.
  if (!tx_room<S>(t, d, st, ack ? 2 : 1)) return false;
  const bool write = p.reth != 0;
  WriteTarget w{};
  if (write && !write_target(d, p, a.frame, req, &w)) return false;
  marks.mark(kPieceMatch);
  // The request is taken: its ICRC matched, so a WRITE's data lands before its handler
  // reads it from the region (as the responder has it).
  if (write) copy_bytes_team(t, w.dst, a.frame + req.payload, req.payload_len);
  const uint32_t pi = st.tx_pi;  // read once: the leader's doorbell advances it
  uint8_t* slot = d.tx.slot(pi);
  // Where the handler writes the reply's payload, at its place in the frame.
  uint8_t* out = stg ? stg->tx : slot;
  const uint8_t opcode = a.frame[req.layout.l3 + req.layout.masked - uint32_t(sizeof(Bth))];
  const Message m = write ? Message{w.dst, req.payload_len, w.imm, true, opcode}
                          : Message{a.frame + req.payload, req.payload_len, 0, false, opcode};
  // The largest payload whose padded length and ICRC still fit the slot.
  const uint32_t offset = p.reply.len;
  const uint32_t room =
      d.tx.slot_bytes > offset + kIcrcBytes ? (d.tx.slot_bytes - offset - kIcrcBytes) & ~3u : 0;
  // The echo's reply is its request's payload: read where it lies in the request (a
  // SEND's, a word-aligned distance from the reply's) when the reply is short, not copied.
  const uint32_t echo_len = offset + m.len + ((4 - (m.len & 3)) & 3) + kIcrcBytes;
  const bool echo_in_place = d.handler.kind == HandlerKind::kEcho && !write && m.len <= room &&
                             ((req.payload - offset) & 3) == 0 && echo_len <= kWordFrameBytes;
  HandlerReply r;
  r.slot = slot;
  r.frame = out;
  const uint8_t* body = out;  // the reply's bytes as laid out in its frame
  if (echo_in_place) {
    r.out = const_cast<uint8_t*>(m.data);  // only read (a completion record's copy)
    r.n = int(m.len);
    body = m.data - offset;
  } else {
    r.out = out + offset;
    r.n = handle_team(t, d.handler, m, r.out, room);  // ends with the team synchronised
  }
  r.flags = uint8_t((m.has_imm ? kCompletionHasImm : 0) |
                    (r.n == kHandlerError ? kCompletionHandlerError : 0));
  marks.mark(kPieceHandler);
  // The reply and the ACK a word a lane (word_frame.h): the templates and the payload
  // loaded once, patched and checksummed in registers, stored once.
  const uint32_t n = r.n >= 0 ? uint32_t(r.n) : 0;
  WordFrame<Team> rf, af;
  const uint32_t reply_len = r.n >= 0 ? offset + n + ((4 - (n & 3)) & 3) + kIcrcBytes : 0;
  const uint32_t ack_len = ack ? p.ack.len + kIcrcBytes : 0;
  if (reply_len) {
    rf.load(t, p.reply.bytes, offset, body, offset + n);
    patch_reply(t, p, rf, n, st.send_psn);
  }
  if (ack) {
    af.load(t, p.ack.bytes, p.ack.len, nullptr, 0);
    patch_ack(t, p, af, req.psn, psn_add(st.msn, 1));
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
  const uint32_t ack_part = ack ? af.icrc_part(t, al) : 0;
  if (short_reply) rf.put(t, l.end, ~t.xor_all(reply_part), 4);
  if (ack) af.put(t, al.end, ~t.xor_all(ack_part), 4);
  marks.mark(kPieceIcrc);
  if (short_reply) {
    rf.store(t, slot, reply_len);
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
    if (stg) copy_wide_team(t, slot, out, reply_len);
  }
  if (ack) af.store(t, d.tx.slot(pi + (reply_len ? 1 : 0)), ack_len);  // the ACK after the reply
  t.sync();  // every lane's stores before the leader's doorbell
  marks.mark(kPieceCopy);
  if (t.leader()) {
    // Stamped with the request's arrival: the replies leave in the same step, and
    // reading the clock here would cost the round trip ~200 SM cycles (bench ops).
    if (reply_len && ack) tx_prepare(d.tx, st.tx_pi, reply_len, 0, a.ts);  // rung for by the ACK's
    if (ack)
      tx_submit<S>(d.tx, st.tx_pi, ack_len, 0, a.ts);
    else if (reply_len)
      tx_submit<S>(d.tx, st.tx_pi, reply_len, 0, a.ts);
  }
  marks.mark(kPieceDoorbell);
  if (t.leader()) {
    // What decide(), count_handled(), submit_counted() and send_response() count, at
    // once (independent adds, one dirty mask): after the doorbell, off the round trip.
    const uint32_t sent = (reply_len ? 1 : 0) + (ack ? 1 : 0);
    count_all(st.tally, CountOf{Counter::kRxPackets, 1}, CountOf{Counter::kRxBytes, a.len},
              CountOf{Counter::kExpress, 1}, CountOf{Counter::kMessages, 1},
              CountOf{Counter::kTxPackets, sent}, CountOf{Counter::kTxBytes, reply_len + ack_len},
              CountOf{Counter::kReplies, reply_len ? 1u : 0u},
              CountOf{Counter::kAcksSent, ack ? 1u : 0u});
    if (r.n == kHandlerError) count(st.tally, Counter::kHandlerErrors);
  }
  // Out of line (a call costs the step ~500 SM cycles of saved registers, bench ops), so
  // only when wanted.
  if (d.record_completions) record_completion(t, d, st, m, r, req.psn, a.ts);
  if (t.leader()) {
    if (reply_len) st.send_psn = psn_add(st.send_psn, 1);
    st.expected_psn = psn_add(req.psn, 1);
    if (rc) {
      st.nak_sent = false;
      st.msn = psn_add(st.msn, 1);
    }
    if (write) {  // the WRITE's state, as accept_write leaves it
      st.write.region = w.region;
      st.write.start_va = w.va;
      st.write.next_va = w.va + req.payload_len;
      st.write.remaining = w.len - req.payload_len;
    }
  }
  t.sync();
  marks.mark(kPieceBooks);
  return true;
}

}  // namespace engine_detail
}  // namespace rt
