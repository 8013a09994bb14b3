// Kernels that drive a queue pair through GPUNetIO's verbs device API (Verbs mode, issue 6).
// Host-callable; they throw where this build has no CUDA or no GPUNetIO headers.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "rt/verbs/mlx5_layout.h"
#include "rt/verbs/serve_loop.h"

namespace rt::cuda {

// `count` put_signals, one at a time, each waited for: `size` bytes from the local address
// to slot i % slots of the peer's ring (slot_bytes apart), then +1 on the peer's signal word.
// Keys are the mkeys as numbers (the launcher stores them big-endian, as the API expects).
struct PutSignalParams {
  const void* qp = nullptr;  // the descriptor, in device memory
  uint64_t raddr = 0;
  uint32_t rkey = 0;
  uint32_t slot_bytes = 64;
  uint32_t slots = 1;
  uint64_t laddr = 0;
  uint32_t lkey = 0;
  uint32_t size = 32;
  uint64_t sig_raddr = 0;
  uint32_t sig_rkey = 0;
  uint64_t sink_laddr = 0;  // where each fetch-add's old value lands (local region)
  uint32_t count = 1;
  double timeout_s = 10.0;  // device-side deadline for the whole loop
  verbs::NicHandler handler = verbs::NicHandler::kCpuProxy;  // the port's
};

struct PutSignalResult {
  uint32_t completed = 0;   // put_signals whose both completions came back without error
  uint32_t errors = 0;      // completions with an error
  uint64_t elapsed_ns = 0;  // %globaltimer, first post to last completion
  bool timed_out = false;
};

PutSignalResult put_signal_loop(const PutSignalParams& p);

// Verbs mode's persistent loop on the GPU: verbs/serve_loop.h over GPUNetIO's device API for the
// port's NIC handler (an instantiation each), one thread. Keys in `desc` are the mkeys as numbers
// (stored big-endian for the API here). The constructor allocates everything and runs the kernel
// once with nothing to do, so that loading it and sizing its stack are over before any persistent
// kernel runs (both wait for running kernels); launch() is then only a launch. Like the engine's,
// the kernel runs in epochs of `epoch_us` (0: one launch for the run), `epochs_in_flight` queued
// at once, so that a kernel load elsewhere in the process goes through (docs/gpu_sharing.md).
// `shared` is host memory the GPU maps. `kernel_image`: the serve kernels with a user's handler
// linked in (custom_handler.py), loaded and launched in place of the built-in ones (empty).
class ServeKernel {
 public:
  ServeKernel(const void* qp, const verbs::ServeDesc& desc, verbs::NicHandler handler,
              uint32_t epoch_us, uint32_t epochs_in_flight,
              const std::vector<uint8_t>& kernel_image);
  ~ServeKernel();
  ServeKernel(const ServeKernel&) = delete;
  ServeKernel& operator=(const ServeKernel&) = delete;

  void launch();
  // A store to pinned memory: the loop drains its replies in flight and ends.
  void request_stop();
  // Waits up to `timeout_s` for the loop to end; true when it has. Throws on a kernel fault.
  bool wait(double timeout_s);
  const verbs::ServeShared& shared() const;
  uint64_t epochs() const;  // epochs launched so far

 private:
  struct Impl;
  Impl* impl_;
};

}  // namespace rt::cuda
