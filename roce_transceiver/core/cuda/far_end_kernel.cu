// The GPU far end (far_end_launch.h): the loopback wire's far side, a block a queue beside
// the engine's persistent kernel, in epochs that carry each far end's state (FarEndCarry)
// from one launch to the next.
#include <cuda_runtime.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>

#include "rt/cuda/check_cuda.h"
#include "rt/cuda/epoch_relauncher.h"
#include "rt/cuda/far_end_launch.h"
#include "rt/device_clock.h"
#include "rt/protocol/crc32.h"
#include "rt/queues/steering.h"

namespace rt::cuda {
namespace {

// A block a queue's far end: lane 0 of warp 0 sends, lane 0 of warp 1 receives, so
// building a request never waits for checking a reply (engine/far_end.h). Replies and the
// frames they are compared with are staged in shared memory.
constexpr uint32_t kFarEndThreads = 64;

template <Scope S>
__global__ void __launch_bounds__(kFarEndThreads, 1)
    far_end_kernel(const FarEndDesc* descs, FarEndCarry* carry, const uint32_t* stop,
                   uint32_t scratch_bytes, uint64_t epoch_ns) {
  extern __shared__ __align__(16) uint8_t staging[];
  __shared__ FarEndDesc d;
  __shared__ FarEndCarry c;
  __shared__ uint64_t until;
  __shared__ uint32_t status;
  crc32_tables_to_shared();
  if (threadIdx.x == 0) {
    d = descs[blockIdx.x];
    d.frame = staging;
    d.expect = staging + scratch_bytes / 2;
    c = carry[blockIdx.x];
    status = 0;
    if (!c.over && !far_end_carry_begin<S>(d, c)) carry[blockIdx.x] = c;  // bad_config
    until = epoch_ns ? globaltimer_ns() + epoch_ns : ~uint64_t(0);
  }
  __syncthreads();
  if (c.over) return;
  if (threadIdx.x == 0) {
    far_end_send<S>(d, c.s, c.sh, c.start, stop, until);
  } else if (threadIdx.x == 32) {
    status = far_end_receive<S>(d, c.r, c.sh, c.start, stop, until);
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    if (status) far_end_carry_finish(d, c, status);
    carry[blockIdx.x] = c;
  }
}

// Launch `blocks` blocks of `threads` with `smem` bytes of dynamic shared memory,
// raising the kernel's limit first when a large slot size needs more than 48 KiB
// with the static shared memory.
template <typename... KArgs>
void allow_dynamic_smem(void (*kernel)(KArgs...), size_t smem) {
  // The 48 KiB limit counts the kernel's static shared memory (the CRC tables) too.
  cudaFuncAttributes attr;
  check_cuda(cudaFuncGetAttributes(&attr, kernel), "cudaFuncGetAttributes");
  if (smem + attr.sharedSizeBytes > 48 * 1024)
    check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)),
               "cudaFuncSetAttribute(shared memory)");
}

template <typename... KArgs, typename... Args>
void launch_with_smem(void (*kernel)(KArgs...), uint32_t blocks, uint32_t threads, size_t smem,
                      cudaStream_t stream, Args&&... args) {
  allow_dynamic_smem(kernel, smem);
  kernel<<<blocks, threads, smem, stream>>>(std::forward<Args>(args)...);
}

}  // namespace

struct GpuFarEnd::Impl {
  int device = 0;                  // the relauncher's current device
  cudaStream_t stream = nullptr;   // the far end's epochs, in order
  cudaStream_t control = nullptr;  // the stop flag, set while `stream` is busy
  uint32_t* stop_flag = nullptr;   // device memory: polled by the far ends
  FarEndCarry* carry = nullptr;    // pinned, mapped: the far ends' state between epochs
  FarEndCarry* carry_device = nullptr;
  std::atomic<bool> stopping{false};  // stop() asked; the flag follows, from the run's thread
  bool flag_set = false;              // stop_flag is 1 (it stays so)
  bool left_behind = false;           // a run stuck in the driver may still use all of this
};

