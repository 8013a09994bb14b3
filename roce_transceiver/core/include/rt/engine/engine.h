// The data-path engine (Ethernet mode): the persistent loop's body.
//
// engine_step() takes requests off the rx ring one at a time: each the
// express path's (express.h) when its header is the predicted one, else the
// responder's decision (responder.h) and its actions carried out by the team
// (transmit.h); then it releases the slots, sends what the host queued and
// publishes the counters. It is the request queues' step; batches and the
// frames stream take the crew's (batch.h, stream_batch.h), which end their
// passes here too (end_pass). The CPU executor calls them from a thread, the
// CUDA executor from a persistent kernel: these files are the one source.
//
// RT_HD code: no exceptions, no std containers, no virtual calls; every loop
// is bounded by a batch or a length.
#pragma once

#include "rt/engine/express.h"

namespace rt {

// Leader, at the end of a pass that did `done` (frames taken): the host's
// sends now and then, slots back, counters out. Returns the work done with
// the host's sends.
template <Scope S>
RT_HD inline uint32_t end_pass(const EngineDesc& d, EngineState& st, const Staging* stg,
                               uint32_t done) {
  using namespace engine_detail;
  ++st.passes;
  // The host's send ring is polled every 16th pass: sends are not on the
  // request/reply critical path, and each poll may cross the bus.
  if ((st.passes & 15) == 0) done += drain_host_tx<S>(d, st, stg);
  // qp.retransmit: the oldest packet's timer, and what is queued (requester.h).
  if (rc_reliable(d) && st.rc.una != st.send_psn) done += rc_service<S>(d, st);
  st.idle_passes = done ? 0 : st.idle_passes + 1;
  // Once the loop has been idle a few passes: not in the pass right after a
  // reply, where the next request is likely on its way.
  const bool settled = st.idle_passes == d.settle_passes;
  // Slots go back in bulk (each release is a fence and a bus write), and
  // when the loop settles, so a producer never waits long on a lazy release.
  const uint32_t held = st.rx_ci - st.rx_released;
  if (held && (settled || held >= (d.rx.depth() >> 2))) {
    rx_release<S>(d.rx, st.rx_ci);
    st.rx_released = st.rx_ci;
  }
  // Completion records the batch has not published yet: the host sees them once the loop
  // is idle, the fence then off the request/reply path.
  if (settled) publish_completions(d, st);
  st.since_publish += done;
  if (st.tally.dirty && (settled || st.since_publish >= 32)) {
    publish<Scope::kSystem>(st.tally, d.counters);
    st.since_publish = 0;
  }
  return done;
}

// One pass of the loop, run by a team (team.h): a CPU thread alone, or a
// warp. Returns the work done (packets and host sends), so an executor can
// back off when it is 0. S is the scope of the wire rings (rx, tx): kSystem
// when the far side is a CPU thread, kDevice when it is a GPU block. The
// host-facing rings and the counters are always kSystem. `st` is shared by the
// team (a warp keeps it in shared memory).
template <Scope S, class Team>
RT_HD inline uint32_t engine_step(const Team& t, const EngineDesc& d, EngineState& st,
                                  Staging* stg = nullptr, uint32_t max_rx = 0xFFFFFFFFu) {
  using namespace engine_detail;
  const uint32_t limit = max_rx < d.batch ? max_rx : d.batch;
  uint32_t done = 0;
  for (; done < limit; ++done) {
    Arrival a = arrive<S>(t, d, st, stg);
    if (!a.frame) break;
    // A frame read in the same trip as its descriptor may be the slot's last one, still:
    // its ICRC does not match, and the express path takes it once it is read again, in
    // order (every request but a damaged one takes the path it was predicted for).
    // qp.retransmit: the peer's ACK is tried as read in the same trip as its descriptor (its
    // ICRC then checked): a frame read again across the bus costs the request behind it ~1.5
    // us with a CPU far end.
    bool took = express<S>(t, d, st, stg, a) || express_ack<S>(t, d, st, a);
    while (!took && a.speculative) {
      stage_ordered<S>(t, d, st.rx_ci, stg, a.len);
      a.speculative = false;
      took = express<S>(t, d, st, stg, a) || express_ack<S>(t, d, st, a);
    }
    if (!took) {
      const IcrcVerdict icrc = icrc_verdict(t, d, a.frame, a.len);
      // Every lane has read the state express() decided on (the prediction, the PSN)
      // before the leader changes it: a lane still reading would take the express
      // path alone (found by the host warp's divergence check, tests/cpp).
      t.sync();
      if (t.leader()) decide(d, st, decode(ByteSpan(a.frame, a.len)), a.len, a.ts, icrc);
      t.sync();
      carry_out<S>(t, d, st, stg);
    }
    if (t.leader()) ++st.rx_ci;
    t.sync();
  }
  if (t.leader()) done = end_pass<S>(d, st, stg, done);
  done = t.from_leader(done);
  t.sync();
  return done;
}

#if RT_HOST_FUNCTIONS
// A CPU thread's pass: the team of one.
template <Scope S>
inline uint32_t engine_step(const EngineDesc& d, EngineState& st, Staging* stg = nullptr,
                            uint32_t max_rx = 0xFFFFFFFFu) {
  return engine_step<S>(SoloTeam{}, d, st, stg, max_rx);
}
#endif

}  // namespace rt
