// Copying packets with 16-byte accesses. Across PCIe (a kernel and pinned host
// memory) or to device memory, a byte loop becomes one bus transaction per
// byte; 16-byte loads issued together arrive in about one round trip.
#pragma once

#include "rt/platform.h"

namespace rt {

struct alignas(16) Chunk16 {
  uint64_t lo, hi;
};

// Copy n bytes rounded up to 16. Both ends must be 16-byte aligned and have
// room for the rounding: ring slots and staging buffers are multiples of 64.
// Loads go out in batches of 8 before any store, so a batch costs one bus
// round trip rather than eight (a store could alias a later load otherwise).
RT_HD inline void copy_wide(uint8_t* dst, const uint8_t* src, uint32_t n) {
  constexpr uint32_t kBatch = 8;
  const uint32_t chunks = (n + 15) / 16;
  auto* d = reinterpret_cast<Chunk16*>(dst);
  const auto* s = reinterpret_cast<const Chunk16*>(src);
  for (uint32_t i = 0; i < chunks; i += kBatch) {
    Chunk16 batch[kBatch];
    const uint32_t k = chunks - i < kBatch ? chunks - i : kBatch;
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
    for (uint32_t j = 0; j < kBatch; ++j)
      if (j < k) batch[j] = s[i + j];
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
    for (uint32_t j = 0; j < kBatch; ++j)
      if (j < k) d[i + j] = batch[j];
  }
}

// Copy n bytes between buffers that do not overlap, at any alignment. When
// both ends share their alignment modulo 4 (a payload moved between two frames
// with the same headers does) the body goes in 4-byte words; the rest byte by
// byte. A plain byte loop costs a dependent load per byte on a GPU thread.
RT_HD inline void copy_bytes(uint8_t* __restrict__ dst, const uint8_t* __restrict__ src,
                             uint32_t n) {
  uint32_t i = 0;
  if (((reinterpret_cast<uintptr_t>(dst) ^ reinterpret_cast<uintptr_t>(src)) & 3) == 0) {
    for (; i < n && (reinterpret_cast<uintptr_t>(dst + i) & 3); ++i) dst[i] = src[i];
    for (; i + 4 <= n; i += 4)
      *reinterpret_cast<uint32_t*>(dst + i) = *reinterpret_cast<const uint32_t*>(src + i);
  }
  for (; i < n; ++i) dst[i] = src[i];
}

// Whether n bytes are equal, on the same terms as copy_bytes.
RT_HD inline bool same_bytes(const uint8_t* a, const uint8_t* b, uint32_t n) {
  uint32_t i = 0;
  if (((reinterpret_cast<uintptr_t>(a) ^ reinterpret_cast<uintptr_t>(b)) & 3) == 0) {
    for (; i < n && (reinterpret_cast<uintptr_t>(a + i) & 3); ++i)
      if (a[i] != b[i]) return false;
    for (; i + 4 <= n; i += 4)
      if (*reinterpret_cast<const uint32_t*>(a + i) != *reinterpret_cast<const uint32_t*>(b + i))
        return false;
  }
  for (; i < n; ++i)
    if (a[i] != b[i]) return false;
  return true;
}

}  // namespace rt
