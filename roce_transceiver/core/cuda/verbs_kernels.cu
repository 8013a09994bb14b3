// GPUNetIO's verbs device API compiled into the extension (issue 6): kernels that drive a
// queue pair through it, instantiated for each NIC handler the software ConnectX serves (CPU
// proxy, GPU_SM_DB, GPU_SM_BF: the device API's template argument).
#include <cuda_runtime.h>

#include <cuda/ptx>

#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>

#include "doca_gpunetio_device.h"
#include "rt/cuda/epoch_relauncher.h"
#include "rt/cuda/gpunetio_info.h"
#include "rt/cuda/verbs_launch.h"
#include "rt/device_clock.h"
#include "rt/verbs/serve_loop.h"

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

// The non-blocking CQ poll takes the QP in newer GPUNetIO releases and the QP's send CQ in
// older ones (the NCCL wheel on the GPU machine): whichever this header has.
template <typename Qp>
__device__ auto poll_one(Qp* qp, uint64_t index, int)
    -> decltype(doca_gpu_dev_verbs_poll_one_cq_at(qp, index)) {
  return doca_gpu_dev_verbs_poll_one_cq_at(qp, index);
}
template <typename Qp>
__device__ auto poll_one(Qp* qp, uint64_t index, long)
    -> decltype(doca_gpu_dev_verbs_poll_one_cq_at(&qp->cq_sq, index)) {
  return doca_gpu_dev_verbs_poll_one_cq_at(&qp->cq_sq, index);
}

