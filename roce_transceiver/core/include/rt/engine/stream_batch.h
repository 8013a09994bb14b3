// The frames handler's batch step: an HSB sensor's stream of RDMA WRITE Onlys
// (frames.h), a batch at a time, one thread a packet: classify in stream_pass.h, commit in
// stream_commit.h, the step that drives them here.
//
//   classify  two passes, each thread its packets (k, k + threads, ...). The
//             header: staged (its first 96 bytes in one round trip), decoded from
//             there, and the checks a stream packet passes on its own
//             (QP, P_Key, transport, no ACK asked, its RETH inside the pages).
//             Then one pass over the packet's bytes that computes its ICRC and,
//             on UC, stores its payload in its page: 16-byte loads, the CRC of a
//             16-byte chunk from conflict-free nibble tables, 16-byte stores;
//             the data's own CRC register comes out of the same pass. A packet
//             that is not a stream WRITE is left to the responder.
//   runs      the crew: which packets go on from the one before (links), and at
//             each run's head its length and its packets' CRCs folded together
//             (link_runs, stream_commit.h): a bitmask of breaks and bit scans, not a lane
//             walking the packets.
//   commit    the crew leader, in ring order: the PSN and the frame account
//             (frame_packet, frame_stream.h: the one accounting) of a run's head,
//             the run after it at once (commit_linked_run), a frame's end, and its
//             record at once when its page CRC is folded from its packets. What
//             is not a stream WRITE in order is the responder's (decide,
//             responder.h) and ends the batch.
//   execute   the placements the commit noted (RC, where nothing is placed
//             before its PSN is known to be the next; the responder's).
//   publish   what the responder's decision sends (transmit.h), a frame whose
//             page is read for its CRC, slots back, counters (end_pass).
//
// Placement before the verdict. On UC a stream WRITE whose checks pass is always
// executed (it starts a message, so no PSN or sequence error drops it): its
// payload goes where the responder would put it, and only into a page the
// engine holds. A page becomes the host's at a frame's end, so a packet does not
// go into the page of an end earlier in its batch; and nothing after the first
// packet the responder takes is placed early. A packet whose ICRC then fails
// wrote into a page whose frame lacks its PSN: that frame records the packet as
// lost and its page CRC is read from the page, never folded past it.
#pragma once

#include "rt/engine/express_batch.h"
#include "rt/engine/stream_commit.h"

