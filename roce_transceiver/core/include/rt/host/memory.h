// Where the data path's memory lives, and one owner for each allocation.
//
// kHost: plain memory (cpu executor). kPinned: page-locked host memory mapped
// into the GPU (a CPU-side far end or NIC and a kernel share it). kDevice:
// GPU memory (a kernel and a GPU far end). Every allocation starts zeroed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace rt::host {

enum class Placement { kHost, kPinned, kDevice };

const char* placement_name(Placement p);

// One allocation. host() is null for kDevice; device() is the address kernels
// use (equal to host() for kPinned under unified addressing, null for kHost).
class Buffer {
 public:
  Buffer() = default;
  Buffer(Placement where, size_t bytes);  // throws std::runtime_error naming the failure
  ~Buffer();
  Buffer(Buffer&& other) noexcept;
  Buffer& operator=(Buffer&& other) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  Placement placement() const { return where_; }
  size_t size() const { return bytes_; }
  uint8_t* host() const { return host_; }
  uint8_t* device() const { return device_; }
  // The address the executor of this placement writes through.
  uint8_t* data() const { return where_ == Placement::kDevice ? device_ : host_; }

  // Copy in or out whatever the placement (cudaMemcpy for device memory).
  void write(size_t offset, const void* src, size_t n);
  void read(size_t offset, void* dst, size_t n) const;

 private:
  void release() noexcept;
  Placement where_ = Placement::kHost;
  size_t bytes_ = 0;
  uint8_t* host_ = nullptr;
  uint8_t* device_ = nullptr;
  int gpu_ = 0;  // pinned and device memory: the CUDA device current at allocation
};

// The calling thread's current CUDA device is `device` while this lives, then the one
// before again (cudaSetDevice; nothing without CUDA). A transceiver on GPU N allocates,
// launches and frees under one: memory, streams and kernels belong to the device current
// when they were made.
class DeviceScope {
 public:
  explicit DeviceScope(int device);
  ~DeviceScope();
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int previous_ = -1;
};

// True when this build has CUDA and the runtime sees a GPU; `why` says why not.
bool cuda_usable(std::string* why);
// GPUs the CUDA runtime sees (0 without CUDA).
int cuda_device_count();

}  // namespace rt::host
