// The peer's requesting half in Verbs mode's loopback, run by the host: each request is an
// RC RDMA WRITE of [header | payload] into slot i % slots of our ring (no AckReq) and a
// FETCH_ADD of 1 on our signal word (whose ATOMIC ACKNOWLEDGE covers both), sent on `to_ours`:
// the requester's end of a split loopback to our port (whose NIC, the software ConnectX, is the
// responder), or a packet socket on the peer's end of a veth pair. The reply has
// landed when the peer's own signal word (a region of `peer`, whose engine places our
// put_signals) has counted it; it is then read from the peer's ring and compared. One request
// in flight at a time: a ping-pong, timed on the host clock from the WRITE's injection to the
// signal.
#pragma once

#include <cstdint>
#include <vector>

#include "rt/host/transceiver.h"
#include "rt/host/wire.h"
#include "rt/protocol/encode.h"

namespace rt::host {

struct VerbsRequestParams {
  FarEndParams far;       // payloads, expected replies (empty: echo), count, timeout_s
  FrameSpec spec;         // the peer's addresses towards ours, and our QP number as dest_qp
  uint32_t peer_qpn = 0;  // the requester's own QP: acknowledgements to it are ours to read
  uint64_t ring_va = 0;   // our ring and signal word as registered in `ours`
  uint32_t ring_rkey = 0;
  uint64_t signal_va = 0;
  uint32_t signal_rkey = 0;
  uint32_t slots = 16;
  uint32_t slot_bytes = 256;
  uint32_t peer_ring_region = 0;  // regions of `peer`
  uint32_t peer_signal_region = 1;
  uint32_t first_psn = 0;      // the PSN of this run's first packet
  uint64_t first_request = 0;  // requests (= replies) of the runs before this one
};

struct VerbsRequestRun {
  FarEndRun run;  // wrong: replies that differ; bad_frames: acknowledgements that were NAKs
  // Per reply: from the WRITE's injection to our NIC's ATOMIC ACKNOWLEDGE of the signal
  // reaching the peer (the request is in our memory and signalled): the first part of rtt_ns.
  std::vector<uint64_t> landed_ns;
  uint32_t next_psn = 0;
  uint32_t reply_errors = 0;  // replies whose status said the handler refused the request
};

VerbsRequestRun run_verbs_requests(Wire& to_ours, Transceiver& peer, const VerbsRequestParams& p);

}  // namespace rt::host
