// The engine's batch step: a crew (crew.h) serves its queue a batch of frames
// at a time, in four phases with the crew synchronised between them.
//
//   classify  per frame, in parallel (team k takes frames k, k + teams()...):
//             read it from its slot (staged next to the team when the ring is
//             across a bus), decode, check its ICRC with every lane. Pure: the
//             verdict goes into the frame's BatchSlot, the state is untouched.
//   commit    the crew leader, in ring order: each frame's decision
//             (responder.h: PSN, message order, RETH checks), which sends
//             nothing; its placement is noted in its slot.
//   execute   per frame, in parallel: the placements the commit noted.
//   publish   what the last frame's decision sends (a reply, an RC ACK after
//             its data; transmit.h), slots back and counters (end_pass).
//
// The frames handler's queues take stream_batch.h's step instead, a thread a
// packet (crew_pass picks).
//
// Exact: the decisions are the one-frame-at-a-time responder's, and what they
// leave to do is carried out in the same order: placements before the sends of
// the frame that follows them. A batch ends after a frame whose decision sends
// (a message for a handler, an ACK or NAK), so its sends see every placement
// before it and none after; and before an atomic behind noted placements (it
// executes in its decision). Frames classified but not committed stay
// classified for the next pass. A lone frame takes engine_step() (its express
// path): batches are for streams.
#pragma once

#include "rt/crew.h"
#include "rt/engine/engine.h"

