// GPUNetIO's verbs device API compiled into the extension (issue 6). The kernel below is
// the shape of Verbs mode's answer path: a put of the reply into the peer's ring followed by
// an atomic add on its signal word (put_signal), with the CPU-proxy NIC handler the software
// ConnectX serves. It is compiled (the build proves the headers work with our flags); it is
// launched only by Verbs mode itself.
#include "doca_gpunetio_device.h"
#include "rt/cuda/gpunetio_info.h"

#ifndef RT_GPUNETIO_SOURCE
#define RT_GPUNETIO_SOURCE "unknown"
#endif

namespace rt::cuda {
namespace {

__global__ void answer_with_put_signal(doca_gpu_dev_verbs_qp* qp, doca_gpu_dev_verbs_addr reply,
                                       doca_gpu_dev_verbs_addr local, size_t bytes,
                                       doca_gpu_dev_verbs_addr signal,
                                       doca_gpu_dev_verbs_addr signal_local) {
  doca_gpu_dev_verbs_ticket_t ticket;
  doca_gpu_dev_verbs_put_signal<DOCA_GPUNETIO_VERBS_SIGNAL_OP_ADD,
                                DOCA_GPUNETIO_VERBS_RESOURCE_SHARING_MODE_GPU,
                                DOCA_GPUNETIO_VERBS_NIC_HANDLER_CPU_PROXY>(
      qp, reply, local, bytes, signal, signal_local, 1, &ticket);
}

}  // namespace

GpunetioInfo gpunetio_info() {
  // Naming the kernel keeps it (and so the device API's code) in the build.
  (void)&answer_with_put_signal;
  return GpunetioInfo{true, RT_GPUNETIO_SOURCE, sizeof(doca_gpu_dev_verbs_qp),
                      sizeof(doca_gpu_dev_verbs_cq), sizeof(doca_gpu_dev_verbs_wqe)};
}

}  // namespace rt::cuda
