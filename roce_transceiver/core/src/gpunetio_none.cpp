// A build without GPUNetIO's device API: no CUDA, or no headers found (cmake/gpunetio.cmake).
#include <stdexcept>

#include "rt/cuda/gpunetio_info.h"
#include "rt/cuda/verbs_launch.h"

#ifndef RT_GPUNETIO_SOURCE
#define RT_GPUNETIO_SOURCE "unknown"
#endif

namespace rt::cuda {

GpunetioInfo gpunetio_info() {
#if defined(RT_WITH_CUDA)
  return GpunetioInfo{false, std::string("headers ") + RT_GPUNETIO_SOURCE, 0, 0, 0, false};
#else
  return GpunetioInfo{false, "not built: this build has no CUDA", 0, 0, 0, false};
#endif
}

PutSignalResult put_signal_loop(const PutSignalParams&) {
  throw std::runtime_error("put_signal_loop: this build has no GPUNetIO device API (" +
                           gpunetio_info().source + ")");
}

struct ServeKernel::Impl {};

ServeKernel::ServeKernel(const void*, const verbs::ServeDesc&, verbs::NicHandler, uint32_t,
                         uint32_t, const std::vector<uint8_t>&)
    : impl_(nullptr) {
  throw std::runtime_error("Verbs mode on the GPU: this build has no GPUNetIO device API (" +
                           gpunetio_info().source +
                           "); the cpu executor runs Verbs mode without it");
}

ServeKernel::~ServeKernel() = default;
void ServeKernel::launch() {}
void ServeKernel::request_stop() {}
bool ServeKernel::wait(double) { return true; }
uint64_t ServeKernel::epochs() const { return 0; }
const verbs::ServeShared& ServeKernel::shared() const {
  static const verbs::ServeShared none{};
  return none;
}

}  // namespace rt::cuda
