// Verbs mode's serving side (verbs/serve_loop.h) as the host owns it: requests land in two
// regions of `ours`, a Transceiver whose engine is the RC responder half of our NIC (it places
// the peer's WRITEs and executes its FETCH_ADDs); replies leave through `port`, the requester
// half (the software ConnectX behind a GPUNetIO queue pair). The loop runs as a persistent
// kernel on the cuda executor (GPUNetIO's device API) or on a CPU thread (host_queue_pair.h).
//
// Order on the GPU: construct this before `ours` starts, start() after it (see ServeKernel).
#pragma once

#include <atomic>
#include <memory>
#include <thread>

#include "rt/host/transceiver.h"
#include "rt/host/verbs_port.h"
#include "rt/verbs/serve_loop.h"

namespace rt::cuda {
class ServeKernel;
}

namespace rt::host {

struct VerbsServeConfig {
  uint32_t request_region = 0;  // regions of `ours`: the request ring, then the signal word
  uint32_t signal_region = 1;
  uint32_t slots = 16;
  uint32_t slot_bytes = 256;
  uint64_t peer_ring = 0;       // the peer's ring (slots x slot_bytes) and signal word, as it
  uint32_t peer_ring_rkey = 0;  // registered them
  uint64_t peer_signal = 0;
  uint32_t peer_signal_rkey = 0;
  uint64_t max_requests = 0;  // 0: until stopped
  double completion_timeout_s = 1.0;
  double stop_timeout_s = 5.0;
};

class VerbsServer {
 public:
  // Checks the sizes against the regions, the port and the handler; throws what does not fit.
  VerbsServer(VerbsPort& port, Transceiver& ours, const VerbsServeConfig& cfg);
  ~VerbsServer();
  VerbsServer(const VerbsServer&) = delete;
  VerbsServer& operator=(const VerbsServer&) = delete;

  void start();
  // Idempotent. Throws if the loop would not end within stop_timeout_s.
  void stop();
  bool on_gpu() const { return kernel_ != nullptr; }
  // The loop's counters and state (verbs::ServeState), live while it runs.
  verbs::ServeShared stats() const;

 private:
  VerbsPort& port_;
  VerbsServeConfig cfg_;
  verbs::ServeDesc desc_{};
  std::unique_ptr<cuda::ServeKernel> kernel_;
  verbs::ServeShared cpu_shared_{};
  uint32_t cpu_stop_ = 0;
  std::thread thread_;
  bool started_ = false, stopped_ = false;
};

// Why a serve loop ended, in words.
const char* serve_state_name(uint64_t state);

}  // namespace rt::host
