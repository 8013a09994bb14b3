// The engine's batch step: a crew (crew.h) serves its queue a batch of frames
// at a time, in four phases with the crew synchronised between them.
//
//   classify  per frame, in parallel (team k takes frames k, k + teams()...):
//             read it from its slot (staged next to the team when the ring is
//             across a bus), decode, check its ICRC with every lane. Pure: the
//             verdict goes into the frame's BatchSlot, the state is untouched.
//   commit    the crew leader, in ring order: a run of WRITE Onlys that come in
//             sequence into the frames handler's pages in a few stores
//             (commit_stream_run); any other frame through receive_decoded(),
//             the general path after decode (PSN, message order, RETH checks,
//             the frames account, handlers, replies, NAKs). A WRITE's placement
//             is noted in its slot, not done.
//   execute   per frame, in parallel: the placements the commit noted.
//   publish   the RC ACK that waited for its data, a frame's end (its page's
//             CRC by the whole crew, then its record), slots back and counters
//             (end_pass).
//
// Exact: what the commit does is the one-frame-at-a-time general path; what it
// defers is placement only, and a batch ends before any frame whose handling
// could see a placement not yet done (a message for a handler, a reply, a
// duplicate's ACK) and after one that waits for its own (an RC ACK, a frame's
// end). Frames classified but not committed stay classified for the next pass.
// A lone frame takes engine_step() (its express path): batches are for streams.
#pragma once

#include "rt/crew.h"
#include "rt/engine/engine.h"

