// The CUDA executor: a persistent kernel runs the same engine_step() as the
// CPU thread (the GPU far end beside it: far_end_kernel.cu).
#include <cuda.h>
#include <cuda_runtime.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "rt/cuda/check_cuda.h"
#include "rt/cuda/engine_kernels.cuh"
#include "rt/cuda/engine_launch.h"
#include "rt/cuda/epoch_relauncher.h"
#include "rt/cuda/kernel_function.h"

namespace rt::cuda {
namespace {

// The built-in kernels: [one warp, crew, frames stream][system scope] (the first two as
// kEngineKernelNames).
enum KernelKind : int { kOneWarp = 0, kCrewKernel = 1, kStreamKernel = 2 };
KernelFunction builtin_kernel(int kind, bool system) {
  const void* k[3][2] = {{reinterpret_cast<const void*>(rt_engine_kernel_device),
                          reinterpret_cast<const void*>(rt_engine_kernel_system)},
                         {reinterpret_cast<const void*>(rt_crew_kernel_device),
                          reinterpret_cast<const void*>(rt_crew_kernel_system)},
                         {reinterpret_cast<const void*>(rt_stream_kernel_device),
                          reinterpret_cast<const void*>(rt_stream_kernel_system)}};
  return KernelFunction{k[kind][system], nullptr, "engine kernel"};
}

// Dynamic shared memory a crew kernel may have beside its static shared memory.
size_t dynamic_smem_room(const KernelFunction& kernel) {
  int device = 0, optin = 0;
  check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  check_cuda(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device),
             "cudaDeviceGetAttribute(shared memory)");
  const size_t fixed = kernel.static_smem();
  return size_t(optin) > fixed ? size_t(optin) - fixed : 0;
}

}  // namespace

struct EngineKernel::Impl {
  cudaStream_t stream = nullptr;   // the engine's own non-blocking stream
  cudaStream_t control = nullptr;  // allocations and copies while `stream` is busy
  KernelControl* ctl = nullptr;    // pinned, mapped: the host's view
  KernelControl* ctl_device = nullptr;
  EpochRecord* rec = nullptr;     // device memory, one a queue (kMaxQueues)
  EngineDesc* descs = nullptr;    // device memory, one a queue (kMaxQueues)
  uint64_t* heartbeat = nullptr;  // pinned: read by the host
  EpochRelauncher relauncher;  // launches the epochs, waits for each: every CUDA call of the loop
  std::atomic<bool> stopping{false};  // stop() asked: launch no more
  bool launched = false;
  std::atomic<bool> stopped{false};  // read by running() from other threads (a GPU far end's)
  uint32_t batch_depth = 1;          // frames a crew's batch holds (1: no crew)
  uint32_t blocks = 0;               // one a queue
  int device = 0;                    // the GPU it runs on: the relauncher's current device
  std::function<void()> launch;      // one epoch, on `stream`
  LoadedModule module;               // a user handler's kernels (opts.kernel_image), or none
};

EngineKernel::EngineKernel() : impl_(std::make_unique<Impl>()) {
  // CUDA loads kernels lazily (CUDA_MODULE_LOADING=LAZY is the default): the
  // first launch of a kernel waits for the device to go idle. Load the engine's
  // kernels now, before it starts (a GPU far end loads its own: far_end_launch.h).
  for (int kind : {kOneWarp, kCrewKernel, kStreamKernel})
    for (bool system : {false, true}) builtin_kernel(kind, system).static_smem();
  check_cuda(cudaStreamCreateWithFlags(&impl_->stream, cudaStreamNonBlocking), "cudaStreamCreate");
  check_cuda(cudaStreamCreateWithFlags(&impl_->control, cudaStreamNonBlocking), "cudaStreamCreate");
  check_cuda(cudaHostAlloc(reinterpret_cast<void**>(&impl_->ctl), sizeof(KernelControl),
                           cudaHostAllocMapped),
             "cudaHostAlloc(kernel control)");
  *impl_->ctl = KernelControl{};
  check_cuda(cudaHostGetDevicePointer(reinterpret_cast<void**>(&impl_->ctl_device), impl_->ctl, 0),
             "cudaHostGetDevicePointer(kernel control)");
  // Stream-ordered: a plain cudaMalloc/cudaFree could wait for a running kernel.
  check_cuda(cudaMallocAsync(reinterpret_cast<void**>(&impl_->rec),
                             kMaxQueues * sizeof(EpochRecord), impl_->control),
             "cudaMallocAsync(epoch records)");
  check_cuda(cudaMemsetAsync(impl_->rec, 0, kMaxQueues * sizeof(EpochRecord), impl_->control),
             "cudaMemsetAsync(epoch records)");
  check_cuda(cudaMallocAsync(reinterpret_cast<void**>(&impl_->descs),
                             kMaxQueues * sizeof(EngineDesc), impl_->control),
             "cudaMallocAsync(queue descriptors)");
  check_cuda(cudaStreamSynchronize(impl_->control), "kernel control");
}

