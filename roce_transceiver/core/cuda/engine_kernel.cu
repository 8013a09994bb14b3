// The CUDA executor: a persistent kernel runs the same engine_step() as the
// CPU thread, plus a far-end kernel for the GPU side of the loopback wire.
#include <cuda_runtime.h>

#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>

#include "rt/cuda/engine_launch.h"

namespace rt::cuda {
namespace {

void check_cuda(cudaError_t err, const char* what) {
  if (err != cudaSuccess) {
    cudaGetLastError();
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorName(err) + " (" +
                             cudaGetErrorString(err) + ")");
  }
}

// How often the loop reads its stop flag and publishes a heartbeat: reading
// every pass would put a memory round trip on the critical path.
constexpr uint32_t kControlEvery = 256;

template <Scope S>
__global__ void engine_kernel(EngineDesc d, EngineState* state, const uint32_t* stop,
                              uint64_t* heartbeat) {
  // The warp is the engine's team (team.h): it stages each frame into shared
  // memory and each reply out of it, 16 bytes a lane, and shares the express
  // path's compares and CRCs; the general path runs on lane 0. The state sits
  // in shared memory, where every lane reads it.
  extern __shared__ __align__(16) uint8_t staging[];
  __shared__ EngineState st;
  crc32_tables_to_shared();
  const WarpTeam team;
  Staging stg{staging, staging + d.rx.slot_bytes};
  if (team.leader()) st = *state;
  team.sync();
  uint64_t passes = 0;
  for (;;) {
    engine_step<S>(team, d, st, &stg, 1);
    uint32_t quit = 0;
    if (++passes % kControlEvery == 0 && team.leader()) {
      store_relaxed<Scope::kSystem>(heartbeat, passes);
      quit = load_acquire<Scope::kSystem>(stop);
    }
    if (team.from_leader(quit)) break;
  }
  if (team.leader()) {
    publish<Scope::kSystem>(st.tally, d.counters);  // stats() after stop() are exact
    store_relaxed<Scope::kSystem>(heartbeat, passes);
    *state = st;
  }
}

template <Scope S>
__global__ void far_end_kernel(FarEndDesc d, const uint32_t* stop) {
  extern __shared__ __align__(16) uint8_t staging[];
  d.frame = staging;  // replies are staged next to the SM, not in global memory
  crc32_tables_to_shared();
  if (threadIdx.x == 0) far_end_run<S>(d, stop);
}

// Launch one block of one warp with `smem` bytes of dynamic shared memory,
// raising the kernel's limit first when a large slot size needs more than 48 KiB
// with the static shared memory.
template <typename... KArgs, typename... Args>
void launch_with_smem(void (*kernel)(KArgs...), size_t smem, cudaStream_t stream, Args&&... args) {
  // The 48 KiB limit counts the kernel's static shared memory (the CRC tables) too.
  cudaFuncAttributes attr;
  check_cuda(cudaFuncGetAttributes(&attr, kernel), "cudaFuncGetAttributes");
  if (smem + attr.sharedSizeBytes > 48 * 1024)
    check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)),
               "cudaFuncSetAttribute(shared memory)");
  kernel<<<1, 32, smem, stream>>>(std::forward<Args>(args)...);
}

}  // namespace

struct EngineKernel::Impl {
  cudaStream_t stream = nullptr;      // the engine's own non-blocking stream
  cudaStream_t far_stream = nullptr;  // the GPU far end's
  cudaStream_t control = nullptr;     // stop requests, while both others are busy
  uint32_t* stop = nullptr;           // device memory: polled by the kernels
  uint64_t* heartbeat = nullptr;      // pinned: read by the host
  bool launched = false;
  bool stopped = false;
};

EngineKernel::EngineKernel() : impl_(std::make_unique<Impl>()) {
  // CUDA loads kernels lazily (CUDA_MODULE_LOADING=LAZY is the default): the
  // first launch of a kernel may wait for the device to go idle, which never
  // happens while a persistent kernel spins. Load every kernel launched beside
  // the engine now, before the engine starts.
  cudaFuncAttributes attr;
  check_cuda(cudaFuncGetAttributes(&attr, engine_kernel<Scope::kDevice>), "load engine_kernel");
  check_cuda(cudaFuncGetAttributes(&attr, engine_kernel<Scope::kSystem>), "load engine_kernel");
  check_cuda(cudaFuncGetAttributes(&attr, far_end_kernel<Scope::kDevice>), "load far_end_kernel");
  check_cuda(cudaStreamCreateWithFlags(&impl_->stream, cudaStreamNonBlocking), "cudaStreamCreate");
  check_cuda(cudaStreamCreateWithFlags(&impl_->far_stream, cudaStreamNonBlocking),
             "cudaStreamCreate");
  check_cuda(cudaStreamCreateWithFlags(&impl_->control, cudaStreamNonBlocking), "cudaStreamCreate");
  // Stream-ordered: a plain cudaMalloc/cudaFree could wait for a running kernel.
  check_cuda(
      cudaMallocAsync(reinterpret_cast<void**>(&impl_->stop), sizeof(uint32_t), impl_->control),
      "cudaMallocAsync(stop flag)");
  check_cuda(cudaMemsetAsync(impl_->stop, 0, sizeof(uint32_t), impl_->control),
             "cudaMemsetAsync(stop flag)");
  check_cuda(cudaStreamSynchronize(impl_->control), "stop flag");
}

