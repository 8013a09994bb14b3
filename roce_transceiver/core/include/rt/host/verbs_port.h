// A queue pair the GPU drives through GPUNetIO's verbs device API, with the software ConnectX on
// a thread of its own behind it (both halves of the QP: it sends what the WQEs ask and executes
// what the peer asks of us), and a wire (wire.h) to the peer: the loopback far end of a
// Transceiver, the peer's end of a split loopback, or a packet socket on an interface. The send
// ring, completion ring, doorbell page, the local region and the remote-access regions are in
// pinned host memory the GPU maps (host memory for a CPU-only run, where tests write WQEs
// themselves); the QP descriptor is in device memory, where the device API's atomics on it run.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "rt/host/memory.h"
#include "rt/host/wire.h"
#include "rt/verbs/soft_connectx.h"

namespace rt::host {

// A region the peer may WRITE into and run atomics on (the responder's), by rkey at va.
struct RemoteRegionConfig {
  uint64_t va = 0;
  uint32_t rkey = 0;
  uint32_t length = 0;
};

struct VerbsPortConfig {
  verbs::SoftConnectXConfig nic;   // QP numbers, PSNs, MTU, ring sizes, addresses, NIC handler
  uint32_t local_bytes = 1 << 16;  // the local region WQEs take data from and results into
  uint32_t lkey = 0x1C0C;
  std::vector<RemoteRegionConfig> regions;
  bool gpu = false;  // rings and regions in pinned memory, the descriptor on the GPU
};

struct VerbsPortStats {
  verbs::SoftConnectXStats nic;
  uint64_t consumed = 0, completed = 0;
  uint32_t expected_psn = 0;
  bool in_error = false;
  std::string last_error;
};

class VerbsPort {
 public:
  VerbsPort(const VerbsPortConfig& cfg, std::shared_ptr<Wire> wire);
  ~VerbsPort();
  VerbsPort(const VerbsPort&) = delete;
  VerbsPort& operator=(const VerbsPort&) = delete;

  void start();  // the NIC thread
  void stop();   // idempotent; rethrows what stopped the thread, if anything did

  // For the device: the descriptor (device memory when gpu, else host) and the local region.
  uint8_t* descriptor() const { return descriptor_.data(); }
  const Buffer& local() const { return local_; }
  // The remote-access regions, in the order configured (the serve loop's ring and signal).
  size_t num_regions() const { return regions_.size(); }
  const Buffer& region(size_t i) const;
  // For a host-driven queue pair and tests without a GPU: the send ring and the doorbell page,
  // written as the device would, and the completions, as the device polls them.
  uint8_t* send_ring() const { return sq_.host(); }
  uint8_t* doorbell_page() const { return doorbell_.host(); }
  void ring(uint64_t producer);  // CPU proxy: the producer count
  const uint8_t* completion_ring() const { return cq_.host(); }
  const VerbsPortConfig& config() const { return cfg_; }

  VerbsPortStats stats() const;

 private:
  void run();

  VerbsPortConfig cfg_;
  std::shared_ptr<Wire> wire_;
  Buffer sq_, cq_, doorbell_, local_, descriptor_;
  std::vector<Buffer> regions_;
  std::unique_ptr<verbs::SoftConnectX> nic_;
  mutable std::mutex mutex_;  // the NIC's state, between its thread and stats()
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::string error_;
};

}  // namespace rt::host
