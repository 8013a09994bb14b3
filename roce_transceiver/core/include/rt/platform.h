// Host/device vocabulary shared by every header of the data path.
//
// The protocol, queue and engine code is written once and compiled twice: by
// g++ into the CPU executor and by nvcc into the persistent kernel. RT_HD is
// the only annotation that code needs; it vanishes when nvcc is absent.
#pragma once

#include <cstddef>
#include <cstdint>

#if defined(__CUDACC__)
#define RT_HD __host__ __device__
#define RT_DEVICE __device__
#else
#define RT_HD
#define RT_DEVICE
#endif

// True while compiling the device side of a .cu file. Branch on this only in
// this header and in the few leaf helpers that must differ (tables, clocks).
#if defined(__CUDA_ARCH__)
#define RT_DEVICE_CODE 1
#else
#define RT_DEVICE_CODE 0
#endif

namespace rt {

// A read-only byte range. std::span is C++20 and absent from device code, so
// the data path uses this instead.
struct ByteSpan {
  const uint8_t* data = nullptr;
  size_t size = 0;

  RT_HD constexpr ByteSpan() = default;
  RT_HD constexpr ByteSpan(const uint8_t* d, size_t n) : data(d), size(n) {}
  RT_HD constexpr const uint8_t& operator[](size_t i) const { return data[i]; }
  RT_HD constexpr ByteSpan sub(size_t offset, size_t n) const { return ByteSpan(data + offset, n); }
};

// A writable byte range.
struct MutByteSpan {
  uint8_t* data = nullptr;
  size_t size = 0;

  RT_HD constexpr MutByteSpan() = default;
  RT_HD constexpr MutByteSpan(uint8_t* d, size_t n) : data(d), size(n) {}
  RT_HD constexpr uint8_t& operator[](size_t i) const { return data[i]; }
  RT_HD constexpr operator ByteSpan() const { return ByteSpan(data, size); }
};

}  // namespace rt
