// The GPU far end as host code sees it: the loopback wire's far side (engine/far_end.h) run
// by a block of the GPU a queue, beside the engine's persistent kernel (far_end: gpu), in
// epochs as the engine is (engine_launch.h), so that it does not hold up a kernel load
// elsewhere in the process either. Compiled without nvcc on the caller's side: no CUDA types
// here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "rt/engine/far_end.h"

namespace rt::cuda {

class GpuFarEnd {
 public:
  // On the current device, which its runs use: loads its kernel, makes its streams, stop flag
  // and the runs' state. Made before the engine starts: CUDA loads kernels lazily, and the
  // first launch of one waits for the device to go idle, which it never does while a
  // persistent kernel runs.
  GpuFarEnd();
  ~GpuFarEnd();  // what a run stuck in the driver still uses is left behind
  GpuFarEnd(const GpuFarEnd&) = delete;
  GpuFarEnd& operator=(const GpuFarEnd&) = delete;

  // Far ends to completion, their own timeout or stop(): a block a queue (`descs[q]` in
  // device memory, `queues` of them), each with `scratch_bytes` of dynamic shared memory for
  // its reply and expected frames, in epochs of `epoch_ns` (0: one launch). The host waits at
  // most timeout_s + 5 s more. `beside`, asked while the run waits: whether the engine it
  // runs beside still runs; once it does not (stopped, or failed), no reply will come, and
  // the run ends as after stop(). One run at a time.
  void run(const FarEndDesc* descs, uint32_t queues, size_t scratch_bytes, double timeout_s,
           uint64_t epoch_ns, const std::function<bool()>& beside = {});

  // Ask the run in progress, and every later one, to end (status "stopped"); any thread. No
  // CUDA call: a driver call blocked elsewhere in the process cannot hold up the caller (the
  // transceiver's stop()); the run's own thread sets the flag its kernel polls.
  void stop();

  struct Impl;  // CUDA-side; opaque here

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace rt::cuda
