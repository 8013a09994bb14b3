// Verbs mode's serve kernels with a user handler's entry left to the linker: compiled once, at
// build time, as relocatable device code (nvcc -rdc) with GPUNetIO's device API, and linked with
// the user's handler at start (custom_handler.py, as for the engine's: engine_linkable.cu), so
// that a handler needs no GPUNetIO headers at run time. One thread serves (verbs/serve_loop.h):
// the handler is called as a team of one, lanes 1, which it calls itself. The entry:
// handlers/linked_entry.h. The kernels' names: kServeKernelNames (verbs_serve.cuh), which the host
// loads them by (verbs_kernels.cu).
#include "rt/handlers/linked_entry.h"

#define RT_CUSTOM_ENTRY ::rt::call_linked_entry

#include "rt/cuda/verbs_serve.cuh"

extern "C" __global__ void rt_serve_kernel_cpu_proxy(RT_SERVE_KERNEL_PARAMS) {
  ::rt::cuda::serve_epoch<DOCA_GPUNETIO_VERBS_NIC_HANDLER_CPU_PROXY>(qp, d, shared, progress, stop,
                                                                     epoch_ns, warm_up);
}
extern "C" __global__ void rt_serve_kernel_gpu_sm_db(RT_SERVE_KERNEL_PARAMS) {
  ::rt::cuda::serve_epoch<DOCA_GPUNETIO_VERBS_NIC_HANDLER_GPU_SM_DB>(qp, d, shared, progress, stop,
                                                                     epoch_ns, warm_up);
}
extern "C" __global__ void rt_serve_kernel_gpu_sm_bf(RT_SERVE_KERNEL_PARAMS) {
  ::rt::cuda::serve_epoch<DOCA_GPUNETIO_VERBS_NIC_HANDLER_GPU_SM_BF>(qp, d, shared, progress, stop,
                                                                     epoch_ns, warm_up);
}
