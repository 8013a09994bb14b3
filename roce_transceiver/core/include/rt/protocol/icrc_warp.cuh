// ICRC of one frame computed by a whole warp (device only).
//
// Each lane takes a contiguous slice of the bytes after the BTH, computes a
// raw CRC of it and shifts it by the bytes that follow (crc32_combine.h); the
// XOR of the 32 shifted registers plus the shifted masked prefix is the CRC.
// Worth it from a few hundred bytes on; below that one thread is as fast.
#pragma once

#include "rt/protocol/crc32_combine.h"
#include "rt/protocol/icrc.h"

namespace rt {

// Call with all 32 lanes of a warp converged; every lane gets the result.
__device__ inline uint32_t icrc_compute_warp(const FrameView& f, uint32_t lane) {
  uint8_t prefix[kIcrcPrefixMax];
  const uint32_t n_prefix = icrc_masked_prefix(f, prefix);
  const uint32_t body_off = f.bth + uint32_t(sizeof(Bth));
  const uint32_t body_len = f.icrc - body_off;

  // Slices of 8-byte multiples keep each lane on the slicing-by-8 fast path.
  const uint32_t slice = ((body_len + 31) / 32 + 7) & ~7u;
  const uint32_t begin = min(lane * slice, body_len);
  const uint32_t end = min(begin + slice, body_len);
  uint32_t reg =
      crc32_mulmod(crc32_x8n(body_len - end), crc32_raw(f.base + body_off + begin, end - begin));
  for (int step = 16; step >= 1; step >>= 1) reg ^= __shfl_xor_sync(0xFFFFFFFFu, reg, step);

  // The prefix starts from zlib's all-ones register; every lane computes it
  // (no divergence), then it is shifted past the body.
  const uint32_t prefix_reg = ~crc32_update(0, prefix, n_prefix);
  return ~(crc32_mulmod(crc32_x8n(body_len), prefix_reg) ^ reg);
}

}  // namespace rt