EngineKernel::~EngineKernel() {
  try {
    if (impl_->launched && !impl_->stopped) stop(5.0);
  } catch (...) {
    // A loop that cannot be stopped is reported by stop(); the destructor must
    // not throw, nor free memory the kernel may still use, nor wait forever on a
    // relauncher stuck in the driver: leave it all behind.
    if (impl_->relauncher.joinable()) impl_->relauncher.detach();
    static_cast<void>(impl_.release());
    return;
  }
  if (impl_->relauncher.joinable()) impl_->relauncher.join();
  cudaFreeAsync(impl_->rec, impl_->control);
  cudaFreeAsync(impl_->descs, impl_->control);
  cudaStreamSynchronize(impl_->control);
  cudaFreeHost(impl_->ctl);
  cudaStreamDestroy(impl_->stream);
  cudaStreamDestroy(impl_->control);
}

void EngineKernel::start(const std::vector<EngineDesc>& descs, EngineState* states_device,
                         bool wire_on_device, uint64_t* heartbeat_pinned,
                         const LaunchOptions& opts) {
  if (impl_->launched) throw std::logic_error("EngineKernel::start called twice");
  if (opts.in_flight < 1 || opts.in_flight > 4)
    throw std::invalid_argument("epochs in flight: 1 to 4, not " + std::to_string(opts.in_flight));
  if (opts.warps < 1 || opts.warps > kMaxCrewWarps)
    throw std::invalid_argument("warps: 1 to " + std::to_string(kMaxCrewWarps) + ", not " +
                                std::to_string(opts.warps));
  const uint32_t blocks = uint32_t(descs.size());
  if (blocks < 1 || blocks > kMaxQueues)
    throw std::invalid_argument("queues: 1 to " + std::to_string(kMaxQueues) + ", not " +
                                std::to_string(blocks));
  Impl& k = *impl_;
  k.heartbeat = heartbeat_pinned;
  k.blocks = blocks;
  check_cuda(cudaGetDevice(&k.device), "cudaGetDevice");
  const EngineDesc& desc = descs[0];  // every queue's rings have the same shape
  // Dynamic shared memory: the express path's ICRC tables, then a frame in and a reply out.
  const size_t staging = kIcrcWordSmemBytes + size_t(desc.rx.slot_bytes) + desc.tx.slot_bytes;
  const uint64_t epoch_ns = uint64_t(opts.epoch_us) * 1000;
  KernelControl* ctl = k.ctl_device;
  EpochRecord* rec = k.rec;
  const EngineDesc* on_device = k.descs;
  check_cuda(cudaMemcpyAsync(k.descs, descs.data(), blocks * sizeof(EngineDesc),
                             cudaMemcpyHostToDevice, k.control),
             "cudaMemcpyAsync(queue descriptors)");
  check_cuda(cudaStreamSynchronize(k.control), "queue descriptors");
  // A frames queue always takes the stream step (stream_batch.h), by a crew of one warp or
  // more; requests take the one-warp loop (their express path) unless warps > 1: a crew
  // then takes them in express batches (express_batch.h), or in batches with express off.
  const bool crew = opts.warps > 1 || descs[0].handler.kind == HandlerKind::kFrames;
  // A user's module's one-warp kernels have the handler's warp beside the engine's
  // (handler_warp.cuh).
  const uint32_t threads =
      !crew && !opts.kernel_image.empty() ? kHandlerWarpThreads : 32 * opts.warps;
  // The built-in frames stream's own kernel; a user's statistic's module has the crew's.
  const bool stream = descs[0].handler.kind == HandlerKind::kFrames && opts.kernel_image.empty();
  KernelFunction kernel = builtin_kernel(stream ? kStreamKernel
                                         : crew ? kCrewKernel
                                                : kOneWarp,
                                         !wire_on_device);
  if (!opts.kernel_image.empty()) {
    // A user handler's kernels (custom_handler.py links them): the same kernels by the same
    // names, with the handler linked in. Loaded now, before the loop runs: a module load waits for
    // the device to go idle.
    if (!k.module) k.module = LoadedModule(opts.kernel_image, "the user handler's engine kernels");
    kernel = k.module.function(kEngineKernelNames[crew][!wire_on_device], "engine kernel");
  }
  auto require_resident = [&](size_t smem) {
    // Every block spins until stopped: one that waits for a free SM would never start.
    int device = 0, sms = 0;
    check_cuda(cudaGetDevice(&device), "cudaGetDevice");
    check_cuda(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device),
               "cudaDeviceGetAttribute(SMs)");
    const int per_sm = kernel.blocks_per_sm(threads, smem);
    if (uint64_t(sms) * uint64_t(per_sm) < blocks)
      throw std::invalid_argument("queues: " + std::to_string(blocks) + " blocks of " +
                                  std::to_string(threads) + " threads do not run at once on " +
                                  std::to_string(sms) + " SMs");
  };
  uint32_t depth = 1;
  size_t smem = staging;
  if (crew) {
    const size_t room = dynamic_smem_room(kernel);
    if (desc.handler.kind == HandlerKind::kFrames) {
      // A frames queue's batch is queues.batch packets, their records next to the crew.
      depth = stream_depth(desc);
      smem = staging + size_t(depth) * sizeof(StreamPacket);
      if (smem > room)
        throw std::invalid_argument(
            "queues.batch=" + std::to_string(depth) +
            ": a frames batch of that many packets "
            "needs " +
            std::to_string(smem) +
            " bytes of shared memory, and the engine kernel "
            "has " +
            std::to_string(room) + "; at most " +
            std::to_string(room > staging ? (room - staging) / sizeof(StreamPacket) : 0));
    } else {
      depth = batch_depth(desc, room > staging ? room - staging : 0, /*staged=*/true);
      smem = staging + size_t(depth > 1 ? depth : 0) * batch_stage_bytes(desc);
    }
  }
  k.batch_depth = depth;
  kernel.allow_smem(smem);
  require_resident(smem);
  k.launch = [=, &k] {
    // The kernels' parameters (engine_kernels.cuh), by address; the crew's take depth too.
    const EngineDesc* a_descs = on_device;
    EngineState* a_states = states_device;
    KernelControl* a_ctl = ctl;
    EpochRecord* a_rec = rec;
    uint64_t* a_heartbeat = heartbeat_pinned;
    uint64_t a_epoch_ns = epoch_ns;
    uint32_t a_depth = depth;
    void* args[] = {&a_descs, &a_states, &a_ctl, &a_rec, &a_heartbeat, &a_epoch_ns, &a_depth};
    kernel.launch(blocks, threads, smem, k.stream, args);
  };
  k.launch();  // on the caller's thread: a launch that fails says so here
  check_cuda(cudaGetLastError(), "engine_kernel launch");
  k.launched = true;
  k.stopped = false;
  // One launch for the run: the relauncher only waits for it.
  if (opts.epoch_us == 0) k.stopping.store(true, std::memory_order_release);
  EpochRelauncher::Plan plan;
  plan.stream = k.stream;
  plan.device = k.device;
  plan.in_flight = opts.epoch_us ? opts.in_flight : 1;
  plan.launch = k.launch;
  plan.more = [&k] { return !k.stopping.load(std::memory_order_acquire); };
  plan.what = "the persistent engine kernel";
  k.relauncher.start(std::move(plan));
}

