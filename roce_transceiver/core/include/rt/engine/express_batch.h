// The express path by a crew (crew.h): the requests waiting on a queue taken
// several at once, each by its own team, behind one doorbell.
//
//   classify  per request, in parallel (team k takes requests k, k + teams()...):
//             read it (in one trip, again in order if that missed: arrive_ahead_at),
//             match it at its PSN (the expected one plus its
//             place in the batch) and run its handler into its own staging.
//             Pure: the state is untouched.
//   commit    the crew leader: the batch is the requests before the first that
//             did not match (a WRITE, a header or PSN not predicted, a bad ICRC)
//             and that fit the tx ring; each gets its tx slots, its reply's PSN
//             and its MSN in ring order.
//   execute   per request, in parallel: its reply (and RC ACK) built a word a
//             lane and stored in its slots, their descriptors written.
//   publish   the crew leader: one doorbell for every frame, then the books
//             (counters, PSNs, MSN) in order and the completion records in order.
//
// Exact: the frames sent, their order, the counters, the state and the records
// are what express() leaves after taking the same requests one at a time. It
// holds because the express path's handlers are stateless (express is off for a
// user handler with state) and only SENDs join a batch: a WRITE places into
// memory a later handler may read, so it goes alone. A request that does not
// match ends the batch and is left, with everything after it, to the next pass,
// where it goes alone (engine_step: express or the responder). One request
// waiting goes alone too, at once: a batch is for requests that queue up.
#pragma once

#include "rt/engine/batch.h"

