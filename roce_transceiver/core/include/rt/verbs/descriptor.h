// The device-visible descriptor of a queue pair (struct doca_gpu_dev_verbs_qp) for one of the
// NIC handlers the software ConnectX serves (mlx5_layout.h: NicHandler). Its layout is GPUNetIO's
// and changes between its releases, so it is filled through the compiled headers' structure
// (src/verbs_descriptor.cpp), not by offsets.
#pragma once

#include <cstddef>
#include <cstdint>

#include "rt/verbs/mlx5_layout.h"

namespace rt::verbs {

struct DescriptorParams {
  uint32_t qpn = 0;
  uint32_t sq_wqe_num = 0;  // send ring entries (64 bytes each), a power of two
  uint32_t cqe_num = 0;     // completion ring entries, a power of two
  uint64_t sq_device = 0;   // the addresses the device uses
  uint64_t cq_device = 0;
  uint64_t doorbell_device = 0;  // the doorbell page (mlx5_layout.h: sq_db, sq_dbrec, cq dbrec)
  NicHandler handler = NicHandler::kCpuProxy;
};

// sizeof(struct doca_gpu_dev_verbs_qp) as compiled; 0 without GPUNetIO's headers.
size_t descriptor_bytes();

// Throws without GPUNetIO's headers, or when `out_bytes` is too small.
void fill_descriptor(const DescriptorParams& p, uint8_t* out, size_t out_bytes);

}  // namespace rt::verbs
