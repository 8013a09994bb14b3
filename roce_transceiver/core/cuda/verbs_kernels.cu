// GPUNetIO's verbs device API compiled into the extension (issue 6): kernels that drive a
// queue pair through it, instantiated for each NIC handler the software ConnectX serves (CPU
// proxy, GPU_SM_DB, GPU_SM_BF: the device API's template argument), and their host side. A
// user's handler runs in the serve kernel of its own module (verbs_linkable.cu), which the host
// side loads and launches in place of the built-in one.
#include <cuda_runtime.h>

#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "rt/cuda/epoch_relauncher.h"
#include "rt/cuda/gpunetio_info.h"
#include "rt/cuda/kernel_function.h"
#include "rt/cuda/verbs_launch.h"
#include "rt/cuda/verbs_serve.cuh"

#ifndef RT_GPUNETIO_SOURCE
#define RT_GPUNETIO_SOURCE "unknown"
#endif

namespace rt::cuda {
namespace {

uint32_t be32(uint32_t v) { return __builtin_bswap32(v); }

void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess)
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(err));
}

// Keys arrive big-endian (the launcher swaps them), as the device API stores them verbatim.
// One thread posts a put_signal, waits for its completion (non-blocking polls against a
// deadline, so that a NIC that never answers cannot hang the kernel), and goes on.
template <doca_gpu_dev_verbs_nic_handler H>
__global__ void put_signal_loop_kernel(doca_gpu_dev_verbs_qp* qp, PutSignalParams p,
                                       PutSignalResult* out) {
  __shared__ doca_gpu_dev_verbs_wqe bf;
  const uint64_t start = globaltimer_ns();
  const uint64_t deadline = start + uint64_t(p.timeout_s * 1e9);
  PutSignalResult r;
  for (uint32_t i = 0; i < p.count && !r.timed_out; ++i) {
    const verbs::PutSignal ps{p.raddr + uint64_t(i % p.slots) * p.slot_bytes,
                              p.rkey,
                              p.laddr,
                              p.lkey,
                              p.size,
                              p.sig_raddr,
                              p.sig_rkey,
                              p.sink_laddr};
    const uint64_t ticket = post_put_signal<H>(qp, ps, &bf);
    int status;
    while ((status = poll_one(qp, ticket, 0)) == EBUSY) {
      if (globaltimer_ns() > deadline) {
        r.timed_out = true;
        break;
      }
    }
    if (r.timed_out) break;
    if (status == 0)
      ++r.completed;
    else
      ++r.errors;
  }
  r.elapsed_ns = globaltimer_ns() - start;
  *out = r;
}

// The built-in handlers' serve kernel (echo, qec) for NIC handler H.
template <doca_gpu_dev_verbs_nic_handler H>
__global__ void serve_kernel(RT_SERVE_KERNEL_PARAMS) {
  serve_epoch<H>(qp, d, shared, progress, stop, epoch_ns, warm_up);
}

using ServeFn = void (*)(RT_SERVE_KERNEL_PARAMS);
using PutSignalFn = void (*)(doca_gpu_dev_verbs_qp*, PutSignalParams, PutSignalResult*);

// The release of the device API that has a CQ type (nvshmem 3.7+) gives submit_bf's bulk copy
// the shared-memory address of the WQE; the older one (the NCCL wheel's) gives it the WQE's
// first 8 bytes instead (doca_gpu_dev_verbs_ring_bf: "l"(*wqe)), a copy from nowhere.
template <typename Cq, typename = void>
struct BlueFlameRings : std::false_type {};
template <typename Cq>
struct BlueFlameRings<Cq, std::void_t<decltype(std::declval<Cq&>().cq_type)>> : std::true_type {};

// The kernels' instantiation for a handler.
template <template <doca_gpu_dev_verbs_nic_handler> class Pick>
auto for_handler(verbs::NicHandler h) {
  switch (h) {
    case verbs::NicHandler::kCpuProxy: return Pick<DOCA_GPUNETIO_VERBS_NIC_HANDLER_CPU_PROXY>::fn;
    case verbs::NicHandler::kGpuSmDb: return Pick<DOCA_GPUNETIO_VERBS_NIC_HANDLER_GPU_SM_DB>::fn;
    case verbs::NicHandler::kGpuSmBf:
      if (!BlueFlameRings<doca_gpu_dev_verbs_cq>::value)
        throw std::runtime_error(
            "Verbs mode: GPU_SM_BF with these GPUNetIO headers (" RT_GPUNETIO_SOURCE
            "): their doca_gpu_dev_verbs_ring_bf hands the bulk copy the WQE's first 8 bytes "
            "as its shared-memory address; build with nvshmem 3.7+'s headers "
            "(RT_GPUNETIO_INCLUDE) for BlueFlame");
      return Pick<DOCA_GPUNETIO_VERBS_NIC_HANDLER_GPU_SM_BF>::fn;
  }
  throw std::invalid_argument("Verbs mode: NIC handler " + std::to_string(int(h)) +
                              " has no kernel");
}
template <doca_gpu_dev_verbs_nic_handler H>
struct PickServe {
  static constexpr ServeFn fn = serve_kernel<H>;
};
template <doca_gpu_dev_verbs_nic_handler H>
struct PickPutSignal {
  static constexpr PutSignalFn fn = put_signal_loop_kernel<H>;
};

}  // namespace

