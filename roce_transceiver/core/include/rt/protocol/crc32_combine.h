// Combining CRC-32s of pieces computed apart (in parallel lanes, say).
//
// CRC-32 is linear over GF(2): feeding n more bytes multiplies the register by
// x^(8n) modulo the polynomial. With that product, CRCs of consecutive pieces
// combine without touching the bytes again. Polynomials are in zlib's
// reflected form: bit 31 is x^0.
#pragma once

#include "rt/protocol/crc32.h"

namespace rt {

// a * b modulo the CRC polynomial.
RT_HD constexpr uint32_t crc32_mulmod(uint32_t a, uint32_t b) {
  uint32_t p = 0;
  for (int i = 0; i < 32; ++i) {
    if (a & (0x80000000u >> i)) p ^= b;
    b = (b & 1) ? (b >> 1) ^ kCrc32Poly : b >> 1;
  }
  return p;
}

struct Crc32Powers {
  uint32_t x2k[32];  // x^(2^k) modulo the polynomial
};

RT_HD constexpr Crc32Powers make_crc32_powers() {
  Crc32Powers pw{};
  pw.x2k[0] = 0x40000000u;  // x^1
  for (int k = 1; k < 32; ++k) pw.x2k[k] = crc32_mulmod(pw.x2k[k - 1], pw.x2k[k - 1]);
  return pw;
}

namespace detail {
#if defined(__CUDACC__)
static __device__ const Crc32Powers kCrc32DevicePowers = make_crc32_powers();
#endif
inline constexpr Crc32Powers kCrc32HostPowers = make_crc32_powers();

RT_HD inline const Crc32Powers& crc32_powers() {
#if RT_DEVICE_CODE
  return kCrc32DevicePowers;
#else
  return kCrc32HostPowers;
#endif
}
}  // namespace detail

// x^(8n) modulo the polynomial: what feeding n zero bytes multiplies by.
RT_HD inline uint32_t crc32_x8n(uint64_t n) {
  const Crc32Powers& pw = detail::crc32_powers();
  uint32_t p = 0x80000000u;  // x^0
  for (int k = 3; n; n >>= 1, ++k)
    if (n & 1) p = crc32_mulmod(pw.x2k[k & 31], p);
  return p;
}

// The raw register c after n zero bytes, crc32_mulmod(crc32_x8n(n), c), by table
// lookups: eight for each 512 bytes and for the 16-byte rest, a slicing step for 8
// of the bytes below 16 and one lookup for each of the others. On one lane of a GPU
// a multiply's 32 dependent steps cost about 900 SM cycles; this, for 4 KiB, about
// 400 (the shifts' lookups of one step go out together).
RT_HD inline uint32_t crc32_zeros(const Crc32Tables& tb, uint32_t c, uint64_t n) {
  for (; n >= 512; n -= 512) c = crc32_shift16(tb, 32, c);
  if (n >= 16) {
    c = crc32_shift16(tb, uint32_t(n / 16), c);
    n %= 16;
  }
  if (n >= 8) {
    c = crc32_step8(tb, c, 0, 0);
    n -= 8;
  }
  for (; n; --n) c = (c >> 8) ^ tb.t[0][c & 0xFF];
  return c;
}

// The raw register c after `n` zero bytes for one n, four lookups: a crew's commit folds
// each packet's CRC into its frame's on one lane, and a stream's packets are one size.
struct Crc32ZerosTable {
  uint64_t n;  // what it is for; ~0: nothing yet
  uint32_t t[4][256];
};

// The table for n: the products of x^(8n) with each register bit (1u << 31 is x^0, each
// bit below one power of x more), then every byte's as the XOR of its bits'.
RT_HD inline void crc32_zeros_table(Crc32ZerosTable& z, uint64_t n) {
  uint32_t basis[32];
  basis[31] = crc32_x8n(n);
  for (int j = 31; j > 0; --j)
    basis[j - 1] = (basis[j] & 1) ? (basis[j] >> 1) ^ kCrc32Poly : basis[j] >> 1;
  for (uint32_t i = 0; i < 4; ++i) {
    z.t[i][0] = 0;
    for (uint32_t b = 1; b < 256; ++b) {
      uint32_t low = 0;  // the lowest bit of b
      while (!(b >> low & 1u)) ++low;
      z.t[i][b] = z.t[i][b & (b - 1)] ^ basis[8 * i + low];
    }
  }
  z.n = n;
}

RT_HD inline uint32_t crc32_zeros_by(const Crc32ZerosTable& z, uint32_t c) {
  return z.t[0][c & 0xFF] ^ z.t[1][(c >> 8) & 0xFF] ^ z.t[2][(c >> 16) & 0xFF] ^ z.t[3][c >> 24];
}

// The raw register c after m * n zero bytes, for any m below 2^kRunShiftLevels: one
// product by x^(8 n 2^k) for each set bit k of m, each eight lookups in nibble tables
// (sixteen words: a lane a bank). A commit folds a run of a stream's packets of n data
// bytes at once, each packet's register shifted over the packets after it.
constexpr uint32_t kRunShiftLevels = 10;
struct Crc32RunShifts {
  uint64_t n;                          // what they are for; ~0: nothing yet
  uint32_t t[kRunShiftLevels][8][16];  // [k][j][v]: (v x^(4j) in the register) x^(8 n 2^k)
};
constexpr uint32_t kRunShiftEntries = kRunShiftLevels * 8 * 16;

// Entry e of the tables for n (a crew builds them an entry a thread; then sets n).
RT_HD inline uint32_t crc32_run_shift_entry(uint64_t n, uint32_t e) {
  const uint32_t k = e / 128, j = (e / 16) % 8, v = e % 16;
  return crc32_mulmod(crc32_x8n(n << k), v << (4 * j));
}

RT_HD inline uint32_t crc32_run_shift(const Crc32RunShifts& s, uint32_t c, uint32_t m) {
  for (uint32_t k = 0; m; ++k, m >>= 1) {
    if (!(m & 1u)) continue;
    const uint32_t(&t)[8][16] = s.t[k];
    c = t[0][c & 15u] ^ t[1][(c >> 4) & 15u] ^ t[2][(c >> 8) & 15u] ^ t[3][(c >> 12) & 15u] ^
        t[4][(c >> 16) & 15u] ^ t[5][(c >> 20) & 15u] ^ t[6][(c >> 24) & 15u] ^ t[7][c >> 28];
  }
  return c;
}

// The register left by raw CRC of `len` bytes, starting from a zero register
// and without zlib's final inversion: what each lane computes for its piece.
RT_HD inline uint32_t crc32_raw(const uint8_t* p, size_t len) {
  return ~crc32_update(0xFFFFFFFFu, p, len);
}

// zlib's crc32_combine: CRC of A||B from crc(A), crc(B) and len(B).
RT_HD inline uint32_t crc32_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b) {
  return crc32_mulmod(crc32_x8n(len_b), crc_a) ^ crc_b;
}

}  // namespace rt
