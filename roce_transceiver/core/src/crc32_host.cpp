// Host CRC-32 with zlib.crc32 semantics: carry-less multiplication where the CPU has it.
//
// Why it is fast: CRC-32 is the remainder of the message polynomial times x^32 modulo P, and
// that remainder is linear. A 128-bit block A = H*x^64 + L contributes the same as
// H*(x^(D+64) mod P) + L*(x^D mod P) XORed into the block that starts D bits after it, and each
// of those products is one PCLMULQDQ. Four independent 128-bit lanes fold 64 bytes per step so
// the multiplier's latency overlaps, then the lanes fold into one, the 128 bits shrink to 64 and a
// Barrett reduction leaves the 32-bit register. The sub-16-byte tail, inputs under 32 bytes and
// CPUs without PCLMULQDQ use the portable slicing-by-8 of crc32.h.
//
// Bit order: zlib's CRC is reflected. Bytes loaded little-endian hold the first message bit in
// bit 0, so a 128-bit register holds rev128(A): the coefficient of x^d sits at bit 127 - d. For
// operands stored reflected, PCLMULQDQ returns the reflected product shifted right by one bit
// (degrees d1 + d2 land at bit 126 - d1 - d2, not 127 - d1 - d2), so every folding constant below
// carries one power of x less than the algebra above asks for.
//
// Only this file is built with PCLMULQDQ and SSE4.1 enabled (per function, via the target
// attribute), so the rest of the core keeps the default x86-64 baseline and the choice is made
// at run time.
#include "rt/protocol/crc32_fast.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define RT_CRC32_PCLMUL 1
#include <immintrin.h>
#else
#define RT_CRC32_PCLMUL 0
#endif