GpuFarEnd::GpuFarEnd() : impl_(std::make_unique<Impl>()) {
  Impl& f = *impl_;
  cudaFuncAttributes attr;
  check_cuda(cudaFuncGetAttributes(&attr, far_end_kernel<Scope::kDevice>), "load far_end_kernel");
  check_cuda(cudaGetDevice(&f.device), "cudaGetDevice");
  check_cuda(cudaStreamCreateWithFlags(&f.stream, cudaStreamNonBlocking), "cudaStreamCreate");
  check_cuda(cudaStreamCreateWithFlags(&f.control, cudaStreamNonBlocking), "cudaStreamCreate");
  // Stream-ordered: a plain cudaMalloc/cudaFree could wait for a running kernel.
  check_cuda(cudaMallocAsync(reinterpret_cast<void**>(&f.stop_flag), sizeof(uint32_t), f.control),
             "cudaMallocAsync(stop flag)");
  check_cuda(cudaMemsetAsync(f.stop_flag, 0, sizeof(uint32_t), f.control),
             "cudaMemsetAsync(stop flag)");
  check_cuda(cudaStreamSynchronize(f.control), "the far end's stop flag");
  check_cuda(cudaHostAlloc(reinterpret_cast<void**>(&f.carry), kMaxQueues * sizeof(FarEndCarry),
                           cudaHostAllocMapped),
             "cudaHostAlloc(far end state)");
  check_cuda(cudaHostGetDevicePointer(reinterpret_cast<void**>(&f.carry_device), f.carry, 0),
             "cudaHostGetDevicePointer(far end state)");
}

GpuFarEnd::~GpuFarEnd() {
  Impl& f = *impl_;
  if (f.left_behind) {  // a leak beats freeing memory a kernel may still write
    static_cast<void>(impl_.release());
    return;
  }
  cudaFreeAsync(f.stop_flag, f.control);
  cudaStreamSynchronize(f.control);
  cudaFreeHost(f.carry);
  cudaStreamDestroy(f.stream);
  cudaStreamDestroy(f.control);
}

void GpuFarEnd::stop() { impl_->stopping.store(true, std::memory_order_release); }

void GpuFarEnd::run(const FarEndDesc* descs, uint32_t queues, size_t scratch_bytes,
                    double timeout_s, uint64_t epoch_ns, const std::function<bool()>& beside) {
  Impl& f = *impl_;
  if (queues < 1 || queues > kMaxQueues)
    throw std::invalid_argument("far end: 1 to " + std::to_string(kMaxQueues) + " queues, not " +
                                std::to_string(queues));
  volatile FarEndCarry* carry = f.carry;
  for (uint32_t q = 0; q < queues; ++q) {
    carry[q].begun = 0;
    carry[q].over = 0;
  }
  // By value: a relauncher left behind (a run stuck in the driver) outlives this call.
  FarEndCarry* carry_device = f.carry_device;
  const uint32_t* stop_flag = f.stop_flag;
  const auto scratch = uint32_t(scratch_bytes);
  cudaStream_t stream = f.stream;
  auto launch = [=] {
    launch_with_smem(far_end_kernel<Scope::kDevice>, queues, kFarEndThreads, scratch_bytes, stream,
                     descs, carry_device, stop_flag, scratch, epoch_ns);
  };
  auto over = [carry, queues] {
    for (uint32_t q = 0; q < queues; ++q)
      if (!carry[q].over) return false;
    return true;
  };
  launch();
  check_cuda(cudaGetLastError(), "far_end_kernel launch");
  auto epochs = std::make_unique<EpochRelauncher>();
  EpochRelauncher::Plan plan;
  plan.stream = stream;
  plan.device = f.device;
  plan.in_flight = epoch_ns ? 2 : 1;
  plan.launch = launch;
  // An epoch queued behind the last one finds the run over and returns at once.
  plan.more = [=] { return epoch_ns != 0 && !over(); };
  plan.what = "the GPU far end";
  epochs->start(std::move(plan));
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s + 5.0);
  while (!epochs->finished()) {
    if (beside && !beside()) stop();
    if (!f.flag_set && f.stopping.load(std::memory_order_acquire)) {
      // Queued, not waited for: the control stream is idle, the far ends see it within a
      // pass, and a driver call that blocked here would keep the deadline below from firing.
      f.flag_set = true;
      if (cudaMemsetAsync(f.stop_flag, 1, sizeof(uint32_t), f.control) != cudaSuccess)
        cudaGetLastError();  // then the run ends by its timeout
    }
    if (std::chrono::steady_clock::now() > deadline) {
      // Stuck in the driver or in a kernel: the thread and what it uses are left behind.
      epochs->detach();
      static_cast<void>(epochs.release());
      f.left_behind = true;
      throw std::runtime_error("the GPU far end did not finish within its timeout + 5 s");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  epochs->join();
  if (!epochs->error().empty()) throw std::runtime_error(epochs->error());
}

}  // namespace rt::cuda
