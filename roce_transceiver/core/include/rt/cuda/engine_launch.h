// The CUDA executor as host code sees it: run the persistent engine kernel,
// ask it to stop, watch it (a GPU far end beside it: far_end_launch.h).
// Compiled without nvcc on the caller's side: no CUDA types here.
//
// The kernel runs in epochs (docs/gpu_sharing.md): it returns after epoch_us,
// its state kept in device memory and the rings untouched, and a host thread
// launches it again at once. Between two epochs the device has nothing of ours
// running, so a kernel load elsewhere in the process (a lazily loaded cuBLAS,
// a cupy kernel compiled at first use), which waits for the device to go idle,
// goes through instead of waiting forever. epoch_us 0: one launch for the run.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "rt/engine/engine.h"
#include "rt/queues/steering.h"

namespace rt::cuda {

struct LaunchOptions {
  uint32_t epoch_us = 0;   // 0: one launch until stop()
  uint32_t in_flight = 1;  // launches queued at once: 2 hides the relaunch, if the driver lets it
  uint32_t warps = 1;      // 1: one warp (engine_step); more: a crew of warps (crew_step)
  // A module with the engine's kernels (engine_kernels.cuh) that NVRTC compiled with a user
  // handler (custom_handler.py): loaded with the driver API and launched instead of the
  // built-in kernels. Empty: the built-in ones.
  std::vector<uint8_t> kernel_image;
};

// What the epochs cost, measured on the GPU: from one epoch's end to the next one's start,
// then to its first pass, and that first pass.
struct EpochStats {
  uint64_t epochs = 0;  // epochs started
  uint64_t gap_total_ns = 0;
  uint64_t gap_max_ns = 0;
  uint64_t warmup_total_ns = 0;  // an epoch's start to its first pass: tables, state in
  uint64_t warmup_max_ns = 0;
  uint64_t first_pass_total_ns = 0;  // its first pass (cold caches)
  uint64_t first_pass_max_ns = 0;
  // A crew's profile (warps > 1), over every queue's crew: SM cycles in classify (with the
  // poll), commit, execute and publish, over `batches` batches of `batch_frames` frames in all.
  uint64_t batch_cycles[4] = {0, 0, 0, 0};
  uint64_t batches = 0;
  uint64_t batch_frames = 0;
  uint64_t classify_cycles[5] = {0, 0, 0, 0, 0};  // team 0's: stage, decode, ICRC, verdict; frames
  uint64_t commit_cycles[3] = {0, 0, 0};  // the frames stream's commit: runs, frame ends, decisions
  uint32_t batch_depth = 1;               // frames a batch holds at most (1: no crew)
  uint32_t blocks = 0;                    // one a queue
};

class EngineKernel {
 public:
  EngineKernel();
  ~EngineKernel();  // stops the kernel (bounded wait) and frees its stream
  EngineKernel(const EngineKernel&) = delete;
  EngineKernel& operator=(const EngineKernel&) = delete;

  // Launch a block per queue (descs[q], its state states_device[q]): one warp that runs
  // engine_step(), or opts.warps warps that run crew_step(), until stopped, in epochs of
  // `opts.epoch_us`. Each state is copied in at an epoch's start and written back at its end.
  // `wire_on_device`: the rx/tx rings are in device memory (a GPU far end) rather than pinned
  // host memory. At most kMaxQueues queues, and no more than the GPU runs blocks at once.
  void start(const std::vector<EngineDesc>& descs, EngineState* states_device, bool wire_on_device,
             uint64_t* heartbeat_pinned, const LaunchOptions& opts = {});

  // Ask the kernel to stop and wait up to timeout_s. The request is a store to
  // pinned host memory, no CUDA call: a driver call blocked in another thread
  // cannot hold it up. Throws std::runtime_error when the loop does not stop in
  // time (naming the heartbeat it was stuck at) or when it faulted (with the
  // CUDA error).
  void stop(double timeout_s);

  EpochStats epoch_stats() const;

  // Throws if the kernel faulted or exited on its own; no-op while running.
  void check() const;
  bool running() const;  // any thread

  struct Impl;  // CUDA-side; opaque here

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace rt::cuda
