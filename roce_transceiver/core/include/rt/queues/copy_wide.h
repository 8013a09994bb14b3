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

}  // namespace rt
