// CRC-32 (IEEE 802.3, reflected polynomial 0xEDB88320), as zlib.crc32 computes it.
//
// crc32_update(crc, p, n) continues a CRC the way zlib.crc32(data, crc) does:
// start from 0, feed pieces in order. This portable version (slicing-by-8) runs
// on host and device; icrc.h picks faster paths where the target has them.
#pragma once

#include "rt/protocol/byte_order.h"

namespace rt {

constexpr uint32_t kCrc32Poly = 0xEDB88320u;  // x^32 + x^26 + ... + 1, bit-reversed

struct alignas(16) Crc32Tables {
  uint32_t t[8][256];  // t[k][b]: CRC of byte b followed by k zero bytes
  // shift16[j][k][n]: the register (n << 4k) after 16 j zero bytes. Feeding
  // zero bytes is linear in the register, so a register's shift is the XOR
  // of its eight nibbles' entries: eight lookups instead of 16 j table steps.
  // j = 32: 512 bytes, a warp's stride.
  uint32_t shift16[33][8][16];
  // chunk16[n][v]: the raw register (started from zero) after a 16-byte chunk whose
  // only non-zero nibble is v at nibble n (byte n / 2, the high half when n is odd).
  // A chunk is linear in its nibbles, so its register is the XOR of 32 lookups; each
  // table is 16 words, one a bank, so a warp's 32 lanes never wait on one another
  // (an 8-bit table's 256 words do: several lanes a bank).
  uint32_t chunk16[32][16];
};
static_assert(sizeof(Crc32Tables) % 16 == 0, "copied to shared memory in 16-byte chunks");

RT_HD constexpr Crc32Tables make_crc32_tables() {
  Crc32Tables tables{};
  for (uint32_t b = 0; b < 256; ++b) {
    uint32_t c = b;
    for (int i = 0; i < 8; ++i) c = (c & 1) ? (c >> 1) ^ kCrc32Poly : c >> 1;
    tables.t[0][b] = c;
  }
  for (uint32_t b = 0; b < 256; ++b)
    for (int k = 1; k < 8; ++k)
      tables.t[k][b] = (tables.t[k - 1][b] >> 8) ^ tables.t[0][tables.t[k - 1][b] & 0xFF];
  for (uint32_t k = 0; k < 8; ++k)
    for (uint32_t n = 0; n < 16; ++n) {
      uint32_t x = n << (4 * k);
      for (int j = 0; j < 33; ++j) {
        tables.shift16[j][k][n] = x;
        for (int i = 0; i < 16; ++i) x = tables.t[0][x & 0xFF] ^ (x >> 8);
      }
    }
  for (uint32_t n = 0; n < 32; ++n)
    for (uint32_t v = 0; v < 16; ++v) {
      uint32_t c = 0;
      for (uint32_t i = 0; i < 16; ++i) {
        const uint32_t byte = i == n / 2 ? v << (4 * (n % 2)) : 0;
        c = tables.t[0][(c ^ byte) & 0xFF] ^ (c >> 8);
      }
      tables.chunk16[n][v] = c;
    }
  return tables;
}

namespace detail {
#if defined(__CUDACC__)
// One copy per translation unit (static): device code cannot see host globals,
// and the persistent kernel lives in a single translation unit anyway.
static __device__ const Crc32Tables kCrc32DeviceTables = make_crc32_tables();
// What device code reads: a block's own copy in shared memory, filled by
// crc32_tables_to_shared(). On an H200 a CRC of 80 bytes costs 1228 SM cycles
// with the tables here against 4216 with them in global memory (bench ops).
static __shared__ Crc32Tables g_crc32_shared_tables;
#endif
inline constexpr Crc32Tables kCrc32HostTables = make_crc32_tables();

RT_HD inline const Crc32Tables& crc32_tables() {
#if RT_DEVICE_CODE
  return g_crc32_shared_tables;
#else
  return kCrc32HostTables;
#endif
}
}  // namespace detail

#if defined(__CUDACC__)
// Copy `bytes` (a multiple of 16) of tables from global to shared memory, with
// all threads of the block; ends with __syncthreads(). 16-byte loads, eight in
// flight per thread before their stores: tens of KiB cost a few L2 round trips,
// not one per word (a 4-byte loop took 32 us of every launch of a one-warp
// kernel on the H200, which the cuda executor's epochs pay each time).
__device__ inline void copy_to_shared(void* shared, const void* global, uint32_t bytes) {
  constexpr uint32_t kInFlight = 8;
  const uint32_t chunks = bytes / 16;
  const auto* src = static_cast<const uint4*>(global);
  auto* dst = static_cast<uint4*>(shared);
  for (uint32_t base = threadIdx.x; base < chunks; base += kInFlight * blockDim.x) {
    uint4 v[kInFlight];
#pragma unroll
    for (uint32_t k = 0; k < kInFlight; ++k)
      if (base + k * blockDim.x < chunks) v[k] = src[base + k * blockDim.x];
#pragma unroll
    for (uint32_t k = 0; k < kInFlight; ++k)
      if (base + k * blockDim.x < chunks) dst[base + k * blockDim.x] = v[k];
  }
  __syncthreads();
}

// Every kernel that computes a CRC calls this first, with all threads of the block.
__device__ inline void crc32_tables_to_shared() {
  copy_to_shared(&detail::g_crc32_shared_tables, &detail::kCrc32DeviceTables, sizeof(Crc32Tables));
}
#endif

// Eight bytes (lo = bytes 0..3, hi = 4..7, little-endian) into the raw
// (not inverted) register c: slicing-by-8.
RT_HD inline uint32_t crc32_step8(const Crc32Tables& tb, uint32_t c, uint32_t lo, uint32_t hi) {
  lo ^= c;
  return tb.t[7][lo & 0xFF] ^ tb.t[6][(lo >> 8) & 0xFF] ^ tb.t[5][(lo >> 16) & 0xFF] ^
         tb.t[4][lo >> 24] ^ tb.t[3][hi & 0xFF] ^ tb.t[2][(hi >> 8) & 0xFF] ^
         tb.t[1][(hi >> 16) & 0xFF] ^ tb.t[0][hi >> 24];
}

// The raw register of a 16-byte chunk (four little-endian words), started from zero.
RT_HD inline uint32_t crc32_chunk16(const Crc32Tables& tb, const uint32_t w[4]) {
  uint32_t r = 0;
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
  for (uint32_t n = 0; n < 32; ++n) r ^= tb.chunk16[n][(w[n / 8] >> (4 * (n % 8))) & 15u];
  return r;
}

// The raw register c after 16 j zero bytes (j <= 32).
RT_HD inline uint32_t crc32_shift16(const Crc32Tables& tb, uint32_t j, uint32_t c) {
  uint32_t r = 0;
  for (uint32_t k = 0; k < 8; ++k) r ^= tb.shift16[j][k][(c >> (4 * k)) & 15];
  return r;
}

// crc32_update with the caller's copy of the tables (a kernel may keep one in
// shared memory).
RT_HD inline uint32_t crc32_update_with(const Crc32Tables& tb, uint32_t crc, const uint8_t* p,
                                        size_t n) {
  uint32_t c = ~crc;
  while (n >= 8) {
    c = crc32_step8(tb, c, load_le32(p), load_le32(p + 4));
    p += 8;
    n -= 8;
  }
  while (n--) c = tb.t[0][(c ^ *p++) & 0xFF] ^ (c >> 8);
  return ~c;
}

// zlib-compatible: crc32_update(0, p, n) == zlib.crc32(bytes(p[:n])).
RT_HD inline uint32_t crc32_update(uint32_t crc, const uint8_t* p, size_t n) {
  return crc32_update_with(detail::crc32_tables(), crc, p, n);
}

}  // namespace rt
