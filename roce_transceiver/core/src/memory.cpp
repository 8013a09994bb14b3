#include "rt/host/memory.h"

#include <array>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <utility>

#include "rt/cuda/runtime_info.h"

#if defined(RT_WITH_CUDA)
#include <cuda_runtime.h>
#endif

namespace rt::host {
namespace {

#if defined(RT_WITH_CUDA)
// Device memory is allocated, copied and freed on its device's stream with the
// stream-ordered allocator: cudaMalloc/cudaFree/cudaMemcpy may synchronise the
// whole device, and would then wait forever for a persistent kernel. Called with
// `device` current (a stream belongs to the device current when it is made).
constexpr int kMaxGpus = 64;
cudaStream_t memory_stream(int device) {
  static std::mutex mu;
  static std::array<cudaStream_t, kMaxGpus> streams{};
  const std::lock_guard<std::mutex> lock(mu);
  cudaStream_t& s = streams[size_t(device) % kMaxGpus];
  if (!s) cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  return s;
}

int current_device() {
  int d = 0;
  cudaGetDevice(&d);
  return d;
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
      gpu_ = current_device();
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
      gpu_ = current_device();
      check(cudaMallocAsync(reinterpret_cast<void**>(&device_), n, memory_stream(gpu_)),
            "cudaMallocAsync", n);
      check(cudaMemsetAsync(device_, 0, n, memory_stream(gpu_)), "cudaMemsetAsync", n);
      check(cudaStreamSynchronize(memory_stream(gpu_)), "cudaStreamSynchronize(memory)", n);
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
    gpu_ = other.gpu_;
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
      if (device_) {
        const DeviceScope scope(gpu_);  // a frame's region may go last, on any thread
        cudaFreeAsync(device_, memory_stream(gpu_));
      }
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
  const DeviceScope scope(gpu_);
  check(cudaMemcpyAsync(device_ + offset, src, n, cudaMemcpyHostToDevice, memory_stream(gpu_)),
        "cudaMemcpyAsync to device", n);
  check(cudaStreamSynchronize(memory_stream(gpu_)), "cudaStreamSynchronize(memory)", n);
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
  const DeviceScope scope(gpu_);
  check(cudaMemcpyAsync(dst, device_ + offset, n, cudaMemcpyDeviceToHost, memory_stream(gpu_)),
        "cudaMemcpyAsync from device", n);
  check(cudaStreamSynchronize(memory_stream(gpu_)), "cudaStreamSynchronize(memory)", n);
#endif
}

DeviceScope::DeviceScope(int device) {
#if defined(RT_WITH_CUDA)
  if (cudaGetDevice(&previous_) != cudaSuccess) {
    cudaGetLastError();
    previous_ = -1;
    return;
  }
  if (previous_ == device) {
    previous_ = -1;  // nothing to put back
    return;
  }
  if (cudaSetDevice(device) != cudaSuccess) {
    cudaGetLastError();
    previous_ = -1;
  }
#else
  static_cast<void>(device);
#endif
}

DeviceScope::~DeviceScope() {
#if defined(RT_WITH_CUDA)
  if (previous_ >= 0) cudaSetDevice(previous_);
#endif
}

int cuda_device_count() {
#if defined(RT_WITH_CUDA)
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
#else
  return 0;
#endif
}

bool cuda_usable(std::string* why) {
  const cuda::RuntimeInfo info = cuda::runtime_info();
  if (!info.gpus.empty()) return true;
  if (why) *why = info.error.empty() ? "no GPU visible" : info.error;
  return false;
}

}  // namespace rt::host
