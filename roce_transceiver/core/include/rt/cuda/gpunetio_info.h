// What this build knows of GPUNetIO's verbs device API (issue 6): where its headers came
// from, and the sizes of the structures the device code reads, as the device compiler saw
// them (a software NIC that fills them must agree).
#pragma once

#include <cstddef>
#include <string>

namespace rt::cuda {

struct GpunetioInfo {
  bool built = false;      // the device API was compiled into this build
  std::string source;      // where its headers came from, or why there are none
  size_t qp_bytes = 0;     // sizeof(struct doca_gpu_dev_verbs_qp)
  size_t cq_bytes = 0;     // sizeof(struct doca_gpu_dev_verbs_cq)
  size_t wqe_bytes = 0;    // sizeof(struct doca_gpu_dev_verbs_wqe)
  bool blueflame = false;  // its submit_bf can ring (not the NCCL wheel's: verbs_kernels.cu)
};

GpunetioInfo gpunetio_info();

}  // namespace rt::cuda