EngineKernel::~EngineKernel() {
  try {
    if (impl_->launched && !impl_->stopped) stop(5.0);
  } catch (...) {
    // A kernel that cannot be stopped is reported by stop(); the destructor
    // must not throw, and must not free memory the kernel may still use.
    return;
  }
  cudaFreeAsync(impl_->stop, impl_->control);
  cudaStreamSynchronize(impl_->control);
  cudaStreamDestroy(impl_->stream);
  cudaStreamDestroy(impl_->far_stream);
  cudaStreamDestroy(impl_->control);
}

void EngineKernel::start(const EngineDesc& desc, EngineState* state_device, bool wire_on_device,
                         uint64_t* heartbeat_pinned) {
  if (impl_->launched) throw std::logic_error("EngineKernel::start called twice");
  impl_->heartbeat = heartbeat_pinned;
  check_cuda(cudaMemsetAsync(impl_->stop, 0, sizeof(uint32_t), impl_->control),
             "cudaMemsetAsync(stop flag)");
  check_cuda(cudaStreamSynchronize(impl_->control), "stop flag");
  const size_t staging = size_t(desc.rx.slot_bytes) + desc.tx.slot_bytes;
  if (wire_on_device)
    launch_with_smem(engine_kernel<Scope::kDevice>, staging, impl_->stream, desc, state_device,
                     impl_->stop, heartbeat_pinned);
  else
    launch_with_smem(engine_kernel<Scope::kSystem>, staging, impl_->stream, desc, state_device,
                     impl_->stop, heartbeat_pinned);
  check_cuda(cudaGetLastError(), "engine_kernel launch");
  impl_->launched = true;
  impl_->stopped = false;
}

bool EngineKernel::running() const {
  return impl_->launched && !impl_->stopped && cudaStreamQuery(impl_->stream) == cudaErrorNotReady;
}

void EngineKernel::check() const {
  if (!impl_->launched || impl_->stopped) return;
  const cudaError_t err = cudaStreamQuery(impl_->stream);
  if (err == cudaErrorNotReady) return;
  if (err == cudaSuccess)
    throw std::runtime_error("the persistent engine kernel exited without being asked to stop");
  check_cuda(err, "the persistent engine kernel failed");
}

void EngineKernel::stop(double timeout_s) {
  if (!impl_->launched || impl_->stopped) return;
  const uint32_t one = 1;
  check_cuda(cudaMemcpyAsync(impl_->stop, &one, sizeof one, cudaMemcpyHostToDevice, impl_->control),
             "stop request");
  check_cuda(cudaStreamSynchronize(impl_->control), "stop request");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  for (;;) {
    const cudaError_t err = cudaStreamQuery(impl_->stream);
    if (err == cudaSuccess) break;
    if (err != cudaErrorNotReady) {
      impl_->stopped = true;
      check_cuda(err, "the persistent engine kernel failed");
    }
    if (std::chrono::steady_clock::now() > deadline) {
      const uint64_t beats =
          impl_->heartbeat ? *reinterpret_cast<volatile uint64_t*>(impl_->heartbeat) : 0;
      throw std::runtime_error("the persistent engine kernel did not stop within " +
                               std::to_string(timeout_s) + " s (heartbeat at " +
                               std::to_string(beats) + " passes)");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  impl_->stopped = true;
}

void EngineKernel::run_far_end(const FarEndDesc& desc, double timeout_s) {
  launch_with_smem(far_end_kernel<Scope::kDevice>, size_t(desc.tx.slot_bytes), impl_->far_stream,
                   desc, static_cast<const uint32_t*>(impl_->stop));
  check_cuda(cudaGetLastError(), "far_end_kernel launch");
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s + 5.0);
  for (;;) {
    const cudaError_t err = cudaStreamQuery(impl_->far_stream);
    if (err == cudaSuccess) return;
    if (err != cudaErrorNotReady) check_cuda(err, "the GPU far end failed");
    if (std::chrono::steady_clock::now() > deadline)
      throw std::runtime_error("the GPU far end did not finish within its timeout + 5 s");
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

}  // namespace rt::cuda
