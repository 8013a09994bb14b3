// What the CUDA runtime sees, asked from host code that is compiled without nvcc.
#pragma once

#include <string>
#include <vector>

namespace rt::cuda {

struct GpuInfo {
  int index = 0;
  std::string name;
  int sm_major = 0;
  int sm_minor = 0;
  int multiprocessors = 0;
  size_t memory_bytes = 0;
};

struct RuntimeInfo {
  bool built = false;  // this build has CUDA code in it
  int runtime_version = 0;
  int driver_version = 0;  // 0 when no driver is loaded
  std::vector<GpuInfo> gpus;
  std::string error;  // why no GPU is usable, empty otherwise
};

// Never throws: a machine without a driver or GPU yields an empty gpus list
// and the CUDA error text in `error`.
RuntimeInfo runtime_info();

}  // namespace rt::cuda
