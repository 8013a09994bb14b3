// The engine's front: how a team takes a frame off the rx ring (arrive), and
// the express path for the requests whose header the queue pair predicted
// (prediction.h): SEND Onlys and WRITE Onlys with Immediate, UC or RC, with
// or without an ACK request. The express path accepts only what the responder
// (responder.h) would, changes the state the same way and sends the same frames
// in the same order as its actions carried out (transmit.h).
#pragma once

#include "rt/engine/responder.h"
#include "rt/engine/transmit.h"
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

// One ICRC for icrc_jobs(): of the frame at `frame` (null: none wanted).
struct IcrcJob {
  const uint8_t* frame;
  IcrcLayout layout;
  uint32_t* out;
};

// Team-wide: up to three ICRCs, two at a time (icrc_team2) and the one left
// alone. Every lane passes the same jobs.
template <class Team>
RT_HD inline void icrc_jobs(const Team& t, IcrcJob a, IcrcJob b, IcrcJob c = IcrcJob{}) {
  // The wanted ones to the front.
  if (!a.frame) {
    a = c;
    c.frame = nullptr;
  }
  if (!b.frame) {
    b = c;
    c.frame = nullptr;
  }
  if (!a.frame) {
    a = b;
    b.frame = nullptr;
  }
  // Short frames a word a lane (icrc_words.h), longer ones by 16-byte chunks.
  const auto one = [&](const IcrcJob& j) {
    *j.out = icrc_words_fit(j.layout) ? icrc_words(t, j.frame, j.layout)
                                      : icrc_team(t, j.frame, j.layout);
  };
  if (a.frame && b.frame) {
    if (icrc_words_fit(a.layout) && icrc_words_fit(b.layout))
      icrc_words2(t, a.frame, a.layout, b.frame, b.layout, a.out, b.out);
    else
      icrc_team2(t, a.frame, a.layout, b.frame, b.layout, a.out, b.out);
  } else if (a.frame) {
    one(a);
  }
  if (c.frame) one(c);
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
  kPieceHandler,   // a WRITE placed, the reply template staged, the handler run
  kPiecePatch,     // the reply's lengths and PSN patched in (and an RC ACK's)
  kPieceIcrc,      // the reply's ICRC (and the ACK's)
  kPieceCopy,      // the reply and the ACK in their tx slots
  kPieceDoorbell,  // submitted
  kPieceBooks,     // counters, completion, PSN, MSN: after the doorbell
  kExpressPieces
};

// Team-wide: take a predicted request (prediction.h) the short way: compare
// the header and check the ICRC in one pass of every lane, place a WRITE's
// payload, run the handler, patch the reply template and, on RC for an ACK
// request, the ACK template. True when the frame was taken; false leaves it,
// and the state, to the responder. Everything counted, changed and sent here
// is what decide() counts and changes, and carry_out() sends, for the same
// frame: the reply, then the ACK (IBA 9.7.5.1: the MSN counts this message,
// the PSN is its), here both behind one doorbell.
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
  uint8_t* out = stg ? stg->tx : slot;  // where the reply is built
  // The template, a chunk a lane, before the handler writes the payload behind it.
  copy_wide_team(t, out, p.reply.bytes, p.reply.len);
  t.sync();
  const uint8_t opcode = a.frame[req.layout.l3 + req.layout.masked - uint32_t(sizeof(Bth))];
  const Message m = write ? Message{w.dst, req.payload_len, w.imm, true, opcode}
                          : Message{a.frame + req.payload, req.payload_len, 0, false, opcode};
  // The largest payload whose padded length and ICRC still fit the slot.
  const uint32_t offset = p.reply.len;
  const uint32_t room =
      d.tx.slot_bytes > offset + kIcrcBytes ? (d.tx.slot_bytes - offset - kIcrcBytes) & ~3u : 0;
  HandlerReply r;
  r.slot = slot;
  r.frame = out;
  r.out = out + offset;
  r.n = handle_team(t, d.handler, m, r.out, room);
  r.flags = uint8_t((m.has_imm ? kCompletionHasImm : 0) |
                    (r.n == kHandlerError ? kCompletionHandlerError : 0));
  marks.mark(kPieceHandler);
  // Every lane works the reply's length out as patch_reply() does; the leader patches.
  const uint32_t reply_len =
      r.n >= 0 ? offset + uint32_t(r.n) + ((4 - (uint32_t(r.n) & 3)) & 3) + kIcrcBytes : 0;
  const uint32_t ack_len = ack ? p.ack.len + kIcrcBytes : 0;
  if (t.leader()) {
    if (reply_len) patch_reply(p, out, uint32_t(r.n), st.send_psn, true);
    if (ack) patch_ack(p, req.psn, psn_add(st.msn, 1));
  }
  t.sync();  // the leader's header and the handler's payload, seen by every lane
  marks.mark(kPiecePatch);
  IcrcLayout l = p.reply.layout;
  l.end = reply_len - kIcrcBytes;
  l.masks = p.reply.icrc_masks;
  IcrcLayout al = p.ack.layout;
  al.masks = p.ack.icrc_masks;
  uint32_t tx_icrc = 0, ack_icrc = 0;
  icrc_jobs(t, IcrcJob{reply_len ? out : nullptr, l, &tx_icrc},
            IcrcJob{ack ? p.ack.bytes : nullptr, al, &ack_icrc});
  marks.mark(kPieceIcrc);
  if (t.leader()) {
    if (reply_len) store_le32(out + l.end, tx_icrc);
    if (ack) store_le32(p.ack.bytes + p.ack.len, ack_icrc);
  }
  t.sync();
  uint8_t* ack_slot = d.tx.slot(pi + (reply_len ? 1 : 0));  // the ACK after the reply
  if (stg && reply_len) copy_wide_team(t, slot, out, reply_len);
  if (ack) copy_wide_team(t, ack_slot, p.ack.bytes, ack_len);
  if ((stg && reply_len) || ack) t.sync();  // every lane's stores before the leader's doorbell
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
