// A queue pair the GPU drives through GPUNetIO's verbs device API (CPU-proxy handler), with
// the software ConnectX on a thread of its own behind it and a wire (wire.h) to the peer: the
// loopback far end of a Transceiver whose engine is the RC responder (the peer's memory: a
// ring and a signal word), or a packet socket on an interface. The send ring, completion ring,
// doorbell word and the local region are in pinned host memory the GPU maps (host memory for a
// CPU-only run, where tests write WQEs themselves); the QP descriptor is in device memory, where
// the device API's atomics on it run.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "rt/host/memory.h"
#include "rt/host/transceiver.h"
#include "rt/host/wire.h"
#include "rt/verbs/soft_connectx.h"

namespace rt::host {

struct VerbsPortConfig {
  verbs::SoftConnectXConfig nic;   // QP numbers, PSN, MTU, ring sizes, addresses
  uint32_t local_bytes = 1 << 16;  // the local region WQEs take data from and results into
  uint32_t lkey = 0x1C0C;
  bool gpu = false;  // rings in pinned memory and the descriptor on the GPU
};

struct VerbsPortStats {
  verbs::SoftConnectXStats nic;
  uint64_t consumed = 0, completed = 0;
  bool in_error = false;
  std::string last_error;
};

class VerbsPort {
 public:
  // The port's packets travel on `wire` (the loopback far end of a Transceiver that must
  // outlive the port, or a packet socket).
  VerbsPort(const VerbsPortConfig& cfg, std::unique_ptr<Wire> wire);
  ~VerbsPort();
  VerbsPort(const VerbsPort&) = delete;
  VerbsPort& operator=(const VerbsPort&) = delete;

  void start();  // the NIC thread
  void stop();   // idempotent; rethrows what stopped the thread, if anything did

  // For the device: the descriptor (device memory when gpu, else host) and the local region.
  uint8_t* descriptor() const { return descriptor_.data(); }
  const Buffer& local() const { return local_; }
  // For tests without a GPU: the send ring and the doorbell, written as the device would.
  uint8_t* send_ring() const { return sq_.host(); }
  void ring(uint64_t producer);
  // For a host-driven queue pair (host_queue_pair.h): the completions, as the device polls them.
  const uint8_t* completion_ring() const { return cq_.host(); }
  const VerbsPortConfig& config() const { return cfg_; }

  VerbsPortStats stats() const;

 private:
  void run();

  VerbsPortConfig cfg_;
  std::unique_ptr<Wire> wire_;
  Buffer sq_, cq_, doorbell_, local_, descriptor_;
  std::unique_ptr<verbs::SoftConnectX> nic_;
  mutable std::mutex mutex_;  // the NIC's state, between its thread and stats()
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::string error_;
};

}  // namespace rt::host
