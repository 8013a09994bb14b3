// What runs a transceiver's engines: a CPU thread per queue (the cpu
// executor), or a persistent kernel with a block per queue (the cuda
// executor). Both run the same step over the same descriptors; the
// transceiver owns the memory and hands each executor the queues.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "rt/engine/engine.h"

namespace rt::cuda {
struct LaunchOptions;  // cuda/engine_launch.h
}  // namespace rt::cuda

namespace rt::host {

// One figure of an executor's loops, by name: a count, or a count a part (a crew's cycles by
// phase).
using ExecutorValue = std::variant<uint64_t, std::vector<uint64_t>>;
using ExecutorStats = std::vector<std::pair<std::string, ExecutorValue>>;

class Executor {
 public:
  virtual ~Executor() = default;
  // Throws what kept it from starting; then nothing of it runs.
  virtual void start() = 0;
  // Idempotent. Throws if a queue's loop failed, or would not stop within timeout_s.
  virtual void stop(double timeout_s) = 0;
  virtual bool running() const = 0;
  virtual void check() const = 0;  // throws if it failed while running
  // What its loops cost (the cuda executor's epochs, a crew's batches and profile), by the
  // names of idle_executor_stats() on either executor: zeros where it has no such figure (the
  // cpu executor has no epochs, nor a cycle clock); after stop(), final.
  virtual ExecutorStats stats() const = 0;
};

// stats() where no loop ran: every name, zeros (a batch of one frame, no blocks).
ExecutorStats idle_executor_stats();

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