namespace rt {

// Frames a batch holds at most: the lanes of the warp that polls their descriptors.
constexpr uint32_t kMaxBatch = 32;

// What classify found of a frame the frames handler may take as part of a
// stream run (stream_takes): a WRITE Only, no immediate, no ACK asked,
// that passes every check of the general path that depends on the frame alone
// (decode, ICRC, QP, P_Key, transport, its RETH's region being the pages,
// the page bounds). `ok` false: the general path takes it.
struct StreamWrite {
  bool ok;
  uint32_t psn;
  uint32_t page, offset;
  uint32_t len;  // payload bytes
  uint64_t va;
  uint32_t dma_len;
  uint8_t* dst;  // where its payload goes in the page
};

// One frame of a batch: the classify phase's verdict, then the commit's placement.
struct BatchSlot {
  DecodeResult r;  // the frame, decoded where the team read it
  uint64_t ts;
  uint32_t len;
  engine_detail::IcrcVerdict icrc;
  StreamWrite stream;
  uint32_t pay_raw;  // frames handler: the payload's raw CRC register (pay_raw_ok)
  bool pay_raw_ok;
  uint8_t* place_dst;  // what the commit left to place (place_len 0: nothing)
  const uint8_t* place_src;
  uint32_t place_len;
};

// What a crew shares while it serves a queue (a block's shared memory; a CPU
// thread's own). Slot and staging of rx sequence number q: q & (depth - 1).
struct Batch {
  BatchSlot slot[kMaxBatch];
  uint32_t depth;       // frames a batch may hold: a power of two, 2..kMaxBatch
  uint8_t* staging;     // depth x rx slot_bytes next to the crew, or null: frames read in place
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
  // Commit: page CRCs folded by the stream's packet size (the size of the last two runs'
  // first packets, when they agree).
  Crc32ZerosTable fold;
  uint64_t fold_seen;
  uint64_t run_bytes;  // the last stream run's payload bytes (commit)
  // Commit: the span of the bytes the batch's noted placements write (execute
  // writes them all at once, in no order).
  uintptr_t pending_lo, pending_hi;
  // Where the crew's cycles go (clock64, the crew leader's view), for the host.
  uint64_t cycles[4];  // classify (with the poll), commit, execute, publish
  uint64_t batches;
  uint64_t batch_frames;
  // Inside classify, as team 0 saw it over the frames it took: stage, decode, ICRC,
  // verdict; [4]: how many frames that was.
  uint64_t classify_cycles[5];
};

// The batch depth of a queue: a power of two, at most kMaxBatch and
// queues.batch, whose staging fits `staging_room` bytes when frames are staged;
// 1: no batches. Requests with the express path on are taken one at a time
// (engine_step): the express path skips what a batch would share out, and a
// request waits for no batch. Batches are for what nothing answers at once:
// the frames handler's streams, and every queue with express off.
RT_HD inline uint32_t batch_depth(const EngineDesc& d, uint64_t staging_room, bool staged) {
  if (d.express && d.handler.kind != HandlerKind::kFrames) return 1;
  uint32_t depth = 1;
  while (depth * 2 <= kMaxBatch && depth * 2 <= d.batch &&
         (!staged || uint64_t(depth) * 2 * d.rx.slot_bytes <= staging_room))
    depth *= 2;
  return depth;
}

RT_HD inline void batch_init(Batch& b, uint32_t depth, uint8_t* staging, uint32_t rx_ci) {
  b.depth = depth;
  b.staging = staging;
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

// Classify: `r` as a stream run may take it (StreamWrite), from the frame alone.
RT_HD inline StreamWrite stream_write(const EngineDesc& d, const DecodeResult& r,
                                      IcrcVerdict icrc) {
  StreamWrite w{};
  if (d.handler.kind != HandlerKind::kFrames || !r.ok()) return w;
  if (d.check_icrc && icrc != IcrcVerdict::kGood) return w;
  const FrameView& f = r.frame;
  if (!(f.op.flags & kWrite) || !f.op.is(kOnly) || f.op.has(kImmDt) || !f.op.has(kReth)) return w;
  if (f.op.transport != d.qp.transport) return w;
  const Bth& bth = f.bth_hdr();
  if (bth.dest_qp.get() != d.qp.qpn || !pkey_matches(bth.pkey.get(), d.qp.pkey)) return w;
  if (d.qp.transport == Transport::RC && bth.ack_requested()) return w;
  const Reth& reth = f.ext_hdr<Reth>(kReth);
  const uint64_t va = reth.va.get();
  const uint32_t dma_len = reth.dma_len.get();
  const FramesDesc& fd = d.frames;
  if (f.payload_len > dma_len || find_region(d, reth.rkey.get(), va, dma_len) != int(fd.region))
    return w;
  const MemRegion& region = d.regions[fd.region];
  const uint32_t at = uint32_t(va - region.va);  // inside the region: its length is 32 bits
  const uint32_t page = at / fd.page_bytes;
  const uint32_t offset = at % fd.page_bytes;
  if (page >= fd.pages || offset + f.payload_len > fd.page_bytes) return w;
  w.ok = true;
  w.psn = bth.psn.get();
  w.page = page;
  w.offset = offset;
  w.len = f.payload_len;
  w.va = va;
  w.dma_len = dma_len;
  w.dst = region.base + at;
  return w;
}

// Commit: frame `s` comes in sequence into a page that is the engine's, and
// either goes on with the frame in progress or opens the next one (closing the
// one in progress as incomplete, as a packet for another page does): the
// general path would only account for it and place it (frames_write), so
// commit_stream_run() does just that.
RT_HD inline bool stream_takes(const EngineState& st, const BatchSlot& s) {
  const FrameState& fs = st.frames;
  const StreamWrite& w = s.stream;
  if (!w.ok || st.in_message != 0 || st.resync || w.psn != st.expected_psn || page_busy(fs, w.page))
    return false;
  const bool goes_on = fs.open && fs.page == w.page;
  return !goes_on || (w.psn != fs.last_psn && psn_diff_sensor(w.psn, fs.psn_first) >= 0);
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

// Team-wide, before the commit: bit i set when frame first + i would go on
// from frame first + i - 1 in a stream run (both StreamWrites, the same page,
// the next PSN), one lane a frame. What the state adds is the leader's to check.
template <class Team>
RT_HD inline uint32_t stream_links(const Team& t, const Batch& b, uint32_t first, uint32_t ready) {
  const auto linked = [&](uint32_t i) {
    if (i == 0 || i >= ready - first) return false;
    const StreamWrite& a = b.slot[(first + i - 1) & (b.depth - 1)].stream;
    const StreamWrite& w = b.slot[(first + i) & (b.depth - 1)].stream;
    return a.ok && w.ok && a.page == w.page && w.psn == psn_add(a.psn, 1);
  };
  if constexpr (Team::kLanes == 1) {
    uint32_t links = 0;
    for (uint32_t i = 1; i < ready - first; ++i) links |= uint32_t(linked(i)) << i;
    return links;
  } else {
    return t.ballot(linked(t.lane()));
  }
}

// Commit: the frames from q on that stream_takes() takes, q first (opening its
// frame when it starts one), and those linked after it: what
// receive_decoded() changes for each, at once (their placements are noted by
// classify). `links` >> 1 bit i: frame q + 1 + i is linked to the one before.
// Returns how many it took (>= 1); b.run_bytes their payload bytes.
RT_HD inline uint32_t commit_stream_run(const EngineDesc& d, EngineState& st, Batch& b,
                                        uint32_t first, uint32_t q, uint32_t ready,
                                        uint32_t links) {
  FrameState& fs = st.frames;
  const BatchSlot& head = b.slot[q & (b.depth - 1)];
  const bool opens = !fs.open || fs.page != head.stream.page;
  // The table for the stream's packet size, once two runs in a row begin with it (a frame's
  // shorter last packet does not make one); classify reads its size too.
  if (head.stream.len != b.fold.n && head.stream.len == b.fold_seen)
    crc32_zeros_table(b.fold, head.stream.len);
  b.fold_seen = head.stream.len;
  if (opens) {  // as frames_write() would: the packet that opens it counts as its first
    if (fs.open) close_incomplete(d.frames, st);
    open_frame(d.frames, st, head.stream.psn, head.stream.page, head.stream.offset, head.stream.len,
               head.ts);
  }
  uint32_t k = 0;
  uint64_t frame_bytes = 0, payload = 0;
  uint32_t end = uint32_t(fs.bytes);
  const StreamWrite* last = nullptr;
  uint64_t last_ts = 0;
  // The span the run writes, and whether each frame writes past the one before (a
  // sensor's frames do): then the run needs order_placement() only as a whole.
  uintptr_t lo = ~uintptr_t(0), hi = 0;
  bool ascending = true;
  // Linked frames go on in sequence; only how far from the frame's first PSN is the state's.
  for (; q + k != ready && (k == 0 || (links >> k & 1u)); ++k) {
    const BatchSlot& s = b.slot[(q + k) & (b.depth - 1)];
    const StreamWrite& w = s.stream;
    if (k && psn_diff_sensor(w.psn, fs.psn_first) < 0) break;
    if (w.len) {
      const uintptr_t at = reinterpret_cast<uintptr_t>(w.dst);
      ascending = ascending && at >= hi;
      lo = at < lo ? at : lo;
      hi = at + w.len > hi ? at + w.len : hi;
    }
    frame_bytes += s.len;
    payload += w.len;
    if (w.len && w.offset + w.len > end) end = w.offset + w.len;
    last = &w;
    last_ts = s.ts;
  }
  if (ascending && (hi <= lo || lo >= b.pending_hi || hi <= b.pending_lo)) {
    if (hi > lo) {
      b.pending_lo = lo < b.pending_lo ? lo : b.pending_lo;
      b.pending_hi = hi > b.pending_hi ? hi : b.pending_hi;
    }
  } else {
    for (uint32_t i = 0; i < k; ++i) {
      const StreamWrite& w = b.slot[(q + i) & (b.depth - 1)].stream;
      order_placement(b, first, q + i, w.dst, w.len);
    }
  }
  // The run's payload CRCs into the page's, in order, the register kept in a register:
  // the only chain from packet to packet is its four table lookups.
  if (fs.crc_valid) {
    uint32_t raw = fs.crc_raw;
    uint64_t at = fs.crc_len;
    bool valid = true;
    for (uint32_t i = 0; i < k && valid; ++i) {
      const BatchSlot& s = b.slot[(q + i) & (b.depth - 1)];
      const uint32_t n = s.stream.len;
      if (!n) continue;
      valid = s.pay_raw_ok && s.stream.offset == at;
      raw = (b.fold.n == n ? crc32_zeros_by(b.fold, raw)
                           : crc32_zeros(detail::crc32_tables(), raw, n)) ^
            s.pay_raw;
      at += n;
    }
    fs.crc_raw = raw;
    fs.crc_len = at;
    fs.crc_valid = valid;
  }
  count(st.tally, Counter::kRxPackets, k);
  count(st.tally, Counter::kRxBytes, frame_bytes);
  st.write =
      WriteProgress{d.frames.region, last->va, last->va + last->len, last->dma_len - last->len};
  fs.packets += opens ? k - 1 : k;
  fs.last_psn = last->psn;
  fs.rx_last_ns = last_ts;
  fs.bytes = end;
  st.in_message = 0;
  st.expected_psn = psn_add(last->psn, 1);
  if (d.qp.transport == Transport::RC) {
    st.nak_sent = false;
    st.msn = psn_add(st.msn, k);
  }
  b.run_bytes = payload;
  return k;
}

// Team-wide: classify rx sequence number `seq` (published, as frames_ready
// saw) into `s`: read, decode, ICRC. Changes no engine state.
template <Scope S, class Team>
RT_HD inline void classify(const Team& t, const EngineDesc& d, uint32_t seq, BatchSlot& s,
                           uint8_t* staging, uint64_t* prof, bool tails) {
  const uint64_t c0 = crew_clock();
  const uint8_t* slot = d.rx.slot(seq);
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
  const uint8_t* frame = slot;
  if (staging) {
    stage_frame(t, staging, slot, len);
    frame = staging;
  }
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
  // The frames handler's packets: the payload's CRC register from the ICRC's own pass, for
  // the page's CRC (fold_page_crc). A payload with pad has pad bytes after it in that pass.
  uint32_t pay_raw = 0;
  bool pay_raw_ok = false;
  if (d.check_icrc && s.r.ok()) {
    const FrameView& f = s.r.frame;
    const bool fold = tails && d.handler.kind == HandlerKind::kFrames && f.pad == 0 &&
                      f.payload_len >= kFoldPacketMinBytes;
    if constexpr (Team::kLanes == 1) {
      icrc = icrc_ok(f) ? IcrcVerdict::kGood : IcrcVerdict::kBad;
      if (fold) pay_raw = crc32_raw_team(t, f.base + f.payload, f.payload_len);
      pay_raw_ok = fold;
    } else {
      const IcrcLayout l{f.l3,   f.l3_len, f.ip_version, f.bth + uint32_t(sizeof(Bth)) - f.l3,
                         f.icrc, nullptr};
      if (f.ip_version && icrc_team_fits(l)) {
        const uint32_t got =
            fold ? icrc_team_tail(t, frame, l, f.payload_len, &pay_raw) : icrc_team(t, frame, l);
        icrc = got == f.icrc_field() ? IcrcVerdict::kGood : IcrcVerdict::kBad;
        pay_raw_ok = fold;
      }
    }
  }
  if (t.leader()) {
    c3 = crew_clock();
    s.icrc = icrc;
    s.pay_raw = pay_raw;
    s.pay_raw_ok = pay_raw_ok;
    s.stream = stream_write(d, s.r, icrc);
    // A run's placement, noted now; the commit notes another for a frame it takes otherwise.
    s.place_dst = s.stream.dst;
    s.place_src = s.r.frame.base + s.r.frame.payload;
    s.place_len = s.stream.ok ? s.stream.len : 0;
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

// Commit: may frame `s` be committed while placements of this batch are not
// done yet? Only a WRITE whose handling does nothing but note its own: no
// handler reads it (the frames handler takes an immediate as a frame's end)
// and, on RC, nothing is sent for it (no ACK asked, not a duplicate).
RT_HD inline bool places_only(const EngineDesc& d, const EngineState& st, const BatchSlot& s) {
  if (!s.r.ok()) return true;  // counted as malformed: nothing sent, nothing read
  const FrameView& f = s.r.frame;
  if (!(f.op.flags & kWrite) || f.op.is(kResponse) || f.op.is(kAtomic)) return false;
  if (f.op.has(kImmDt) && d.handler.kind != HandlerKind::kFrames) return false;
  if (d.qp.transport != Transport::RC) return true;
  const Bth& bth = f.bth_hdr();
  return !bth.ack_requested() && bth.psn.get() == st.expected_psn;
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
  if (lone) {
    if (c.team_index() == 0) {
      const uint32_t done = engine_step<S>(t, d, st, stg, 1);
      if (t.leader()) {
        b.classified = b.ready = b.committed = st.rx_ci;
        b.done = done;
      }
    }
    c.sync();
    return b.done;
  }
  // classify what is new; the payloads' CRCs too (for the pages' CRCs) unless the stream's
  // packets are known to be too small for a frame to be folded (kFoldMinBytes)
  const bool tails = b.fold.n == ~uint64_t(0) || b.fold.n >= kFoldMinBytes;
  const uint32_t fresh = b.classified;
  for (uint32_t q = fresh + c.team_index(); q - fresh < ready - fresh; q += c.teams()) {
    const uint32_t i = q & (b.depth - 1);
    classify<S>(t, d, q, b.slot[i], b.staging ? b.staging + size_t(i) * d.rx.slot_bytes : nullptr,
                c.team_index() == 0 ? b.classify_cycles : nullptr, tails);
  }
  c.sync();
  const uint64_t t1 = crew_clock();
  // commit, in order
  if (c.team_index() == 0) {
    const uint32_t links = stream_links(t, b, first, ready);
    if (t.leader()) {
      b.classified = ready;
      b.pending_lo = ~uintptr_t(0);
      b.pending_hi = 0;
      bool placing = false;
      uint32_t q = first;
      while (q != ready) {
        BatchSlot& s = b.slot[q & (b.depth - 1)];
        if (placing && !places_only(d, st, s)) break;
        if (stream_takes(st, s)) {
          const uint32_t k = commit_stream_run(d, st, b, first, q, ready, links >> (q - first));
          placing = placing || b.run_bytes;
          q += k;
          continue;  // a run ends on nothing that waits
        }
        st.pkt_raw = s.pay_raw;
        st.pkt_raw_ok = s.pay_raw_ok;
        receive_decoded<S>(d, st, stg, s.r, s.len, s.ts, s.icrc);
        st.pkt_raw_ok = false;
        s.place_dst = st.place_dst;
        s.place_src = st.place_src;
        s.place_len = st.place_len;
        st.place_dst = nullptr;
        st.place_src = nullptr;
        st.place_len = 0;
        order_placement(b, first, q, s.place_dst, s.place_len);
        ++q;
        placing = placing || s.place_len;
        if (st.ack_pending || st.frames.pending) break;  // waits for its own placement
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
  if (c.leader() && st.ack_pending) {
    st.ack_pending = false;
    send_aeth<S>(d, st, stg, kAethAck, st.ack_psn);
  }
  if (st.frames.pending) {
    const FrameState& fs = st.frames;
    const uint64_t n = pending_frame_bytes(d.frames, fs);
    // The frame's statistic by the leader's team (frame_statistic); the leader has its result.
    int result = kNoReply;
    if (d.frames.statistic) {
      if (c.team_index() == 0) result = frame_statistic(c.team(), d, st);
      c.sync();
    }
    if (fs.crc_valid && fs.crc_len == n) {  // folded from the packets: the page is not read
      if (c.leader()) {
        if (b.start_n != n) {
          b.start_n = n;
          b.start_crc = crc32_mulmod(crc32_x8n(n), 0xFFFFFFFFu);
        }
        count(st.tally, Counter::kFramesCrcFolded);
        record_frame<S>(d, st, ~(fs.crc_raw ^ b.start_crc), result);
      }
    } else {
      const uint32_t crc = crc32_crew(c, b, pending_frame_page(d, fs), n);
      if (c.leader()) record_frame<S>(d, st, crc, result);
    }
  }
  if (c.leader()) {
    st.rx_ci = committed;
    b.done = end_pass<S>(d, st, stg, committed - first);
    const uint64_t t4 = crew_clock();
    b.cycles[0] += t1 - t0;
    b.cycles[1] += t2 - t1;
    b.cycles[2] += t3 - t2;
    b.cycles[3] += t4 - t3;
    ++b.batches;
    b.batch_frames += committed - first;
  }
  c.sync();
  return b.done;
}

}  // namespace rt
