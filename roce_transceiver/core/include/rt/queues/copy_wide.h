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

// 16 bytes from any address of memory next to the team (a staging buffer in
// shared memory): on a GPU five aligned 4-byte loads and funnel shifts, since
// a misaligned 16-byte load is not allowed. May read up to 3 bytes past the 16,
// in the same buffer (a staged frame's payload is followed by its ICRC).
RT_HD inline Chunk16 load_unaligned16(const uint8_t* p) {
#if RT_DEVICE_CODE
  const uint32_t* w =
      reinterpret_cast<const uint32_t*>(reinterpret_cast<uintptr_t>(p) & ~uintptr_t(3));
  const uint32_t shift = uint32_t(reinterpret_cast<uintptr_t>(p) & 3u) * 8u;
  uint32_t x[5];
#pragma unroll
  for (int i = 0; i < 5; ++i) x[i] = w[i];
  uint32_t r[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) r[i] = __funnelshift_r(x[i], x[i + 1], shift);
  return Chunk16{uint64_t(r[1]) << 32 | r[0], uint64_t(r[3]) << 32 | r[2]};
#else
  Chunk16 c;
  __builtin_memcpy(&c, p, sizeof c);
  return c;
#endif
}

// Team-wide copy of n bytes at any alignment from memory next to the team (a
// staged frame) to anywhere (a region, a page): each lane stores whole 16-byte
// chunks of the destination, so a 4 KiB packet is 8 stores a lane, not 4096
// stores on one thread. Ends with the team synchronised.
template <class Team>
RT_HD inline void copy_bytes_team(const Team& t, uint8_t* dst, const uint8_t* src, uint32_t n) {
  const uint32_t head_room = uint32_t(-reinterpret_cast<uintptr_t>(dst) & 15u);
  const uint32_t head = head_room < n ? head_room : n;
  const uint32_t chunks = (n - head) / 16;
  const uint32_t body = head + chunks * 16;
  for (uint32_t i = t.lane(); i < head; i += t.size()) dst[i] = src[i];
  for (uint32_t c = t.lane(); c < chunks; c += t.size())
    reinterpret_cast<Chunk16*>(dst + head)[c] = load_unaligned16(src + head + c * 16);
  for (uint32_t i = body + t.lane(); i < n; i += t.size()) dst[i] = src[i];
  t.sync();
}

}  // namespace rt
