// Copying packets with 16-byte accesses. Across PCIe (a kernel and pinned host
// memory) or to device memory, a byte loop becomes one bus transaction per
// byte; 16-byte loads issued together arrive in about one round trip.
#pragma once

#include "rt/platform.h"
#include "rt/team.h"

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

// 16 bytes read from memory again, never from a cache line kept from an
// earlier read (the GPU's L1 is not coherent with the other side's writes).
RT_HD inline Chunk16 load_fresh16(const uint8_t* p) {
#if RT_DEVICE_CODE
  const uint4 v = __ldcv(reinterpret_cast<const uint4*>(p));
  return Chunk16{uint64_t(v.y) << 32 | v.x, uint64_t(v.w) << 32 | v.z};
#else
  const auto* q = reinterpret_cast<const volatile uint64_t*>(p);
  return Chunk16{q[0], q[1]};
#endif
}

// Team-wide copy_wide from memory next to the team (a staging buffer): each
// lane stores its own chunks, all in one bus trip.
template <class Team>
RT_HD inline void copy_wide_team(const Team& t, uint8_t* dst, const uint8_t* src, uint32_t n) {
  for (uint32_t c = t.lane(); c * 16 < n; c += t.size())
    reinterpret_cast<Chunk16*>(dst)[c] = reinterpret_cast<const Chunk16*>(src)[c];
}

}  // namespace rt
