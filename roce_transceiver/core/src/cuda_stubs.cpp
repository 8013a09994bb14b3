// Stand-ins for the CUDA translation units in a build without nvcc (or with
// RT_CUDA=OFF): every entry point reports that no CUDA code was built.
#include <stdexcept>

#include "rt/cuda/engine_launch.h"
#include "rt/cuda/far_end_launch.h"
#include "rt/cuda/protocol_device.h"
#include "rt/cuda/runtime_info.h"

namespace rt::cuda {
namespace {
[[noreturn]] void no_cuda() {
  throw std::runtime_error("this build has no CUDA support (built without nvcc, or RT_CUDA=OFF)");
}
}  // namespace

RuntimeInfo runtime_info() {
  RuntimeInfo info;
  info.error = "this build has no CUDA support (built without nvcc, or RT_CUDA=OFF)";
  return info;
}

void icrc_on_device(const std::vector<uint8_t>&, const std::vector<uint32_t>&,
                    const std::vector<uint32_t>&, std::vector<uint32_t>&, std::vector<uint32_t>&) {
  no_cuda();
}

void reencode_on_device(const std::vector<uint8_t>&, const std::vector<uint32_t>&,
                        const std::vector<uint32_t>&, std::vector<uint8_t>&,
                        std::vector<uint32_t>&) {
  no_cuda();
}

void hsb_psn_on_device(const std::vector<uint8_t>&, const std::vector<uint32_t>&,
                       const std::vector<uint32_t>&, std::vector<uint8_t>&, std::vector<uint32_t>&,
                       std::vector<int32_t>&) {
  no_cuda();
}

void copy_team_on_device(const std::vector<uint8_t>&, const std::vector<std::array<uint32_t, 3>>&,
                         std::vector<uint8_t>&) {
  no_cuda();
}

struct EngineKernel::Impl {};
EngineKernel::EngineKernel() { no_cuda(); }
EngineKernel::~EngineKernel() = default;
void EngineKernel::start(const std::vector<EngineDesc>&, EngineState*, bool, uint64_t*,
                         const LaunchOptions&) {
  no_cuda();
}
EpochStats EngineKernel::epoch_stats() const { return {}; }
void EngineKernel::stop(double) {}
void EngineKernel::check() const {}
bool EngineKernel::running() const { return false; }

struct GpuFarEnd::Impl {};
GpuFarEnd::GpuFarEnd() { no_cuda(); }
GpuFarEnd::~GpuFarEnd() = default;
void GpuFarEnd::run(const FarEndDesc*, uint32_t, size_t, double, uint64_t,
                    const std::function<bool()>&) {
  no_cuda();
}
void GpuFarEnd::stop() {}

}  // namespace rt::cuda
