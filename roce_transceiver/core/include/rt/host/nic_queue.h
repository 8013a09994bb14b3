// One queue's rings as a NIC meets them (nic.h): it produces frames into rx and drains tx,
// from the far-side indices where they stand.
#pragma once

#include <cstdint>

#include "rt/engine/counters.h"
#include "rt/queues/rx_ring.h"
#include "rt/queues/tx_ring.h"

namespace rt::host {

class Buffer;

// The rings are addressed as the NIC reaches them: host memory, or device memory where the
// loopback's far end runs on the GPU (far_end: gpu; no other NIC is given such rings).
// `ring_drops` is the queue's ring-drop count, which the rx ring's producer owns, and
// `counters` the queue's, where it publishes it (host memory either way).
struct NicQueue {
  RxRing rx;
  uint32_t rx_prod = 0;
  TxRing tx;
  uint32_t tx_ci = 0;
  Counters* counters = nullptr;
  uint64_t* ring_drops = nullptr;
  // The queue's QP and its peer's, as its engine has them: a request for the queue is
  // addressed to qpn (steered by QP, every queue has its own), and what it sends to peer_qpn.
  uint32_t qpn = 0;
  uint32_t peer_qpn = 0;
  // The rings' memory, for a NIC that writes them whole before start() (the loopback's
  // preload); valid while the rings are.
  Buffer* memory = nullptr;
};

}  // namespace rt::host
