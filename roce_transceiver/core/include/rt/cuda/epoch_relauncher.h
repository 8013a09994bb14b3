// A persistent kernel in epochs (docs/gpu_sharing.md): each launch returns after its epoch,
// its state kept in device memory, and a host thread launches the next one at once, so that
// between two epochs the device has nothing of ours running and a kernel load elsewhere in
// the process goes through. The engine's loop, the GPU far end and Verbs mode's serve kernel
// all run this way; this is the thread that keeps their epochs coming. CUDA host code: for
// the .cu files only.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "rt/platform.h"

namespace rt::cuda {

class EpochRelauncher {
 public:
  struct Plan {
    cudaStream_t stream = nullptr;  // where the epochs run, in order
    int device = 0;                 // the stream's device (a new thread starts on device 0)
    uint32_t in_flight = 1;         // epochs queued at once: 2 hides the relaunch
    std::function<void()> launch;   // one epoch on `stream`
    std::function<bool()> more;     // whether to queue another epoch (asked before each)
    std::function<void()> on_end;   // on the thread, once the last epoch ended or one failed
    std::string what = "the persistent kernel";  // in errors
  };

  EpochRelauncher() = default;
  EpochRelauncher(const EpochRelauncher&) = delete;
  EpochRelauncher& operator=(const EpochRelauncher&) = delete;
  ~EpochRelauncher() {
    if (thread_.joinable()) thread_.join();
  }

  // The caller launched the first epoch itself (a launch that fails says so on its thread);
  // the relauncher queues the rest.
  void start(Plan plan) {
    plan_ = std::move(plan);
    thread_ = std::thread([this] { run(); });
  }
  // The thread returned: every epoch ended, or one failed (error() says how).
  bool finished() const { return finished_.load(std::memory_order_acquire); }
  // What ended the epochs other than `more` saying no; read once finished().
  const std::string& error() const { return error_; }
  void join() {
    if (thread_.joinable()) thread_.join();
  }
  // A relauncher stuck in the driver is left behind (a leak beats a hang).
  void detach() {
    if (thread_.joinable()) thread_.detach();
  }
  bool joinable() const { return thread_.joinable(); }
  // Epochs launched so far, the caller's first one included.
  uint64_t launched() const { return launched_.load(std::memory_order_relaxed); }

 private:
  static void check(cudaError_t err, const char* what) {
    if (err != cudaSuccess) {
      cudaGetLastError();
      throw std::runtime_error(std::string(what) + ": " + cudaGetErrorName(err) + " (" +
                               cudaGetErrorString(err) + ")");
    }
  }

  // Waiting spins on cudaEventQuery (a blocking wait would add the scheduler's wake-up to
  // every relaunch gap).
  void run() {
    const uint32_t in_flight = plan_.in_flight ? plan_.in_flight : 1;
    std::vector<cudaEvent_t> done(in_flight, nullptr);
    try {
      check(cudaSetDevice(plan_.device), "cudaSetDevice");
      for (cudaEvent_t& e : done)
        check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
      uint64_t launched = 1;  // the caller launched the first epoch
      check(cudaEventRecord(done[0], plan_.stream), "cudaEventRecord");
      uint64_t retired = 0;
      for (;;) {
        while (launched - retired < in_flight && plan_.more()) {
          plan_.launch();
          check(cudaGetLastError(), (plan_.what + ": launch").c_str());
          check(cudaEventRecord(done[launched % in_flight], plan_.stream), "cudaEventRecord");
          ++launched;
          launched_.store(launched, std::memory_order_relaxed);
        }
        if (launched == retired) break;
        cudaError_t err;
        uint32_t spins = 0;
        while ((err = cudaEventQuery(done[retired % in_flight])) == cudaErrorNotReady) {
          if (++spins % 1024 == 0) std::this_thread::yield();
          spin_pause();
        }
        check(err, (plan_.what + " failed").c_str());
        ++retired;
      }
    } catch (const std::exception& e) {
      error_ = e.what();
    }
    for (cudaEvent_t e : done)
      if (e) cudaEventDestroy(e);
    if (plan_.on_end) plan_.on_end();
    finished_.store(true, std::memory_order_release);
  }

  Plan plan_;
  std::thread thread_;
  std::atomic<bool> finished_{false};
  std::atomic<uint64_t> launched_{1};
  std::string error_;  // set before finished_
};

}  // namespace rt::cuda
