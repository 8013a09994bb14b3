// A build without GPUNetIO's device API: no CUDA, or no headers found (cmake/gpunetio.cmake).
#include "rt/cuda/gpunetio_info.h"

#ifndef RT_GPUNETIO_SOURCE
#define RT_GPUNETIO_SOURCE "unknown"
#endif

namespace rt::cuda {

GpunetioInfo gpunetio_info() {
#if defined(RT_WITH_CUDA)
  return GpunetioInfo{false, std::string("headers ") + RT_GPUNETIO_SOURCE, 0, 0, 0};
#else
  return GpunetioInfo{false, "not built: this build has no CUDA", 0, 0, 0};
#endif
}

}  // namespace rt::cuda