namespace rt {

// One pass of an express queue's loop by a crew: a batch of the requests waiting, or
// engine_step() by team 0 for a lone one (batch.h's lone_step). Returns the work done, the
// same for every thread. b.depth is the batch's bound (batch_depth), b.staging holds
// batch_stage_bytes(d) a request: the frame (read in place when `stg` is null: a CPU
// thread's) and then the reply the handler writes.
template <Scope S, class Crew>
RT_HD inline uint32_t express_batch_step(const Crew& c, const EngineDesc& d, EngineState& st,
                                         Batch& b, Staging* stg = nullptr) {
  using namespace engine_detail;
  const auto t = c.team();
  const uint64_t t0 = crew_clock();
  if (c.team_index() == 0) {
    const uint32_t n = b.depth < 2 ? 0 : frames_ready<S>(t, d.rx, st.rx_ci, b.depth);
    if (t.leader()) b.ready = st.rx_ci + n;
  }
  c.sync();
  // Read by every thread before team 0 may change them (lone_step).
  const uint32_t first = st.rx_ci;
  const uint32_t n = b.ready - first;
  c.sync();
  // A queue without batches takes queues.batch a pass, as the one-warp kernel does; a lone
  // request, itself (a second one arriving meanwhile starts a batch in the next pass).
  if (n < 2) return lone_step<S>(c, d, st, b, stg, b.depth < 2 ? d.batch : 1u);
  // classify: match and handle, each request into its own slot and staging
  const uint64_t each = batch_stage_bytes(d);
  for (uint32_t k = c.team_index(); k < n; k += c.teams()) {
    uint8_t* mine = b.staging + size_t(k) * each;
    // Staged (a GPU's crew): read in one trip, and again in order if that read missed.
    Arrival a =
        stg ? arrive_ahead_at<S>(t, d, first + k, mine) : arrive_at<S>(t, d, first + k, nullptr);
    uint8_t* out = mine + d.rx.slot_bytes;
    ExpressTake x;  // every lane's own, as on the path of one; the leader's kept
    const uint32_t psn = psn_add(st.expected_psn, k);
    bool ok = express_match(t, d, st, a, psn, &x) && !x.write;
    if (!ok && a.speculative) {
      a = arrive_at<S>(t, d, first + k, mine);
      x = ExpressTake{};
      ok = express_match(t, d, st, a, psn, &x) && !x.write;
    }
    if (ok) express_handle(t, d, st.pred, a, out, nullptr, &x);
    if (t.leader()) {
      ExpressSlot& s = b.express[k];
      s.a = a;
      s.x = x;
      s.ok = ok;
    }
  }
  c.sync();
  const uint64_t t1 = crew_clock();
  // commit: the matched ones in a row that fit the ring, their slots and PSNs in order
  if (c.leader()) {
    uint32_t m = 0, frames = 0;
    for (; m < n && b.express[m].ok; ++m) frames += b.express[m].x.frames();
    // Without room for all, fewer: the responder's path counts what finds none.
    while (m && !tx_fits<S>(d, st, frames)) frames -= b.express[--m].x.frames();
    // qp.retransmit: no more replies than the window has room for.
    if (rc_reliable(d)) {
      uint32_t replies = 0;
      for (uint32_t k = 0; k < m; ++k) replies += b.express[k].x.reply_len ? 1 : 0;
      while (m && !rc_express_ok(d, st, replies)) replies -= b.express[--m].x.reply_len ? 1 : 0;
    }
    uint32_t pi = st.tx_pi, psn = st.send_psn, msn = st.msn;
    for (uint32_t k = 0; k < m; ++k) {
      ExpressSlot& s = b.express[k];
      s.pi = pi;
      s.x.r.slot = d.tx.slot(pi);
      s.psn = psn;
      msn = psn_add(msn, 1);
      s.msn = msn;
      pi += s.x.frames();
      if (s.x.reply_len) psn = psn_add(psn, 1);
    }
    b.committed = first + m;
  }
  c.sync();
  const uint32_t m = b.committed - first;
  // The first did not match: it goes alone (it may teach the express path a header, and
  // those after it then take a batch).
  if (m == 0) {
    c.sync();  // every thread has read b.committed before lone_step sets it
    return lone_step<S>(c, d, st, b, stg, 1);
  }
  const uint64_t t2 = crew_clock();
  // execute: each reply (and ACK) into its slots
  for (uint32_t k = c.team_index(); k < m; k += c.teams()) {
    const ExpressSlot& s = b.express[k];
    uint8_t* out = b.staging + size_t(k) * each + d.rx.slot_bytes;
    const uint32_t ack_pi = s.pi + (s.x.reply_len ? 1 : 0);
    express_build(t, st.pred, s.x, out, true, s.x.r.slot, d.tx.slot(ack_pi), s.psn, s.msn,
                  NoMarks{}, rc_reliable(d) && s.x.reply_len ? rc_replay_slot(d, s.psn) : nullptr);
    if (t.leader()) {
      // Stamped with the request's arrival, as express() does.
      uint32_t pi = s.pi;
      if (s.x.reply_len) tx_prepare(d.tx, pi, s.x.reply_len, 0, s.a.ts);
      if (s.x.ack) tx_prepare(d.tx, pi, s.x.ack_len, 0, s.a.ts);
    }
  }
  c.sync();
  const uint64_t t3 = crew_clock();
  // publish: one doorbell, then the books in order
  if (c.leader()) {
    const ExpressSlot& last = b.express[m - 1];
    const uint32_t end = last.pi + last.x.frames();
    if (end != st.tx_pi) tx_doorbell<S>(d.tx, end);
    st.tx_pi = end;
    for (uint32_t k = 0; k < m; ++k) {
      express_count(st, b.express[k].a.len, b.express[k].x);
      express_advance(d, st, b.express[k].x);
    }
  }
  if (d.record_completions) {
    // In ring order: the team of each request writes its record, the crew in step.
    for (uint32_t k = 0; k < m; ++k) {
      c.sync();
      const ExpressSlot& s = b.express[k];
      if (k % c.teams() == c.team_index())
        record_completion(t, d, st, s.x.m, s.x.r, s.x.req.psn, s.a.ts);
    }
  }
  c.sync();
  if (c.leader()) {
    st.rx_ci = first + m;
    b.classified = b.ready = st.rx_ci;
    b.done = end_pass<S>(d, st, stg, m);
    count_batch(b, t0, t1, t2, t3, m);
  }
  c.sync();
  return b.done;
}

}  // namespace rt