struct ServeKernel::Impl {
  KernelFunction kernel;  // the built-in one, or the user handler's module's
  LoadedModule module;    // a user handler's serve kernels, or none
  doca_gpu_dev_verbs_qp* qp = nullptr;
  verbs::ServeDesc desc{};
  uint64_t epoch_ns = 0;
  uint32_t in_flight = 1;
  int device = 0;
  cudaStream_t stream = nullptr;
  verbs::ServeShared* shared = nullptr;      // pinned, mapped: the host reads it while it runs
  verbs::ServeProgress* progress = nullptr;  // device memory: the loop between epochs
  uint32_t* stop = nullptr;                  // pinned, mapped: a store, no CUDA call, stops it
  const uint32_t* stop_device = nullptr;     //   and as the kernel sees it
  std::unique_ptr<EpochRelauncher> epochs;
  bool launched = false, ended = false;

  // One thread: an epoch of the loop (or, `warm_up`, a return at once).
  void launch(bool warm_up) {
    doca_gpu_dev_verbs_qp* a_qp = qp;
    verbs::ServeDesc a_desc = desc;
    verbs::ServeShared* a_shared = shared;
    verbs::ServeProgress* a_progress = progress;
    const uint32_t* a_stop = stop_device;
    uint64_t a_epoch_ns = warm_up ? 0 : epoch_ns;
    bool a_warm_up = warm_up;
    void* args[] = {&a_qp, &a_desc, &a_shared, &a_progress, &a_stop, &a_epoch_ns, &a_warm_up};
    kernel.launch(1, 1, 0, stream, args);
  }
  template <typename T>
  static T* mapped(T* host) {
    T* device = nullptr;
    check(cudaHostGetDevicePointer(reinterpret_cast<void**>(&device), host, 0),
          "cudaHostGetDevicePointer");
    return device;
  }
};

ServeKernel::ServeKernel(const void* qp, const verbs::ServeDesc& desc, verbs::NicHandler handler,
                         uint32_t epoch_us, uint32_t epochs_in_flight,
                         const std::vector<uint8_t>& kernel_image)
    : impl_(new Impl) {
  Impl& m = *impl_;
  try {
    m.kernel = KernelFunction{reinterpret_cast<const void*>(for_handler<PickServe>(handler)),
                              nullptr, "Verbs serve kernel"};
    if (epochs_in_flight < 1 || epochs_in_flight > 4)
      throw std::invalid_argument("Verbs mode: epochs in flight: 1 to 4, not " +
                                  std::to_string(epochs_in_flight));
  } catch (...) {
    delete impl_;
    throw;
  }
  m.qp = static_cast<doca_gpu_dev_verbs_qp*>(const_cast<void*>(qp));
  m.desc = desc;
  m.desc.lkey = be32(desc.lkey);
  m.desc.peer_ring_rkey = be32(desc.peer_ring_rkey);
  m.desc.peer_signal_rkey = be32(desc.peer_signal_rkey);
  m.epoch_ns = uint64_t(epoch_us) * 1000;
  m.in_flight = epoch_us ? epochs_in_flight : 1;
  try {
    check(cudaGetDevice(&m.device), "cudaGetDevice");
    check(cudaHostAlloc(&m.shared, sizeof *m.shared, cudaHostAllocMapped), "cudaHostAlloc");
    *m.shared = verbs::ServeShared{};
    check(cudaHostAlloc(&m.stop, sizeof *m.stop, cudaHostAllocMapped), "cudaHostAlloc(stop flag)");
    *m.stop = 0;
    check(cudaMalloc(&m.progress, sizeof *m.progress), "cudaMalloc(serve loop progress)");
    const verbs::ServeProgress fresh{};
    check(cudaMemcpy(m.progress, &fresh, sizeof fresh, cudaMemcpyHostToDevice),
          "cudaMemcpy(serve loop progress)");
    check(cudaStreamCreateWithFlags(&m.stream, cudaStreamNonBlocking), "cudaStreamCreate");
    m.stop_device = Impl::mapped(m.stop);
    if (!kernel_image.empty()) {
      // A user's handler linked into the serve kernels (custom_handler.py): loaded here, before
      // any persistent kernel runs (a module load waits for the device to go idle).
      m.module = LoadedModule(kernel_image, "the user handler's Verbs serve kernels");
      m.kernel = m.module.function(kServeKernelNames[int(handler)], "Verbs serve kernel");
    }
    m.launch(true);
    check(cudaGetLastError(), "serve kernel (warm-up) launch");
    check(cudaStreamSynchronize(m.stream), "serve kernel (warm-up)");
  } catch (...) {
    if (m.stream) cudaStreamDestroy(m.stream);
    cudaFree(m.progress);
    cudaFreeHost(m.stop);
    cudaFreeHost(m.shared);
    delete impl_;
    throw;
  }
}

