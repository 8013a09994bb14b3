// What runs a transceiver's engines: a CPU thread per queue (the cpu
// executor), or a persistent kernel with a block per queue (the cuda
// executor). Both run the same step over the same descriptors; the
// transceiver owns the memory and hands each executor the queues.
#pragma once

#include <memory>
#include <vector>

#include "rt/cuda/engine_launch.h"
#include "rt/engine/engine.h"
#include "rt/engine/far_end.h"

namespace rt::host {

class Executor {
 public:
  virtual ~Executor() = default;
  // Throws what kept it from starting; then nothing of it runs.
  virtual void start() = 0;
  // Idempotent. Throws if a queue's loop failed, or would not stop within timeout_s.
  virtual void stop(double timeout_s) = 0;
  virtual bool running() const = 0;
  virtual void check() const = 0;  // throws if it failed while running
  // What its loops cost (a crew's profile, the cuda executor's epochs); after stop(), final.
  virtual cuda::EpochStats stats() const = 0;
  // Far ends beside the loop on the same device, one a queue (`descs`: `queues` of them in
  // device memory, each with `scratch_bytes` of shared memory for its two staging buffers),
  // to their end or their timeout (cuda only).
  virtual void run_far_end(const FarEndDesc* descs, uint32_t queues, size_t scratch_bytes,
                           double timeout_s) = 0;
};

// A thread per queue: queue q's runs crew_step over descs[q] and states[q] (host memory),
// pinned to first_core + q when first_core >= 0.
std::unique_ptr<Executor> make_cpu_executor(std::vector<EngineDesc> descs, EngineState* states,
                                            int first_core);

// A block per queue of one persistent kernel (cuda/engine_launch.h); states in device memory.
std::unique_ptr<Executor> make_cuda_executor(std::vector<EngineDesc> descs,
                                             EngineState* states_device, bool wire_on_device,
                                             uint64_t* heartbeat_pinned,
                                             const cuda::LaunchOptions& opts);

}  // namespace rt::host
