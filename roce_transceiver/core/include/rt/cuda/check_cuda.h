// A failed CUDA runtime call as the exception the host's callers catch: the call, the error's
// name and its text. The runtime's last error is cleared, so the next check is about its own
// call. For the .cu files' host code.
#pragma once

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace rt::cuda {

inline void check_cuda(cudaError_t err, const char* what) {
  if (err != cudaSuccess) {
    cudaGetLastError();
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorName(err) + " (" +
                             cudaGetErrorString(err) + ")");
  }
}

}  // namespace rt::cuda
