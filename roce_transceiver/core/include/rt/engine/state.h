// The engine's types: its configuration (EngineDesc, read-only for the loop),
// its state (EngineState, the loop's own), and the staging buffers of an
// executor that works across a bus. Built by the host before start.
#pragma once

#include "rt/engine/completion.h"
#include "rt/engine/counters.h"
#include "rt/engine/frames.h"
#include "rt/engine/prediction.h"
#include "rt/engine/settings.h"
#include "rt/handlers/dispatch.h"
#include "rt/protocol/encode.h"
#include "rt/protocol/psn.h"
#include "rt/protocol/rc_responder.h"
#include "rt/queues/rx_ring.h"
#include "rt/queues/tx_ring.h"

namespace rt {

constexpr uint32_t kMaxRegions = 8;

struct QpConfig {
  uint32_t qpn;         // our QP: packets for any other are dropped
  uint32_t peer_qpn;    // where replies and ACKs go
  Transport transport;  // RC or UC
  uint16_t pkey;        // 0xFFFF (default partition) matches any full-member key
  uint32_t rx_psn;      // first PSN expected from the peer
  uint32_t tx_psn;      // first PSN we send
};

// Read-only for the loop; built by the host before start. Its settings (batch, check_icrc,
// ...) are the configuration's own (settings.h); the rest the host lays out.
struct EngineDesc : EngineSettings {
  QpConfig qp;
  FrameSpec reply_spec;  // our addresses -> the peer's; opcode, PSN, QP set per packet
  MemRegion regions[kMaxRegions];
  uint32_t num_regions;
  HandlerDesc handler;
  FramesDesc frames;       // handler kFrames
  uint8_t* msg_buf;        // assembles multi-packet SENDs, msg_buf_bytes of them
  uint8_t* reply_scratch;  // the handler's output when the tx ring is full
  uint32_t reply_scratch_bytes;
  // qp.retransmit (requester.h): the frames of the packets not yet acknowledged, a tx slot's
  // bytes each, rc_window of them (a power of two), and their lengths.
  uint8_t* replay;
  uint32_t* replay_len;
  AckPrediction* peer_ack;  // the peer's ACK the express path takes (prediction.h)
  RxRing rx;                // wire in
  TxRing tx;                // wire out
  RxRing host_tx;           // host -> engine: payloads to SEND to the peer
  TxRing completions;       // engine -> host: CompletionRecord per message
  Counters* counters;       // host-visible
};

// What a team answers to an RC request after deciding about it: nothing, an ACK or NAK
// (IBA 9.7.5.1), or an ATOMIC ACKNOWLEDGE carrying the value before (9.7.5.1.2).
enum class Response : uint8_t { kNone, kAeth, kAtomicAck };

// What the responder decided for one packet (responder.h) and the team carries out after it
// (transmit.h carry_out), in this order: the payload placed, a message delivered to the
// handler (its reply and record), then the response. The decision sends nothing, runs no
// handler and copies no payload; the carrying out decides nothing.
struct Actions {
  uint8_t* place_dst;  // a WRITE's or a SEND's payload, into its region or the assembly buffer
  const uint8_t* place_src;
  uint32_t place_len;  // 0: nothing to place
  bool deliver;        // `msg` is complete: run the handler, send its reply, record it
  Message msg;
  uint32_t msg_psn;  // the PSN that completed it
  uint64_t msg_ts;   // and when it arrived
  Response response;
  uint8_t syndrome;   // kAeth's
  uint32_t resp_psn;  // the PSN the response acknowledges
  uint32_t resp_msn;  // our MSN as the decision left it
  uint64_t orig;      // kAtomicAck's value before
};

// The RC requester's account of what we sent (requester.h): PSNs before una are acknowledged,
// [una, next_tx) are on the wire, [next_tx, send_psn) are queued in the replay store.
struct RequesterState {
  uint32_t una;          // the oldest PSN not acknowledged
  uint32_t next_tx;      // the next PSN to put on the wire (moved back to send again)
  uint32_t sent_end;     // the PSN after the highest one ever sent: below it, a resend
  uint32_t retries;      // timeouts and sequence NAKs since the last progress
  uint32_t rnr_retries;  // RNR NAKs since the last progress
  bool error;            // retries exhausted or a fatal NAK: nothing more is sent
  uint64_t deadline_ns;  // when the oldest packet on the wire times out; 0: not started
  uint64_t resume_ns;    // an RNR NAK's timer: nothing is sent before it; 0: none
};

// The loop's own state, in memory close to the executor.
struct EngineState {
  uint32_t rx_ci;
  uint32_t rx_released;  // slots given back so far (<= rx_ci)
  uint32_t host_ci;
  uint32_t tx_pi;
  uint32_t tx_ci_seen;  // last reading of the tx consumer index
  uint32_t comp_pi;
  uint32_t comp_ci_seen;    // last reading of the completion consumer index
  uint32_t comp_published;  // records the host has been shown (comp_pi after a doorbell)
  uint32_t comp_read_at;    // the pass from which a full ring reads comp_ci_seen again
  uint32_t passes;          // loop passes, for work done only every so often
  uint32_t idle_passes;     // passes in a row that found nothing
  uint32_t since_publish;   // messages since the counters were last published
  uint32_t expected_psn;    // next PSN from the peer
  uint32_t send_psn;        // next PSN we send
  uint32_t msn;             // RC: messages completed, carried in AETH
  uint16_t in_message;      // 0, kSend or kWrite: the kind of the message in progress
  bool resync;              // UC: after a gap, drop until a First or Only
  bool nak_sent;            // RC: one NAK per gap (IBA C9-110)
  uint32_t msg_len;         // SEND bytes assembled so far
  WriteProgress write;      // the WRITE in progress
  AtomicReplay atomic;      // RC: the last atomic executed, replayed to a duplicate of it
  RequesterState rc;        // qp.retransmit: what we sent and the peer has not acknowledged
  // What the decision about the packet just taken left to carry out (responder.h).
  Actions act;
  CounterTally tally;
  Prediction pred;    // the express path's view of the queue pair
  FrameState frames;  // handler kFrames: the frame in progress
};

// The decision's RC answer to the request at `psn`: an AETH of `syndrome` with our MSN as
// the decision leaves it (the ACK of a message counts it; IBA 9.7.5.1).
RT_HD inline void answer(EngineState& st, uint8_t syndrome, uint32_t psn) {
  st.act.response = Response::kAeth;
  st.act.syndrome = syndrome;
  st.act.resp_psn = psn;
  st.act.resp_msn = st.msn;
}

// The decision's placement: n bytes from `src` to `dst`, by the team after it.
RT_HD inline void place(EngineState& st, uint8_t* dst, const uint8_t* src, uint32_t n) {
  st.act.place_dst = dst;
  st.act.place_src = src;
  st.act.place_len = n;
}

// Leader: the host sees every completion record written so far (one release at the system
// scope for all of them). Called when completion_batch are written, when the loop settles,
// when the ring is full, and where a loop ends (an epoch, the CPU thread's stop).
RT_HD inline void publish_completions(const EngineDesc& d, EngineState& st) {
  if (st.comp_pi == st.comp_published) return;
  tx_doorbell<Scope::kSystem>(d.completions, st.comp_pi);
  st.comp_published = st.comp_pi;
}

// Staging buffers for an executor whose rings sit across the bus from it (a
// kernel and pinned host memory, or device memory and a kernel's shared
// memory): the team copies each frame in, and each reply out, with 16-byte
// accesses issued together, instead of reading and writing the ring byte by
// byte. Null: the engine works in the ring slots directly.
struct Staging {
  uint8_t* rx;  // slot_bytes, 16-byte aligned
  uint8_t* tx;  // slot_bytes, 16-byte aligned
};

// What a warp reads of a slot together with its descriptor: 16 bytes a lane.
constexpr uint32_t kReadAheadBytes = 512;

// Our SEND Only to the peer; its PSN is set per packet.
RT_HD inline FrameSpec reply_send_spec(const EngineDesc& d) {
  FrameSpec spec = d.reply_spec;
  spec.opcode = make_opcode(d.qp.transport, 0x04);  // SEND_ONLY
  spec.dest_qp = d.qp.peer_qpn;
  spec.ack_req = d.qp.transport == Transport::RC;
  return spec;
}

// Our RC ACKNOWLEDGE (IBA 9.7.5.1) of the request at `psn`: its AETH's syndrome
// and MSN. The general path encodes it per ACK, the express path once (predict_ack).
RT_HD inline FrameSpec ack_spec(const EngineDesc& d, uint8_t syndrome, uint32_t psn, uint32_t msn) {
  return aeth_spec(d.reply_spec, d.qp.peer_qpn, syndrome, psn, msn);
}

RT_HD inline void engine_init(const EngineDesc& d, EngineState* st) {
  *st = EngineState{};
  st->frames.slice_due = kNoSliceDue;  // no frame open: no slice is due
  st->expected_psn = d.qp.rx_psn & kPsnMask;
  st->send_psn = d.qp.tx_psn & kPsnMask;
  st->rc.una = st->rc.next_tx = st->rc.sent_end = st->send_psn;
  predict_reply(st->pred, reply_send_spec(d));
  if (d.qp.transport == Transport::RC) predict_ack(st->pred, ack_spec(d, kAethAck, 0, 0));
}

}  // namespace rt
