// The CUDA executor as host code sees it: launch the persistent engine kernel,
// ask it to stop, watch it; run a GPU far end beside it. Compiled without nvcc
// on the caller's side: no CUDA types here.
#pragma once

#include <memory>
#include <string>

#include "rt/engine/engine.h"
#include "rt/engine/far_end.h"

namespace rt::cuda {

class EngineKernel {
 public:
  EngineKernel();
  ~EngineKernel();  // stops the kernel (bounded wait) and frees its stream
  EngineKernel(const EngineKernel&) = delete;
  EngineKernel& operator=(const EngineKernel&) = delete;

  // Launch one block whose thread 0 runs engine_step() until stopped. The
  // state is copied in and written back on exit. `wire_on_device`: the rx/tx
  // rings are in device memory (a GPU far end) rather than pinned host memory.
  void start(const EngineDesc& desc, EngineState* state_device, bool wire_on_device,
             uint64_t* heartbeat_pinned);

  // Ask the kernel to stop and wait up to timeout_s. Throws std::runtime_error
  // when it does not stop in time (naming the heartbeat it was stuck at) or
  // when it faulted (with the CUDA error).
  void stop(double timeout_s);

  // Throws if the kernel faulted or exited on its own; no-op while running.
  void check() const;
  bool running() const;

  // Run a far end on the GPU (its own block and stream) to completion or its
  // own timeout; the host waits at most timeout_s + 5 s more.
  void run_far_end(const FarEndDesc& desc, double timeout_s);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace rt::cuda