bool EngineKernel::running() const {
  return impl_->launched && !impl_->stopped && !impl_->relauncher.finished();
}

void EngineKernel::check() const {
  if (!impl_->launched || impl_->stopped) return;
  if (!impl_->relauncher.finished()) return;
  if (!impl_->relauncher.error().empty()) throw std::runtime_error(impl_->relauncher.error());
  throw std::runtime_error("the persistent engine kernel exited without being asked to stop");
}

void EngineKernel::stop(double timeout_s) {
  Impl& k = *impl_;
  if (!k.launched || k.stopped) return;
  // No CUDA call: the flag is pinned host memory the kernel polls; the
  // relauncher sees `stopping` and launches no more.
  k.stopping.store(true, std::memory_order_release);
  reinterpret_cast<volatile uint32_t*>(&k.ctl->stop)[0] = 1;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (!k.relauncher.finished()) {
    if (std::chrono::steady_clock::now() > deadline) {
      const uint64_t beats = k.heartbeat ? *reinterpret_cast<volatile uint64_t*>(k.heartbeat) : 0;
      throw std::runtime_error(
          "the persistent engine kernel did not stop within " + std::to_string(timeout_s) +
          " s (heartbeat at " + std::to_string(beats) +
          " passes; its stop flag is set, and a CUDA call blocked elsewhere in the process may "
          "be holding the device)");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  k.relauncher.join();
  k.stopped = true;
  if (!k.relauncher.error().empty()) throw std::runtime_error(k.relauncher.error());
}

EpochStats EngineKernel::epoch_stats() const {
  const volatile KernelControl& c = *impl_->ctl;
  EpochStats e{c.epochs,        c.gap_total_ns,        c.gap_max_ns,       c.warmup_total_ns,
               c.warmup_max_ns, c.first_pass_total_ns, c.first_pass_max_ns};
  for (uint32_t q = 0; q < impl_->blocks; ++q) {
    const volatile CrewProfile& p = c.crew[q];
    for (uint32_t k = 0; k < 4; ++k) e.batch_cycles[k] += p.batch_cycles[k];
    for (uint32_t k = 0; k < 5; ++k) e.classify_cycles[k] += p.classify_cycles[k];
    for (uint32_t k = 0; k < 3; ++k) e.commit_cycles[k] += p.commit_cycles[k];
    e.batches += p.batches;
    e.batch_frames += p.batch_frames;
  }
  e.batch_depth = impl_->batch_depth;
  e.blocks = impl_->blocks;
  return e;
}

}  // namespace rt::cuda