namespace rt {

// One pass of a frames queue's loop by a crew. Returns the work done, the same for
// every thread.
template <Scope S, class Crew>
RT_HD inline uint32_t stream_step(const Crew& c, const EngineDesc& d, EngineState& st, Batch& b,
                                  Staging* stg) {
  using namespace engine_detail;
  const auto t = c.team();
  const uint32_t threads = c.teams() * t.size();
  const uint32_t me = c.team_index() * t.size() + t.lane();
  StreamPacket* pk = b.packets;
  const uint64_t t0 = crew_clock();
  if (c.leader()) {
    b.ready = b.depth;
    b.first_other = b.depth;
    b.ends = 0;
  }
  c.sync();
  const uint32_t first = st.rx_ci;
  // poll: how many in a row are published (each thread its descriptors, all in flight)
  for (uint32_t i = me; i < b.depth; i += threads)
    if (!rx_poll<S>(d.rx, first + i)) crew_min(c, &b.ready, i);
  c.sync();
  const uint32_t n = b.ready;
  if (n == 0) {
    uint32_t done = 0;
    if (c.leader()) done = b.done = end_pass<S>(d, st, stg, 0);
    c.sync();
    done = b.done;
    c.sync();
    return done;
  }
  const uint64_t t_poll = crew_clock();
  // classify, the header
  for (uint32_t i = me; i < n; i += threads) {
    StreamPacket& p = pk[i];
    const RxDesc& desc = d.rx.descs[(first + i) & d.rx.mask()];
    p.len = desc.len < d.rx.slot_bytes ? desc.len : d.rx.slot_bytes;
    p.ts = desc.timestamp_ns;
    p.frame = d.rx.slot(first + i);
    classify_header(d, p);
    if (p.kind == StreamKind::kOther) crew_min(c, &b.first_other, i);
    if (p.kind == StreamKind::kEnd) {
      const uint32_t k = crew_add(c, &b.ends, 1);
      if (k < kMaxStreamEnds) {
        b.end_index[k] = i;
        b.end_page[k] = p.page;
      } else {
        crew_min(c, &b.first_other, i);  // places nothing early after an end not kept
      }
    }
  }
  c.sync();
  const uint64_t t_head = crew_clock();
  // classify, the pass over the bytes
  const uint32_t ends = b.ends < kMaxStreamEnds ? b.ends : kMaxStreamEnds;
  const bool uc = d.qp.transport == Transport::UC;
  const auto placeable = [&](uint32_t i, const StreamPacket& p) {
    bool place = uc && i < b.first_other && page_ours(d, st, p.page);
    for (uint32_t k = 0; place && k < ends; ++k)
      if (b.end_index[k] < i && b.end_page[k] == p.page) place = false;
    return place;
  };
  for (uint32_t i = me; i < n; i += threads) {
    StreamPacket& p = pk[i];
    if (p.kind == StreamKind::kOther) continue;
    classify_pass(d, p, placeable(i, p));
  }
  c.sync();
  link_runs(c, d, b, n);
  c.sync();
  const uint64_t t1 = crew_clock();
  // commit, in order
  if (c.leader()) {
    fence_acquire<S>();  // the frames' bytes after the poll's acquires, by other threads
    b.committed = first + stream_commit<S>(d, st, b, n);
  }
  c.sync();
  const uint64_t t2 = crew_clock();
  // execute
  const uint32_t committed = b.committed - first;
  for (uint32_t i = c.team_index(); i < committed; i += c.teams()) {
    const StreamPacket& p = pk[i];
    if (p.execute || (p.link && !p.placed && pk[p.head].run_taken))
      copy_bytes_team(t, p.dst, p.frame + p.payload_at, p.pay_len);
  }
  c.sync();
  const uint64_t t3 = crew_clock();
  // publish
  if (c.leader() && sends(st)) send_actions<S>(d, st, stg);
  // Slices the commit left for after execute (theirs, or the responder's packet's, bytes).
  if (c.leader() && st.frames.bytes >= st.frames.slice_due) record_slices(d, st, false);
  if (st.frames.pending) {
    const FrameState& fs = st.frames;
    const uint64_t bytes = pending_frame_bytes(d.frames, fs);
    int result = kNoReply;
    if (d.frames.statistic) {
      if (c.team_index() == 0) result = frame_statistic(c.team(), d, st);
      c.sync();
    }
    if (fs.crc_valid && fs.crc_len == bytes) {
      if (c.leader()) record_frame(d, st, folded_page_crc(b, st, bytes), result);
    } else {
      const uint32_t crc = crc32_crew(c, b, pending_frame_page(d, fs), bytes);
      if (c.leader()) record_frame(d, st, crc, result);
    }
  }
  if (b.fold.n != b.runs.n && b.fold.n != ~uint64_t(0)) {  // the stream's size: its runs' tables
    c.sync();
    for (uint32_t e = me; e < kRunShiftEntries; e += threads)
      (&b.runs.t[0][0][0])[e] = crc32_run_shift_entry(b.fold.n, e);
    c.sync();
    if (c.leader()) b.runs.n = b.fold.n;
  }
  if (c.leader()) {
    publish_completions(d, st);  // the records the commit wrote, their pages placed
    st.rx_ci = b.committed;
    b.done = end_pass<S>(d, st, stg, committed);
    count_batch(b, t0, t1, t2, t3, committed);
    b.classify_cycles[0] += t_poll - t0;
    b.classify_cycles[1] += t_head - t_poll;
    b.classify_cycles[2] += t1 - t_head;
    b.classify_cycles[4] += n;
  }
  c.sync();
  const uint32_t done = b.done;
  c.sync();
  return done;
}

// A frames queue's batch depth: queues.batch, whatever the executor (each thread takes
// every threads-th packet of it).
RT_HD inline uint32_t stream_depth(const EngineDesc& d) {
  return d.batch < kMaxStreamBatch ? d.batch : kMaxStreamBatch;
}

// One pass of a queue's loop by a crew: the frames stream's step, the express batch's
// (requests with the express path on), or the batch step.
template <Scope S, class Crew>
RT_HD inline uint32_t crew_pass(const Crew& c, const EngineDesc& d, EngineState& st, Batch& b,
                                Staging* stg = nullptr) {
  if (d.handler.kind == HandlerKind::kFrames) return stream_step<S>(c, d, st, b, stg);
  if (d.express) return express_batch_step<S>(c, d, st, b, stg);
  return crew_step<S>(c, d, st, b, stg);
}

}  // namespace rt