// One put_signal (an RDMA WRITE of `bytes`, then a FETCH_ADD of 1 on the signal) through the
// device API for handler H; returns the ticket to poll (the FETCH_ADD's WQE). Keys are stored
// big-endian already. `bf` is a WQE of this block's shared memory (GPU_SM_BF only).
template <doca_gpu_dev_verbs_nic_handler H>
__device__ uint64_t post_put_signal(doca_gpu_dev_verbs_qp* qp, const verbs::PutSignal& p,
                                    doca_gpu_dev_verbs_wqe* bf) {
  if constexpr (H != DOCA_GPUNETIO_VERBS_NIC_HANDLER_GPU_SM_BF) {
    doca_gpu_dev_verbs_ticket_t ticket;
    doca_gpu_dev_verbs_put_signal<DOCA_GPUNETIO_VERBS_SIGNAL_OP_ADD,
                                  DOCA_GPUNETIO_VERBS_RESOURCE_SHARING_MODE_GPU, H>(
        qp, {p.raddr, p.rkey}, {p.laddr, p.lkey}, p.bytes, {p.signal_raddr, p.signal_rkey},
        {p.sink_laddr, p.lkey}, 1, &ticket);
    return ticket;
  } else {
    // put_signal's submit has no BlueFlame branch (it would not ring at all for GPU_SM_BF): the
    // same two WQEs through the device API's own steps, the FETCH_ADD also prepared in shared
    // memory and rung through the window by submit_bf. Both stay in the send ring too, where
    // the NIC reads a WQE whose BlueFlame write it did not catch (docs/verbs_mode.md).
    const auto flags = DOCA_GPUNETIO_IB_MLX5_WQE_CTRL_CQ_UPDATE;
    const uint64_t base =
        doca_gpu_dev_verbs_reserve_wq_slots<DOCA_GPUNETIO_VERBS_RESOURCE_SHARING_MODE_GPU>(qp, 2);
    doca_gpu_dev_verbs_wqe_prepare_write(qp, doca_gpu_dev_verbs_get_wqe_ptr(qp, base), base,
                                         DOCA_GPUNETIO_IB_MLX5_OPCODE_RDMA_WRITE, flags, 0, p.raddr,
                                         p.rkey, p.laddr, p.lkey, p.bytes);
    for (doca_gpu_dev_verbs_wqe* w : {doca_gpu_dev_verbs_get_wqe_ptr(qp, base + 1), bf})
      doca_gpu_dev_verbs_wqe_prepare_atomic(qp, w, base + 1, DOCA_GPUNETIO_IB_MLX5_OPCODE_ATOMIC_FA,
                                            flags, p.signal_raddr, p.signal_rkey, p.sink_laddr,
                                            p.lkey, sizeof(uint64_t), 1, 0);
    doca_gpu_dev_verbs_mark_wqes_ready<DOCA_GPUNETIO_VERBS_RESOURCE_SHARING_MODE_GPU>(qp, base,
                                                                                      base + 1);
    // The bulk copy reads shared memory through the async proxy: our stores must reach it.
    ::cuda::ptx::fence_proxy_async(::cuda::ptx::space_shared);
    doca_gpu_dev_verbs_submit_bf<DOCA_GPUNETIO_VERBS_RESOURCE_SHARING_MODE_GPU>(qp, base + 2, bf);
    // The next put_signal rewrites `bf`: the copy must have read it first.
    ::cuda::ptx::cp_async_bulk_commit_group();
    ::cuda::ptx::cp_async_bulk_wait_group_read(::cuda::ptx::n32_t<0>{});
    return base + 1;
  }
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

// serve_loop's queue pair on the GPU: GPUNetIO's own put_signal (or its steps, BlueFlame) and
// CQ poll, for NIC handler H.
template <doca_gpu_dev_verbs_nic_handler H>
struct DeviceQueuePair {
  doca_gpu_dev_verbs_qp* qp;
  doca_gpu_dev_verbs_wqe* bf;

  __device__ uint64_t put_signal(const verbs::PutSignal& p) {
    __threadfence_system();  // the reply's bytes reach host memory before the doorbell
    return post_put_signal<H>(qp, p, bf);
  }
  __device__ int poll(uint64_t ticket) { return poll_one(qp, ticket, 0); }
  __device__ void idle() {}  // a spinning thread costs no one else here: the SM is ours
};

// One epoch of the serve loop: its progress in from device memory, served until the epoch
// ends (epoch_ns 0: until the loop does), and back. `warm_up`: return at once (the
// constructor's run, see verbs_launch.h).
template <doca_gpu_dev_verbs_nic_handler H>
__global__ void serve_kernel(doca_gpu_dev_verbs_qp* qp, verbs::ServeDesc d,
                             verbs::ServeShared* shared, verbs::ServeProgress* progress,
                             const uint32_t* stop, uint64_t epoch_ns, bool warm_up) {
  __shared__ doca_gpu_dev_verbs_wqe bf;
  if (warm_up) return;
  verbs::ServeProgress p = *progress;
  if (p.state != verbs::kServeRunning) return;  // an epoch queued behind the last one
  DeviceQueuePair<H> q{qp, &bf};
  const uint64_t until = epoch_ns ? globaltimer_ns() + epoch_ns : ~uint64_t(0);
  verbs::serve_pass(d, q, p, shared, stop, until);
  *progress = p;
}

using ServeFn = void (*)(doca_gpu_dev_verbs_qp*, verbs::ServeDesc, verbs::ServeShared*,
                         verbs::ServeProgress*, const uint32_t*, uint64_t, bool);
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
  ServeFn kernel = nullptr;
  doca_gpu_dev_verbs_qp* qp = nullptr;
  verbs::ServeDesc desc{};
  uint64_t epoch_ns = 0;
  uint32_t in_flight = 1;
  int device = 0;
  cudaStream_t stream = nullptr;
  verbs::ServeShared* shared = nullptr;      // pinned, mapped: the host reads it while it runs
  verbs::ServeProgress* progress = nullptr;  // device memory: the loop between epochs
  uint32_t* stop = nullptr;                  // pinned, mapped: a store, no CUDA call, stops it
  std::unique_ptr<EpochRelauncher> epochs;
  bool launched = false, ended = false;

  void launch_epoch() {
    kernel<<<1, 1, 0, stream>>>(qp, desc, shared, progress, mapped(stop), epoch_ns, false);
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
                         uint32_t epoch_us, uint32_t epochs_in_flight)
    : impl_(new Impl) {
  Impl& m = *impl_;
  try {
    m.kernel = for_handler<PickServe>(handler);
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
    m.kernel<<<1, 1, 0, m.stream>>>(m.qp, m.desc, m.shared, m.progress, Impl::mapped(m.stop), 0,
                                    true);
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
  m.launch_epoch();  // on the caller's thread: a launch that fails says so here
  check(cudaGetLastError(), "serve kernel launch");
  m.launched = true;
  // Epochs until the loop ends (stopped, done, or a completion error): each returns after
  // epoch_us, and the relauncher queues the next.
  EpochRelauncher::Plan plan;
  plan.stream = m.stream;
  plan.device = m.device;
  plan.in_flight = m.in_flight;
  plan.launch = [&m] { m.launch_epoch(); };
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
    // The kernel may still run: its memory stays, and the relauncher with it (a leak beats a
    // crash).
    m.epochs->detach();
    static_cast<void>(m.epochs.release());
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
