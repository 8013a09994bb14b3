// Byte-buffer copies, zeroing and comparison at any alignment, for host and
// device. A plain byte loop costs one dependent load per byte on a GPU thread;
// these move the aligned middle in 4-byte words.
#pragma once

#include "rt/platform.h"

namespace rt {

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

// Zero n bytes at any alignment, the aligned body in 4-byte words.
RT_HD inline void zero_bytes(uint8_t* dst, uint32_t n) {
  uint32_t i = 0;
  for (; i < n && (reinterpret_cast<uintptr_t>(dst + i) & 3); ++i) dst[i] = 0;
  for (; i + 4 <= n; i += 4) *reinterpret_cast<uint32_t*>(dst + i) = 0;
  for (; i < n; ++i) dst[i] = 0;
}

// Whether n bytes are equal, on the same terms as copy_bytes.
RT_HD inline bool same_bytes(const uint8_t* a, const uint8_t* b, uint32_t n) {
  uint32_t i = 0;
  if (((reinterpret_cast<uintptr_t>(a) ^ reinterpret_cast<uintptr_t>(b)) & 3) == 0) {
    for (; i < n && (reinterpret_cast<uintptr_t>(a + i) & 3); ++i)
      if (a[i] != b[i]) return false;
    // The differences ORed, not a branch a word: the loads go out together (a GPU
    // thread's compare of a frame is then a few memory trips, not one a word).
    uint32_t diff = 0;
    for (; i + 4 <= n; i += 4)
      diff |= *reinterpret_cast<const uint32_t*>(a + i) ^ *reinterpret_cast<const uint32_t*>(b + i);
    if (diff) return false;
  }
  for (; i < n; ++i)
    if (a[i] != b[i]) return false;
  return true;
}

}  // namespace rt
