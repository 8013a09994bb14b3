#include "rt/host/memory.h"

#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <utility>

#include "rt/cuda/runtime_info.h"

#if defined(RT_WITH_CUDA)
#include <cuda_runtime.h>
#endif

namespace rt::host {
namespace {

#if defined(RT_WITH_CUDA)
// Device memory is allocated, copied and freed on this stream with the
// stream-ordered allocator: cudaMalloc/cudaFree/cudaMemcpy may synchronise the
// whole device, and would then wait forever for a persistent kernel.
cudaStream_t memory_stream() {
  static cudaStream_t stream = [] {
    cudaStream_t s = nullptr;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    return s;
  }();
  return stream;
}

void check(cudaError_t err, const char* what, size_t bytes) {
  if (err != cudaSuccess) {
    cudaGetLastError();
    throw std::runtime_error(std::string(what) + "(" + std::to_string(bytes) + " bytes): " +
                             cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")");
  }
}
#endif

#if !defined(RT_WITH_CUDA)
[[noreturn]] void no_cuda(Placement p) {
  throw std::runtime_error(std::string("placement '") + placement_name(p) +
                           "' needs CUDA, and this build has no CUDA support");
}
#endif

}  // namespace

const char* placement_name(Placement p) {
  switch (p) {
    case Placement::kHost: return "host";
    case Placement::kPinned: return "pinned";
    case Placement::kDevice: return "device";
  }
  return "?";
}

Buffer::Buffer(Placement where, size_t bytes) : where_(where), bytes_(bytes) {
  const size_t n = bytes ? bytes : 1;
  switch (where) {
    case Placement::kHost:
      host_ = static_cast<uint8_t*>(std::aligned_alloc(64, (n + 63) / 64 * 64));
      if (!host_)
        throw std::runtime_error("out of host memory for " + std::to_string(n) + " bytes");
      std::memset(host_, 0, n);
      break;
    case Placement::kPinned:
#if defined(RT_WITH_CUDA)
      check(cudaHostAlloc(reinterpret_cast<void**>(&host_), n, cudaHostAllocMapped),
            "cudaHostAlloc", n);
      std::memset(host_, 0, n);
      check(cudaHostGetDevicePointer(reinterpret_cast<void**>(&device_), host_, 0),
            "cudaHostGetDevicePointer", n);
#else
      no_cuda(where);
#endif
      break;
    case Placement::kDevice:
#if defined(RT_WITH_CUDA)
      check(cudaMallocAsync(reinterpret_cast<void**>(&device_), n, memory_stream()),
            "cudaMallocAsync", n);
      check(cudaMemsetAsync(device_, 0, n, memory_stream()), "cudaMemsetAsync", n);
      check(cudaStreamSynchronize(memory_stream()), "cudaStreamSynchronize(memory)", n);
#else
      no_cuda(where);
#endif
      break;
  }
}

Buffer::~Buffer() { release(); }

Buffer::Buffer(Buffer&& other) noexcept { *this = std::move(other); }

Buffer& Buffer::operator=(Buffer&& other) noexcept {
  if (this != &other) {
    release();
    where_ = other.where_;
    bytes_ = std::exchange(other.bytes_, 0);
    host_ = std::exchange(other.host_, nullptr);
    device_ = std::exchange(other.device_, nullptr);
  }
  return *this;
}

void Buffer::release() noexcept {
  switch (where_) {
    case Placement::kHost: std::free(host_); break;
#if defined(RT_WITH_CUDA)
    case Placement::kPinned:
      if (host_) cudaFreeHost(host_);
      break;
    case Placement::kDevice:
      if (device_) cudaFreeAsync(device_, memory_stream());
      break;
#else
    default: break;
#endif
  }
  host_ = device_ = nullptr;
  bytes_ = 0;
}

void Buffer::write(size_t offset, const void* src, size_t n) {
  if (offset > bytes_ || n > bytes_ - offset)
    throw std::out_of_range("Buffer::write past the end of a " + std::to_string(bytes_) +
                            "-byte buffer");
  if (where_ != Placement::kDevice) {
    std::memcpy(host_ + offset, src, n);
    return;
  }
#if defined(RT_WITH_CUDA)
  check(cudaMemcpyAsync(device_ + offset, src, n, cudaMemcpyHostToDevice, memory_stream()),
        "cudaMemcpyAsync to device", n);
  check(cudaStreamSynchronize(memory_stream()), "cudaStreamSynchronize(memory)", n);
#endif
}

void Buffer::read(size_t offset, void* dst, size_t n) const {
  if (offset > bytes_ || n > bytes_ - offset)
    throw std::out_of_range("Buffer::read past the end of a " + std::to_string(bytes_) +
                            "-byte buffer");
  if (where_ != Placement::kDevice) {
    std::memcpy(dst, host_ + offset, n);
    return;
  }
#if defined(RT_WITH_CUDA)
  check(cudaMemcpyAsync(dst, device_ + offset, n, cudaMemcpyDeviceToHost, memory_stream()),
        "cudaMemcpyAsync from device", n);
  check(cudaStreamSynchronize(memory_stream()), "cudaStreamSynchronize(memory)", n);
#endif
}

bool cuda_usable(std::string* why) {
  const cuda::RuntimeInfo info = cuda::runtime_info();
  if (!info.gpus.empty()) return true;
  if (why) *why = info.error.empty() ? "no GPU visible" : info.error;
  return false;
}

}  // namespace rt::host
