// Device builds of the protocol headers, and what the CUDA runtime can see.
//
// The kernels here exist so tests can prove that the protocol code nvcc
// compiles for the GPU gives the same bytes as the host build.
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "rt/cuda/protocol_device.h"
#include "rt/cuda/runtime_info.h"
#include "rt/protocol/icrc.h"
#include "rt/protocol/icrc_warp.cuh"

namespace rt::cuda {
namespace {

void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess)
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorName(err) + " (" +
                             cudaGetErrorString(err) + ")");
}

// Frees on scope exit, so a failed check cannot leak device memory.
template <typename T>
struct DeviceBuffer {
  T* ptr = nullptr;
  explicit DeviceBuffer(size_t n) { check(cudaMalloc(&ptr, n * sizeof(T) + 1), "cudaMalloc"); }
  ~DeviceBuffer() { cudaFree(ptr); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

__global__ void icrc_thread_kernel(const uint8_t* frames, const uint32_t* offsets,
                                   const uint32_t* lengths, uint32_t n, uint32_t* out) {
  const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const DecodeResult r = decode(ByteSpan(frames + offsets[i], lengths[i]));
  out[i] = r.ok() ? icrc_compute(r.frame) : 0;
}

__global__ void icrc_warp_kernel(const uint8_t* frames, const uint32_t* offsets,
                                 const uint32_t* lengths, uint32_t n, uint32_t* out) {
  const uint32_t warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
  const uint32_t lane = threadIdx.x % 32;
  if (warp >= n) return;  // whole warps leave together
  const DecodeResult r = decode(ByteSpan(frames + offsets[warp], lengths[warp]));
  if (!r.ok()) {
    if (lane == 0) out[warp] = 0;
    return;
  }
  const uint32_t icrc = icrc_compute_warp(r.frame, lane);
  if (lane == 0) out[warp] = icrc;
}

}  // namespace

RuntimeInfo runtime_info() {
  RuntimeInfo info;
  info.built = true;
  cudaRuntimeGetVersion(&info.runtime_version);
  cudaDriverGetVersion(&info.driver_version);
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    info.error = std::string(cudaGetErrorName(err)) + ": " + cudaGetErrorString(err);
    cudaGetLastError();  // clear it, so later calls start clean
    return info;
  }
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, i) != cudaSuccess) continue;
    info.gpus.push_back(
        {i, p.name, p.major, p.minor, p.multiProcessorCount, size_t(p.totalGlobalMem)});
  }
  if (info.gpus.empty()) info.error = "the CUDA runtime sees no GPU";
  return info;
}

void icrc_on_device(const std::vector<uint8_t>& frames, const std::vector<uint32_t>& offsets,
                    const std::vector<uint32_t>& lengths, std::vector<uint32_t>& per_thread,
                    std::vector<uint32_t>& per_warp) {
  const uint32_t n = uint32_t(offsets.size());
  if (lengths.size() != n) throw std::invalid_argument("offsets and lengths differ in size");
  for (uint32_t i = 0; i < n; ++i)
    if (uint64_t(offsets[i]) + lengths[i] > frames.size())
      throw std::invalid_argument("frame " + std::to_string(i) + " runs past the buffer");
  per_thread.assign(n, 0);
  per_warp.assign(n, 0);
  if (n == 0) return;
  DeviceBuffer<uint8_t> d_frames(frames.size());
  DeviceBuffer<uint32_t> d_off(n), d_len(n), d_thread(n), d_warp(n);
  check(cudaMemcpy(d_frames.ptr, frames.data(), frames.size(), cudaMemcpyHostToDevice), "copy");
  check(cudaMemcpy(d_off.ptr, offsets.data(), n * 4, cudaMemcpyHostToDevice), "copy");
  check(cudaMemcpy(d_len.ptr, lengths.data(), n * 4, cudaMemcpyHostToDevice), "copy");
  icrc_thread_kernel<<<(n + 127) / 128, 128>>>(d_frames.ptr, d_off.ptr, d_len.ptr, n,
                                               d_thread.ptr);
  check(cudaGetLastError(), "icrc_thread_kernel launch");
  icrc_warp_kernel<<<(n + 3) / 4, 128>>>(d_frames.ptr, d_off.ptr, d_len.ptr, n, d_warp.ptr);
  check(cudaGetLastError(), "icrc_warp_kernel launch");
  check(cudaDeviceSynchronize(), "icrc kernels");
  check(cudaMemcpy(per_thread.data(), d_thread.ptr, n * 4, cudaMemcpyDeviceToHost), "copy back");
  check(cudaMemcpy(per_warp.data(), d_warp.ptr, n * 4, cudaMemcpyDeviceToHost), "copy back");
}

}  // namespace rt::cuda
