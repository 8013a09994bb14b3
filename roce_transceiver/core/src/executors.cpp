#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <future>
#include <iterator>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "rt/cuda/engine_launch.h"
#include "rt/engine/stream_batch.h"
#include "rt/host/executor.h"

namespace rt::host {
namespace {

// The figures by the names Transceiver.epoch_stats() has in Python, one list for both
// executors (the cpu executor's crew of one fills the batches').
ExecutorStats named(const cuda::EpochStats& e) {
  const auto parts = [](const auto& counts) {
    return std::vector<uint64_t>(std::begin(counts), std::end(counts));
  };
  return {{"epochs", e.epochs},
          {"gap_total_ns", e.gap_total_ns},
          {"gap_max_ns", e.gap_max_ns},
          {"warmup_total_ns", e.warmup_total_ns},
          {"warmup_max_ns", e.warmup_max_ns},
          {"first_pass_total_ns", e.first_pass_total_ns},
          {"first_pass_max_ns", e.first_pass_max_ns},
          {"batch_depth", uint64_t(e.batch_depth)},
          {"blocks", uint64_t(e.blocks)},
          {"batches", e.batches},
          {"batch_frames", e.batch_frames},
          {"batch_cycles", parts(e.batch_cycles)},
          {"classify_cycles", parts(e.classify_cycles)},
          {"commit_cycles", parts(e.commit_cycles)}};
}

// 0, or the errno of the failure: a loop that is not where the configuration put it shows
// only as slow latency, so the caller reports it rather than running on.
int pin_to_core(int core) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(core, &set);  // core < CPU_SETSIZE: the configuration was checked
  return pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

class CpuExecutor final : public Executor {
 public:
  CpuExecutor(std::vector<EngineDesc> descs, EngineState* states, int first_core)
      : descs_(std::move(descs)), states_(states), first_core_(first_core), loops_(descs_.size()) {}
  // A thread still in its loop (stop() timed out: a user handler that never returns) is left
  // running, detached: joining it would wait forever. The transceiver keeps its memory then.
  ~CpuExecutor() override {
    stop_.store(true, std::memory_order_release);
    for (Loop& l : loops_) {
      if (!l.thread.joinable()) continue;
      if (l.done.load(std::memory_order_acquire))
        l.thread.join();
      else
        l.thread.detach();
    }
  }

  void start() override {
    stop_.store(false);
    std::vector<std::future<int>> pinned;
    for (uint32_t q = 0; q < loops_.size(); ++q) {
      std::promise<int> p;
      pinned.push_back(p.get_future());
      loops_[q].thread = std::thread([this, q, p = std::move(p)]() mutable {
        const int core = first_core_ >= 0 ? first_core_ + int(q) : -1;
        const int err = core >= 0 ? pin_to_core(core) : 0;
        p.set_value(err);
        if (err == 0) loop(q);
        loops_[q].done.store(true, std::memory_order_release);
      });
    }
    for (uint32_t q = 0; q < loops_.size(); ++q) {
      if (const int err = pinned[q].get(); err != 0) {
        halt();  // the others stop; nothing runs
        throw std::runtime_error("cpu_core=" + std::to_string(first_core_) + ": cannot pin queue " +
                                 std::to_string(q) + "'s thread to core " +
                                 std::to_string(first_core_ + int(q)) +
                                 " (pthread_setaffinity_np: " + std::strerror(err) +
                                 "); the process may run on the cores of its affinity mask "
                                 "(taskset -p)");
      }
    }
    running_ = true;
  }