void ServeKernel::launch() {
  Impl& m = *impl_;
  if (m.launched) throw std::logic_error("ServeKernel: already launched");
  m.launch(false);  // on the caller's thread: a launch that fails says so here
  check(cudaGetLastError(), "serve kernel launch");
  m.launched = true;
  // Epochs until the loop ends (stopped, done, or a completion error): each returns after
  // epoch_us, and the relauncher queues the next.
  EpochRelauncher::Plan plan;
  plan.stream = m.stream;
  plan.device = m.device;
  plan.in_flight = m.in_flight;
  plan.launch = [&m] { m.launch(false); };
  const volatile uint64_t* state = &m.shared->state;
  plan.more = [&m, state] { return m.epoch_ns != 0 && *state == verbs::kServeRunning; };
  plan.what = "the Verbs serve kernel";
  m.epochs = std::make_unique<EpochRelauncher>();
  m.epochs->start(std::move(plan));
}

void ServeKernel::request_stop() {
  // A store to pinned memory the loop polls: no CUDA call that a busy driver could hold up.
  __atomic_store_n(impl_->stop, 1u, __ATOMIC_RELEASE);
}

bool ServeKernel::wait(double timeout_s) {
  Impl& m = *impl_;
  if (!m.launched || m.ended) return true;
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (!m.epochs->finished()) {
    if (std::chrono::steady_clock::now() > give_up) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  m.epochs->join();
  m.ended = true;
  if (!m.epochs->error().empty()) throw std::runtime_error(m.epochs->error());
  return true;
}

const verbs::ServeShared& ServeKernel::shared() const { return *impl_->shared; }

uint64_t ServeKernel::epochs() const { return impl_->epochs ? impl_->epochs->launched() : 0; }

ServeKernel::~ServeKernel() {
  Impl& m = *impl_;
  if (m.launched && !m.ended && !m.epochs->finished()) {
    // The kernel may still run: its memory and code stay, and the relauncher with it (a leak
    // beats a crash).
    m.epochs->detach();
    static_cast<void>(m.epochs.release());
    m.module.leave_loaded();
    delete impl_;
    return;
  }
  m.epochs.reset();
  cudaStreamDestroy(m.stream);
  cudaFree(m.progress);
  cudaFreeHost(m.stop);
  cudaFreeHost(m.shared);
  delete impl_;
}

PutSignalResult put_signal_loop(const PutSignalParams& params) {
  const PutSignalFn kernel = for_handler<PickPutSignal>(params.handler);
  PutSignalParams p = params;
  p.rkey = be32(p.rkey);
  p.lkey = be32(p.lkey);
  p.sig_rkey = be32(p.sig_rkey);
  PutSignalResult* out = nullptr;
  check(cudaMallocHost(&out, sizeof *out), "cudaMallocHost");
  cudaStream_t stream;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  *out = PutSignalResult{};
  out->timed_out = true;  // until the kernel says otherwise
  kernel<<<1, 1, 0, stream>>>(static_cast<doca_gpu_dev_verbs_qp*>(const_cast<void*>(p.qp)), p, out);
  cudaError_t err = cudaGetLastError();
  // The kernel keeps its own deadline; the host waits a little longer before giving up.
  const auto give_up =
      std::chrono::steady_clock::now() + std::chrono::duration<double>(p.timeout_s + 5.0);
  while (err == cudaSuccess) {
    err = cudaStreamQuery(stream);
    if (err != cudaErrorNotReady) break;
    if (std::chrono::steady_clock::now() > give_up) break;
    err = cudaSuccess;  // not ready yet: ask again
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  const PutSignalResult r = *out;
  if (err == cudaSuccess) {
    cudaStreamDestroy(stream);
    cudaFreeHost(out);
  }  // else the kernel may still run: its memory stays (a leak beats a crash)
  if (err != cudaSuccess && err != cudaErrorNotReady) check(err, "put_signal_loop kernel");
  if (err == cudaErrorNotReady)
    throw std::runtime_error("put_signal_loop: the kernel did not end within its deadline");
  return r;
}

GpunetioInfo gpunetio_info() {
  return GpunetioInfo{true,
                      RT_GPUNETIO_SOURCE,
                      sizeof(doca_gpu_dev_verbs_qp),
                      sizeof(doca_gpu_dev_verbs_cq),
                      sizeof(doca_gpu_dev_verbs_wqe),
                      BlueFlameRings<doca_gpu_dev_verbs_cq>::value};
}

}  // namespace rt::cuda