namespace rt {

// Frames a batch holds at most: the lanes of the warp that polls their descriptors.
constexpr uint32_t kMaxBatch = 32;

// Frame ends a frames batch keeps for classify's placement rule (stream_batch.h); a
// batch with more places nothing before the commit after the last one kept.
constexpr uint32_t kMaxStreamEnds = 64;
// Packets a frames batch holds at most (queues.batch's bound).
constexpr uint32_t kMaxStreamBatch = 1024;

// Requests an express batch takes at once at most (express_batch.h).
constexpr uint32_t kMaxExpressBatch = 16;

struct StreamPacket;  // stream_batch.h

// One request of an express batch (express_batch.h): where it arrived, what the express
// path's match and handler found, then the commit's tx slot, reply PSN and MSN for it.
struct ExpressSlot {
  engine_detail::Arrival a;
  engine_detail::ExpressTake x;
  uint32_t pi, psn, msn;
  bool ok;  // matched and handled; a batch takes the ones before the first that is not
};

// One frame of a batch: the classify phase's verdict, then the commit's placement.
struct BatchSlot {
  DecodeResult r;  // the frame, decoded where the team read it
  uint64_t ts;
  uint32_t len;
  engine_detail::IcrcVerdict icrc;
  uint8_t* place_dst;  // what the commit left to place (place_len 0: nothing)
  const uint8_t* place_src;
  uint32_t place_len;
};

// What a crew shares while it serves a queue (a block's shared memory; a CPU
// thread's own). Slot and staging of rx sequence number q: q & (depth - 1).
struct Batch {
  BatchSlot slot[kMaxBatch];
  ExpressSlot express[kMaxExpressBatch];  // an express batch's requests (express_batch.h)
  uint32_t depth;       // frames a batch may hold: a power of two, 2..kMaxBatch (express: 2..16)
  uint8_t* staging;     // depth x batch_stage_bytes next to the crew, or null: frames read in place
  uint32_t classified;  // frames before this rx sequence number are classified (>= rx_ci)
  uint32_t ready;       // this pass: frames published before this one
  uint32_t committed;   // this pass: the commit ended before this one
  uint32_t done;        // this pass: the work done, for every thread
  uint32_t crc_part[kMaxTeams];
  // crc32_crew's shifts for the last length it saw (a stream's frames are one size):
  // each team's piece to the end, and zlib's start over the whole.
  uint64_t crc_n;
  uint32_t crc_shift[kMaxTeams];
  uint32_t crc_start;
  uint64_t start_n;  // a folded page CRC's zlib start, for the last length it saw
  uint32_t start_crc;
  // Commit: page CRCs folded by the stream's packet size (the size of the first packets
  // of the last two frames, when they agree; stream_batch.h).
  Crc32ZerosTable fold;
  uint64_t fold_seen;
  // Commit: the span of the bytes the batch's noted placements write (execute
  // writes them all at once, in no order).
  uintptr_t pending_lo, pending_hi;
  // Where the crew's cycles go (clock64, the crew leader's view), for the host.
  uint64_t cycles[4];  // classify (with the poll), commit, execute, publish
  uint64_t batches;
  uint64_t batch_frames;
  // Inside classify, as team 0 saw it over the frames it took: stage, decode, ICRC,
  // verdict; [4]: how many frames that was. The frames stream's (stream_batch.h), the
  // crew's: poll, header, pass over the bytes; [4]: the packets.
  uint64_t classify_cycles[5];
  // The frames stream's batch (stream_batch.h): `depth` packets next to the crew; the
  // first the general path takes and the ends, this pass.
  StreamPacket* packets;
  uint32_t first_other, ends;
  uint32_t end_index[kMaxStreamEnds], end_page[kMaxStreamEnds];
  // Its runs (stream_commit.h): bit i set where packet i does not go on from the one
  // before it; the tables that fold a run's CRCs at once (for the fold's packet size).
  uint32_t breaks[kMaxStreamBatch / 32];
  Crc32RunShifts runs;
  // Inside the frames stream's commit: runs taken at once, frame ends, the responder's
  // decisions (the rest: packets the commit walked one by one).
  uint64_t commit_cycles[3];
};

// Staging bytes a frame of a queue's batch has: its frame; an express batch's request also
// its reply (express_batch.h).
RT_HD inline uint64_t batch_stage_bytes(const EngineDesc& d) {
  return d.express ? uint64_t(d.rx.slot_bytes) + d.tx.slot_bytes : d.rx.slot_bytes;
}

// The batch depth of a queue, at most queues.batch and whose staging fits `staging_room`
// bytes when frames are staged; 1: no batches. Requests with the express path on take
// express batches (express_batch.h) of up to kMaxExpressBatch: a lone request takes
// engine_step at once and waits for no batch. Every other queue takes the batch step
// below, a power of two of at most kMaxBatch frames. (The frames handler's depth:
// stream_depth.) A CPU thread's staging has no room limit (`staged` false); its express
// batch stages replies only.
RT_HD inline uint32_t batch_depth(const EngineDesc& d, uint64_t staging_room, bool staged) {
  const uint64_t each = batch_stage_bytes(d);
  if (d.express) {
    uint32_t depth = kMaxExpressBatch < d.batch ? kMaxExpressBatch : d.batch;
    if (staged && depth * each > staging_room) depth = uint32_t(staging_room / each);
    return depth >= 2 ? depth : 1;
  }
  uint32_t depth = 1;
  while (depth * 2 <= kMaxBatch && depth * 2 <= d.batch &&
         (!staged || uint64_t(depth) * 2 * each <= staging_room))
    depth *= 2;
  return depth;
}

// `packets`: the frames stream's (depth of them), else null.
RT_HD inline void batch_init(Batch& b, uint32_t depth, uint8_t* staging, uint32_t rx_ci,
                             StreamPacket* packets = nullptr) {
  b.depth = depth;
  b.staging = staging;
  b.packets = packets;
  b.classified = rx_ci;
  b.ready = rx_ci;
  b.committed = rx_ci;
  b.done = 0;
  b.crc_n = ~uint64_t(0);
  b.start_n = ~uint64_t(0);
  b.fold.n = ~uint64_t(0);
  b.fold_seen = ~uint64_t(0);
  for (uint64_t& c : b.cycles) c = 0;
  b.batches = 0;
  b.batch_frames = 0;
  for (uint64_t& c : b.classify_cycles) c = 0;
  for (uint64_t& c : b.commit_cycles) c = 0;
  b.runs.n = ~uint64_t(0);
}

namespace engine_detail {

// The clock the crew's profile counts in: SM cycles on a GPU, 0 on a CPU thread.
RT_HD inline uint64_t crew_clock() {
#if RT_DEVICE_CODE
  return clock64();
#else
  return 0;
#endif
}

// Leader, at a batch's end: its phases' SM cycles (classify from t0, commit from t1, execute
// from t2, publish from t3 to now) and its frames, into the crew's profile.
RT_HD inline void count_batch(Batch& b, uint64_t t0, uint64_t t1, uint64_t t2, uint64_t t3,
                              uint32_t frames) {
  const uint64_t t4 = crew_clock();
  b.cycles[0] += t1 - t0;
  b.cycles[1] += t2 - t1;
  b.cycles[2] += t3 - t2;
  b.cycles[3] += t4 - t3;
  ++b.batches;
  b.batch_frames += frames;
}

// Team-wide: how many descriptors from rx sequence `from` on are published, in
// a row, up to `max` (<= kMaxBatch): one acquire load a lane, all in flight.
template <Scope S, class Team>
RT_HD inline uint32_t frames_ready(const Team& t, const RxRing& rx, uint32_t from, uint32_t max) {
  if constexpr (Team::kLanes == 1) {
    uint32_t n = 0;
    while (n < max && rx_poll<S>(rx, from + n)) ++n;
    return n;
  } else {
    const bool ready = t.lane() < max && rx_poll<S>(rx, from + t.lane());
    const uint32_t not_ready = ~t.ballot(ready);
#if RT_DEVICE_CODE
    return not_ready ? uint32_t(__ffs(not_ready)) - 1 : 32u;
#else
    return not_ready ? uint32_t(__builtin_ctz(not_ready)) : 32u;
#endif
  }
}

// Commit: frame q's placement of `len` bytes at `dst` is noted. Execute places
// the batch's frames in parallel, so one that writes where an earlier one of
// the batch writes (a frame after another on the same page, a retransmission)
// must not race it: the earlier ones are placed now, in order, by the leader
// (rare: a damaged or interleaved stream).
RT_HD inline void order_placement(Batch& b, uint32_t first, uint32_t q, const uint8_t* dst,
                                  uint32_t len) {
  if (!len) return;
  const uintptr_t lo = reinterpret_cast<uintptr_t>(dst), hi = lo + len;
  if (lo < b.pending_hi && hi > b.pending_lo) {
    for (uint32_t p = first; p != q; ++p) {
      BatchSlot& s = b.slot[p & (b.depth - 1)];
      if (!s.place_len) continue;
      copy_bytes(s.place_dst, s.place_src, s.place_len);
      s.place_len = 0;
    }
    b.pending_lo = lo;
    b.pending_hi = hi;
    return;
  }
  b.pending_lo = lo < b.pending_lo ? lo : b.pending_lo;
  b.pending_hi = hi > b.pending_hi ? hi : b.pending_hi;
}

// Team-wide: classify rx sequence number `seq` (published, as frames_ready
// saw) into `s`: read, decode, ICRC. Changes no engine state.
template <Scope S, class Team>
RT_HD inline void classify(const Team& t, const EngineDesc& d, uint32_t seq, BatchSlot& s,
                           uint8_t* staging, uint64_t* prof) {
  const uint64_t c0 = crew_clock();
  const Arrival a = arrive_at<S>(t, d, seq, staging);
  const uint8_t* frame = a.frame;
  const uint32_t len = a.len;
  const uint64_t ts = a.ts;
  const uint64_t c1 = crew_clock();
  if (t.leader()) {
    s.r = decode(ByteSpan(frame, len));
    s.len = len;
    s.ts = ts;
    s.place_len = 0;
  }
  t.sync();
  const uint64_t c2 = crew_clock();
  uint64_t c3 = 0;
  IcrcVerdict icrc = IcrcVerdict::kUnchecked;
  if (d.check_icrc && s.r.ok()) {
    const FrameView& f = s.r.frame;
    if constexpr (Team::kLanes == 1) {
      icrc = icrc_ok(f) ? IcrcVerdict::kGood : IcrcVerdict::kBad;
    } else {
      const IcrcLayout l{f.l3,   f.l3_len, f.ip_version, f.bth + uint32_t(sizeof(Bth)) - f.l3,
                         f.icrc, nullptr};
      if (f.ip_version && icrc_team_fits(l))
        icrc = icrc_team(t, frame, l) == f.icrc_field() ? IcrcVerdict::kGood : IcrcVerdict::kBad;
    }
  }
  if (t.leader()) {
    c3 = crew_clock();
    s.icrc = icrc;
    if (prof) {
      prof[0] += c1 - c0;
      prof[1] += c2 - c1;
      prof[2] += c3 - c2;
      prof[3] += crew_clock() - c3;
      ++prof[4];
    }
  }
  t.sync();
}

// Commit: must frame `r` wait until the placements this batch noted are done? Only an
// atomic: it executes in its decision, on memory a WRITE before it may cover. Every other
// decision reads headers only, and what it sends goes out after execute.
RT_HD inline bool waits_for_placements(const DecodeResult& r) {
  return r.ok() && r.frame.op.is(kAtomic) && !r.frame.op.is(kResponse);
}

// Commit: the decision just made sends (a reply, an RC answer): its batch ends with it.
RT_HD inline bool sends(const EngineState& st) {
  return st.act.deliver || st.act.response != Response::kNone;
}

// Commit: the decision's placement, moved from st.act into the frame's own record.
RT_HD inline uint32_t take_placement(EngineState& st, uint8_t** dst, const uint8_t** src) {
  *dst = st.act.place_dst;
  *src = st.act.place_src;
  const uint32_t n = st.act.place_len;
  st.act.place_len = 0;
  return n;
}

// Crew-wide: zlib's CRC-32 of n bytes, a piece of whole 16-byte chunks a team;
// the pieces' raw registers combined by shifts. Valid on the crew leader.
template <class Crew>
RT_HD inline uint32_t crc32_crew(const Crew& c, Batch& b, const uint8_t* p, uint64_t n) {
  const auto t = c.team();
  const uint64_t teams = c.teams();
  const uint64_t piece = ((n + teams - 1) / teams + kChunkBytes - 1) / kChunkBytes * kChunkBytes;
  const uint64_t from = piece * c.team_index();
  const uint64_t len = from < n ? (n - from < piece ? n - from : piece) : 0;
  const uint32_t raw = crc32_raw_team(t, p + (from < n ? from : 0), len);
  // The shifts cost each team's leader a few thousand cycles: worked out once per length.
  const bool fresh = b.crc_n != n;
  if (t.leader()) {
    if (fresh) b.crc_shift[c.team_index()] = crc32_x8n(n - from - len);
    b.crc_part[c.team_index()] = len ? crc32_mulmod(b.crc_shift[c.team_index()], raw) : 0;
  }
  c.sync();
  uint32_t all = 0;
  if (c.leader()) {
    if (fresh) {
      b.crc_start = crc32_mulmod(crc32_x8n(n), 0xFFFFFFFFu);
      b.crc_n = n;
    }
    for (uint32_t k = 0; k < c.teams(); ++k) all ^= b.crc_part[k];
  }
  return ~(all ^ b.crc_start);
}

// Crew-wide: a pass of engine_step() by team 0 alone, of `max` frames at most (for a queue
// that takes no batches, depth 1, counted as a batch of what it took). Returns the work
// done, the same for every thread.
template <Scope S, class Crew>
RT_HD inline uint32_t lone_step(const Crew& c, const EngineDesc& d, EngineState& st, Batch& b,
                                Staging* stg, uint32_t max) {
  if (c.team_index() == 0) {
    const auto t = c.team();
    const uint32_t done = engine_step<S>(t, d, st, stg, max);
    if (t.leader()) {
      b.classified = b.ready = b.committed = st.rx_ci;
      b.done = done;
      if (b.depth < 2 && done) {
        ++b.batches;
        b.batch_frames += done;
      }
    }
  }
  c.sync();
  return b.done;
}

}  // namespace engine_detail

// One pass of the loop by a crew: a batch when two frames or more are waiting,
// else engine_step() by team 0 (a lone frame's express path). Returns the work
// done, the same for every thread.
template <Scope S, class Crew>
RT_HD inline uint32_t crew_step(const Crew& c, const EngineDesc& d, EngineState& st, Batch& b,
                                Staging* stg = nullptr) {
  using namespace engine_detail;
  const auto t = c.team();
  const uint64_t t0 = crew_clock();
  if (c.team_index() == 0) {
    const uint32_t from = b.classified;
    const uint32_t n = frames_ready<S>(t, d.rx, from, st.rx_ci + b.depth - from);
    if (t.leader()) b.ready = from + n;
  }
  c.sync();
  // Read by every thread before team 0 may change them (engine_step, below).
  const uint32_t first = st.rx_ci;
  const uint32_t ready = b.ready;
  const bool lone = b.depth < 2 || (ready - first < 2 && b.classified == first);
  c.sync();
  // A queue that takes no batches takes queues.batch frames a pass, as the one-warp kernel
  // does; a lone frame of a batching queue, that one.
  if (lone) return lone_step<S>(c, d, st, b, stg, b.depth < 2 ? d.batch : 1u);
  // classify what is new
  const uint32_t fresh = b.classified;
  for (uint32_t q = fresh + c.team_index(); q - fresh < ready - fresh; q += c.teams()) {
    const uint32_t i = q & (b.depth - 1);
    classify<S>(t, d, q, b.slot[i], b.staging ? b.staging + size_t(i) * d.rx.slot_bytes : nullptr,
                c.team_index() == 0 ? b.classify_cycles : nullptr);
  }
  c.sync();
  const uint64_t t1 = crew_clock();
  // commit, in order
  if (c.leader()) {
    {
      b.classified = ready;
      b.pending_lo = ~uintptr_t(0);
      b.pending_hi = 0;
      bool placing = false;
      uint32_t q = first;
      while (q != ready) {
        BatchSlot& s = b.slot[q & (b.depth - 1)];
        if (placing && waits_for_placements(s.r)) break;
        decide(d, st, s.r, s.len, s.ts, s.icrc);
        s.place_len = take_placement(st, &s.place_dst, &s.place_src);
        order_placement(b, first, q, s.place_dst, s.place_len);
        ++q;
        placing = placing || s.place_len;
        if (sends(st)) break;  // after execute has placed what came before it (publish)
      }
      b.committed = q;
    }
  }
  c.sync();
  const uint64_t t2 = crew_clock();
  // execute
  const uint32_t committed = b.committed;
  for (uint32_t q = first + c.team_index(); q - first < committed - first; q += c.teams()) {
    const BatchSlot& s = b.slot[q & (b.depth - 1)];
    if (s.place_len) copy_bytes_team(t, s.place_dst, s.place_src, s.place_len);
  }
  c.sync();
  const uint64_t t3 = crew_clock();
  // publish
  if (c.leader() && sends(st)) send_actions<S>(d, st, stg);
  if (c.leader()) {
    st.rx_ci = committed;
    b.done = end_pass<S>(d, st, stg, committed - first);
    count_batch(b, t0, t1, t2, t3, committed - first);
  }
  c.sync();
  return b.done;
}

}  // namespace rt
