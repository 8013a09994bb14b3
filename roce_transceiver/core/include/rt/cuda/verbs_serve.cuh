// Verbs mode's serve loop on the GPU (verbs/serve_loop.h over GPUNetIO's verbs device API),
// device code: the put_signal and CQ poll for each NIC handler the software ConnectX serves, and
// one epoch of the loop. Built twice: into the extension with the built-in handlers
// (cuda/verbs_kernels.cu), and as relocatable code that a user's handler is linked into at
// start (cuda/verbs_linkable.cu, custom_handler.py). GPUNetIO's headers are needed at build
// time only.
#pragma once

#include <cuda/ptx>

#include "doca_gpunetio_device.h"
#include "rt/device_clock.h"
#include "rt/verbs/serve_loop.h"

namespace rt::cuda {

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

// The serve kernels' parameters, for a kernel defined by name (verbs_linkable.cu).
#define RT_SERVE_KERNEL_PARAMS                                                           \
  doca_gpu_dev_verbs_qp *qp, ::rt::verbs::ServeDesc d, ::rt::verbs::ServeShared *shared, \
      ::rt::verbs::ServeProgress *progress, const uint32_t *stop, uint64_t epoch_ns, bool warm_up

// One epoch of the serve loop, by one thread: its progress in from device memory, served until
// the epoch ends (epoch_ns 0: until the loop does), and back. `warm_up`: return at once (the
// constructor's run, see verbs_launch.h).
template <doca_gpu_dev_verbs_nic_handler H>
__device__ void serve_epoch(RT_SERVE_KERNEL_PARAMS) {
  __shared__ doca_gpu_dev_verbs_wqe bf;
  if (warm_up) return;
  verbs::ServeProgress p = *progress;
  if (p.state != verbs::kServeRunning) return;  // an epoch queued behind the last one
  DeviceQueuePair<H> q{qp, &bf};
  const uint64_t until = epoch_ns ? globaltimer_ns() + epoch_ns : ~uint64_t(0);
  verbs::serve_pass(d, q, p, shared, stop, until);
  *progress = p;
}

// The linked module's serve kernels, by verbs::NicHandler (CPU proxy, GPU_SM_DB, GPU_SM_BF).
constexpr const char* kServeKernelNames[3] = {
    "rt_serve_kernel_cpu_proxy", "rt_serve_kernel_gpu_sm_db", "rt_serve_kernel_gpu_sm_bf"};

}  // namespace rt::cuda