  // Waits up to timeout_s for every loop to see the flag: a loop reads it between passes, so
  // one that does not stop is inside a pass that does not end (a user handler's call).
  void stop(double timeout_s) override {
    stop_.store(true, std::memory_order_release);
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    for (uint32_t q = 0; q < loops_.size(); ++q) {
      Loop& l = loops_[q];
      while (l.thread.joinable() && !l.done.load(std::memory_order_acquire)) {
        if (std::chrono::steady_clock::now() > deadline)
          throw std::runtime_error("the cpu executor's loop of queue " + std::to_string(q) +
                                   " did not stop within " + std::to_string(timeout_s) +
                                   " s: its thread has not come back from a pass");
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
      if (l.thread.joinable()) l.thread.join();
    }
    running_ = false;
  }
  bool running() const override { return running_; }
  void check() const override {}

  ExecutorStats stats() const override {
    cuda::EpochStats e{};
    e.blocks = uint32_t(loops_.size());
    if (running_) return named(e);  // the batches are the threads' own until they are joined
    for (const Loop& l : loops_) {  // the threads' own, read once they are done
      e.batch_depth = l.batch.depth;
      e.batches += l.batch.batches;
      e.batch_frames += l.batch.batch_frames;
    }
    return named(e);
  }

 private:
  struct Loop {
    std::thread thread;
    std::atomic<bool> done{false};      // the thread's loop returned (set by the thread)
    Batch batch{};                      // the thread's crew of one, read by stats() after the join
    std::vector<StreamPacket> packets;  // a frames queue's batch (stream_batch.h)
    std::vector<Chunk16> replies;       // an express batch's replies (express_batch.h)
  };

  void loop(uint32_t q) {
    const EngineDesc& d = descs_[q];
    EngineState& st = states_[q];
    // The same batch step as the GPU's crew of warps, with a crew of one: frames
    // classified, committed in order, placed (engine/batch.h).
    Batch& batch = loops_[q].batch;
    const bool frames = d.handler.kind == HandlerKind::kFrames;
    std::vector<StreamPacket>& packets = loops_[q].packets;
    packets.resize(frames ? stream_depth(d) : 0);
    const uint32_t depth = frames ? stream_depth(d) : batch_depth(d, 0, false);
    // An express batch's requests are read in place; each has its reply's staging.
    std::vector<Chunk16>& replies = loops_[q].replies;
    if (d.express && depth > 1) replies.resize(depth * batch_stage_bytes(d) / sizeof(Chunk16));
    batch_init(batch, depth, replies.empty() ? nullptr : reinterpret_cast<uint8_t*>(replies.data()),
               st.rx_ci, frames ? packets.data() : nullptr);
    // Idle: spin, and now and then let other threads run. With more spinning threads than
    // cores (two engines, a NIC thread and a peer on a 2-core machine) a pure spin holds the
    // core for a whole time slice (milliseconds) while the thread it waits for cannot run.
    uint32_t idle = 0;
    while (!stop_.load(std::memory_order_acquire)) {
      if (crew_pass<Scope::kSystem>(SoloCrew{}, d, st, batch) != 0) {
        idle = 0;
      } else if (++idle % 1024 == 0) {
        std::this_thread::yield();
      } else {
        spin_pause();
      }
    }
    publish<Scope::kSystem>(st.tally, d.counters);  // counters after stop() are exact
    publish_completions(d, st);                     // and every record the host's
  }

  void halt() {
    stop_.store(true, std::memory_order_release);
    for (Loop& l : loops_)
      if (l.thread.joinable()) l.thread.join();
  }

  std::vector<EngineDesc> descs_;
  EngineState* states_;
  int first_core_;
  std::vector<Loop> loops_;
  std::atomic<bool> stop_{false};
  bool running_ = false;
};

class CudaExecutor final : public Executor {
 public:
  CudaExecutor(std::vector<EngineDesc> descs, EngineState* states, bool wire_on_device,
               uint64_t* heartbeat, const cuda::LaunchOptions& opts)
      : descs_(std::move(descs)),
        states_(states),
        wire_on_device_(wire_on_device),
        heartbeat_(heartbeat),
        opts_(opts) {}

  void start() override { kernel_.start(descs_, states_, wire_on_device_, heartbeat_, opts_); }
  void stop(double timeout_s) override { kernel_.stop(timeout_s); }
  bool running() const override { return kernel_.running(); }
  void check() const override { kernel_.check(); }
  ExecutorStats stats() const override { return named(kernel_.epoch_stats()); }

 private:
  std::vector<EngineDesc> descs_;
  EngineState* states_;
  bool wire_on_device_;
  uint64_t* heartbeat_;
  cuda::LaunchOptions opts_;
  cuda::EngineKernel kernel_;  // loads its kernels and makes its streams here, before start()
};

}  // namespace

ExecutorStats idle_executor_stats() { return named(cuda::EpochStats{}); }

std::unique_ptr<Executor> make_cpu_executor(std::vector<EngineDesc> descs, EngineState* states,
                                            int first_core) {
  return std::make_unique<CpuExecutor>(std::move(descs), states, first_core);
}

std::unique_ptr<Executor> make_cuda_executor(std::vector<EngineDesc> descs,
                                             EngineState* states_device, bool wire_on_device,
                                             uint64_t* heartbeat_pinned,
                                             const cuda::LaunchOptions& opts) {
  return std::make_unique<CudaExecutor>(std::move(descs), states_device, wire_on_device,
                                        heartbeat_pinned, opts);
}

}  // namespace rt::host
