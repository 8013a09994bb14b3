// Verbs mode's serving side (verbs/serve_loop.h) as the host owns it: our NIC is `port`, both
// halves of the queue pair (the software ConnectX: it places the peer's WRITEs into two of the
// port's regions, the request ring and the signal word, executes its FETCH_ADDs there and
// acknowledges them, and carries our put_signals out). The loop only polls that memory and posts
// replies: a persistent kernel on the GPU (GPUNetIO's device API, for the port's NIC handler) or
// a CPU thread writing the same WQEs and doorbells (host_queue_pair.h).
#pragma once

#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "rt/handlers/handler.h"
#include "rt/host/custom_library.h"
#include "rt/host/memory.h"
#include "rt/host/verbs_port.h"
#include "rt/verbs/serve_loop.h"

namespace rt::cuda {
class ServeKernel;
}

namespace rt::host {

struct VerbsServeConfig {
  HandlerKind handler = HandlerKind::kEcho;  // echo, qec or custom
  std::vector<uint8_t> qec_blob;             // qec: the decoder's table blob
  // custom: the user handler's shared object (the cpu executor's serve loop) or the serve
  // kernels it is linked into (the GPU's: custom_handler.py), its state and constant parameters
  // (as TransceiverConfig's)
  std::string custom_library;
  std::vector<uint8_t> custom_kernel_image;
  uint32_t custom_state_bytes = 0;
  std::vector<uint8_t> custom_params;
  uint32_t request_region = 0;  // regions of the port: the request ring, then the signal word
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
  // The GPU's serve kernel runs in epochs, as the engine's (cuda.epoch_us and
  // cuda.epochs_in_flight): 0, one launch for the run.
  uint32_t epoch_us = 10000;
  uint32_t epochs_in_flight = 2;
};

class VerbsServer {
 public:
  // Checks the sizes against the port and its regions and the handler; throws what does not
  // fit. On the GPU: construct after the port, start() when the port's thread runs.
  VerbsServer(VerbsPort& port, const VerbsServeConfig& cfg);
  ~VerbsServer();
  VerbsServer(const VerbsServer&) = delete;
  VerbsServer& operator=(const VerbsServer&) = delete;

  void start();
  // Idempotent. Throws if the loop would not end within stop_timeout_s.
  void stop();
  bool on_gpu() const { return kernel_ != nullptr; }
  // The loop's counters and state (verbs::ServeState), live while it runs.
  verbs::ServeShared stats() const;
  // Epochs the serve kernel was launched for (the cpu executor's thread: 0).
  uint64_t epochs() const;

 private:
  VerbsPort& port_;
  VerbsServeConfig cfg_;
  Buffer qec_table_;                               // the handler's table where the loop reads it
  std::unique_ptr<CustomLibrary> custom_library_;  // handler custom on a CPU thread
  Buffer custom_state_, custom_params_;  // handler custom: its state and parameters, where the
                                         // loop reads them
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