namespace rt {

#if RT_CRC32_PCLMUL
namespace {

// The constants, derived at compile time from kCrc32Poly rather than copied in as hex. "Normal"
// polynomials keep the coefficient of x^k in bit k; "reflected" ones are bit-reversed to the
// width their operand has in the multiplier.

constexpr uint64_t reflect(uint64_t v, int width) {
  uint64_t r = 0;
  for (int i = 0; i < width; ++i)
    if (v & (uint64_t(1) << i)) r |= uint64_t(1) << (width - 1 - i);
  return r;
}

// P in normal form, degree 32: x^32 plus the reflected table polynomial turned back around.
constexpr uint64_t kPolyNormal = (uint64_t(1) << 32) | reflect(kCrc32Poly, 32);
static_assert(kPolyNormal == 0x104C11DB7u, "the IEEE 802.3 polynomial");

// x^e mod P, normal form (degree < 32).
constexpr uint64_t xpow_mod(int e) {
  uint64_t r = 1;
  for (int i = 0; i < e; ++i) {
    r <<= 1;
    if (r & (uint64_t(1) << 32)) r ^= kPolyNormal;
  }
  return r;
}

// floor(x^64 / P), normal form (degree 32), for the Barrett step.
using u128 = unsigned __int128;  // x^64 needs 65 bits

constexpr uint64_t barrett_mu() {
  u128 rem = u128(1) << 64;
  uint64_t q = 0;
  for (int i = 64; i >= 32; --i) {
    if (rem & (u128(1) << i)) {
      rem ^= u128(kPolyNormal) << (i - 32);
      q |= uint64_t(1) << (i - 32);
    }
  }
  return q;
}

// Multiplier for a 64-bit reflected half whose lowest degree is `shift` bits into the future:
// x^(shift - 1) mod P (one less for the multiplier's one-bit offset), reflected to 64 bits so its
// degree-31 term lands at bit 32.
constexpr uint64_t fold_const(int shift) { return reflect(xpow_mod(shift - 1), 64); }

// Folding a 128-bit block forward by D bits: the low qword holds H (degrees 64..127 of the block),
// the high qword holds L (degrees 0..63).
struct FoldPair {
  uint64_t lo;  // multiplies H: x^(D + 64)
  uint64_t hi;  // multiplies L: x^D
};
constexpr FoldPair fold_pair(int d) { return {fold_const(d + 64), fold_const(d)}; }

constexpr FoldPair kFold512 = fold_pair(512);  // one lane over the other three: 4 x 128 bits
constexpr FoldPair kFold384 = fold_pair(384);  // lane 0 onto lane 3 at the end
constexpr FoldPair kFold256 = fold_pair(256);  // lane 1 onto lane 3
constexpr FoldPair kFold128 = fold_pair(128);  // lane 2 onto lane 3; single-lane tail blocks

// 128 -> 96 bits: H*x^96 (the degree-32 shift of the final x^32 included) ...
constexpr uint64_t kReduce96 = fold_const(96);
// ... then 96 -> 64 bits: the top 32 bits times x^64.
constexpr uint64_t kReduce64 = fold_const(64);
// Barrett: both 33-bit operands reflected to 33 bits so products land as rev64 of the result.
constexpr uint64_t kBarrettMu = reflect(barrett_mu(), 33);
constexpr uint64_t kBarrettP = reflect(kPolyNormal, 33);
static_assert(kBarrettP == ((uint64_t(kCrc32Poly) << 1) | 1), "P reflected to 33 bits");
static_assert(barrett_mu() >> 32 == 1, "mu has degree 32");

#define RT_PCLMUL_TARGET __attribute__((target("pclmul,sse4.1")))

RT_PCLMUL_TARGET inline __m128i load128(const uint8_t* p) {
  return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
}

// x folded forward by the pair's distance and XORed onto `onto`.
RT_PCLMUL_TARGET inline __m128i fold(__m128i x, __m128i k, __m128i onto) {
  const __m128i a = _mm_clmulepi64_si128(x, k, 0x00);  // H * k.lo
  const __m128i b = _mm_clmulepi64_si128(x, k, 0x11);  // L * k.hi
  return _mm_xor_si128(_mm_xor_si128(a, b), onto);
}

RT_PCLMUL_TARGET inline __m128i pair(const FoldPair& f) {
  return _mm_set_epi64x(static_cast<long long>(f.hi), static_cast<long long>(f.lo));
}

// The zlib register (reflected, not inverted) after the message whose last 16 bytes left
// rev128(A) in x: rev32(A * x^32 mod P).
RT_PCLMUL_TARGET inline uint32_t reduce128(__m128i x) {
  const __m128i k =
      _mm_set_epi64x(static_cast<long long>(kReduce64), static_cast<long long>(kReduce96));
  // S = H*x^96 + L*x^32, degree < 96: L*x^32 is L moved 32 bit positions down.
  const __m128i h = _mm_clmulepi64_si128(x, k, 0x00);
  const __m128i l = _mm_slli_si128(_mm_srli_si128(x, 8), 4);
  const __m128i s = _mm_xor_si128(h, l);
  // S' = S_hi*x^64 + S_lo, degree < 64; rev64(S') ends up in the high qword.
  const __m128i t = _mm_clmulepi64_si128(s, k, 0x10);  // s.lo (= rev64(S_hi)) * k.hi
  const uint64_t w = static_cast<uint64_t>(_mm_extract_epi64(_mm_xor_si128(s, t), 1));
  // Barrett on S' (degree < 64): q = floor(floor(S'/x^32) * mu / x^32), result = (S' - q*P) mod
  // x^32. floor(S'/x^32) is the low 32 bits of w, reflected; q comes back in the low 32 bits.
  const __m128i b =
      _mm_set_epi64x(static_cast<long long>(kBarrettP), static_cast<long long>(kBarrettMu));
  const __m128i a = _mm_cvtsi32_si128(static_cast<int>(static_cast<uint32_t>(w)));
  const __m128i qm = _mm_clmulepi64_si128(a, b, 0x00);
  const __m128i q = _mm_and_si128(qm, _mm_cvtsi32_si128(-1));
  const __m128i qp = _mm_clmulepi64_si128(q, b, 0x10);
  const uint64_t r = w ^ static_cast<uint64_t>(_mm_cvtsi128_si64(qp));
  return static_cast<uint32_t>(r >> 32);
}

// Four lanes of 64 bytes, then one: n >= 64. Returns the one lane, n and p advanced past it.
RT_PCLMUL_TARGET inline __m128i fold_lanes(__m128i x0, const uint8_t*& p, size_t& n) {
  __m128i x1 = load128(p + 16);
  __m128i x2 = load128(p + 32);
  __m128i x3 = load128(p + 48);
  p += 64;
  n -= 64;
  const __m128i k512 = pair(kFold512);
  while (n >= 64) {
    x0 = fold(x0, k512, load128(p));
    x1 = fold(x1, k512, load128(p + 16));
    x2 = fold(x2, k512, load128(p + 32));
    x3 = fold(x3, k512, load128(p + 48));
    p += 64;
    n -= 64;
  }
  // Independent folds onto lane 3 rather than a chain of three: shorter critical path.
  __m128i x = fold(x0, pair(kFold384), x3);
  x = _mm_xor_si128(x, fold(x1, pair(kFold256), _mm_setzero_si128()));
  return fold(x2, pair(kFold128), x);
}

// n >= 16 (one full block).
RT_PCLMUL_TARGET uint32_t crc32_pclmul(uint32_t crc, const uint8_t* p, size_t n) {
  // zlib starts from ~crc; XORing the register into the first four message bytes is the same.
  __m128i x = _mm_xor_si128(load128(p), _mm_cvtsi32_si128(static_cast<int>(~crc)));
  if (n >= 64) {
    x = fold_lanes(x, p, n);
  } else {
    p += 16;
    n -= 16;
  }
  const __m128i k128 = pair(kFold128);
  while (n >= 16) {
    x = fold(x, k128, load128(p));
    p += 16;
    n -= 16;
  }
  const uint32_t reg = reduce128(x);
  return crc32_update(~reg, p, n);  // crc32_update takes and returns the inverted register
}

// Asked once; the answer cannot change while the process runs.
bool cpu_has_pclmul() {
  static const bool has = [] {
    __builtin_cpu_init();  // we may run before libgcc's constructor has filled the CPU model
    return __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
  }();
  return has;
}

// From here on the fold and the reduction beat slicing-by-8 in both throughput and latency
// (measured on a Xeon with 1-per-cycle PCLMULQDQ, about 2x at 48 bytes); below it is a wash.
// 48 bytes is the masked ICRC prefix of an IPv4 frame.
constexpr size_t kPclmulMinBytes = 32;

}  // namespace

uint32_t crc32_update_host(uint32_t crc, const uint8_t* p, size_t n) {
  if (n >= kPclmulMinBytes && cpu_has_pclmul()) return crc32_pclmul(crc, p, n);
  return crc32_update(crc, p, n);
}

const char* crc32_host_impl() { return cpu_has_pclmul() ? "pclmul" : "slice8"; }

#else  // not x86-64 with GNU C: the portable path only

uint32_t crc32_update_host(uint32_t crc, const uint8_t* p, size_t n) {
  return crc32_update(crc, p, n);
}

const char* crc32_host_impl() { return "slice8"; }

#endif

}  // namespace rt
