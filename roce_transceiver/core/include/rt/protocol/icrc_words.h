// ICRC of a short frame by a warp in one step: a word a lane.
//
// The ICRC's input (icrc_team.h) is a multiple of 4 bytes, so it is a string
// of words, and a CRC register is linear in its input: the register is the XOR
// of each word's contribution, the word followed by the zeros after it. For a
// word at position p from the end that contribution is one of a table per
// position, looked up a nibble at a time (eight lookups, all independent). With
// the position as the table's fastest index, lane p reads bank p: the 32 lanes
// of a warp never wait on one another. One XOR reduction joins them.
//
// So an input of up to 32 words (128 bytes: a request of up to ~84 payload
// bytes over IPv4) costs a warp one load, eight lookups and a reduction,
// against a chain of 16-byte chunk registers and shifts (icrc_team). A short
// request's and its reply's ICRCs together: 4 270 SM cycles by icrc_team2 on
// the H200 (bench ops), 940-1 060 this way inside the engine's kernel (a probe
// of the method in a kernel of its own measured 326: what is left is the loads
// of the frame and the layout around it).
#pragma once

#include "rt/protocol/icrc_team.h"

namespace rt {

// Words of input one pass covers: a warp's lanes.
constexpr uint32_t kIcrcWordPositions = 32;

struct alignas(16) IcrcWordTables {
  // at[k][v][p]: the raw register (started from zero) after a little-endian
  // word whose only non-zero nibble is v at nibble k, then 4 p zero bytes.
  uint32_t at[8][16][kIcrcWordPositions];
};
static_assert(sizeof(IcrcWordTables) % 16 == 0, "copied to shared memory in 16-byte chunks");

RT_HD constexpr IcrcWordTables make_icrc_word_tables(const Crc32Tables& tb) {
  IcrcWordTables w{};
  for (uint32_t k = 0; k < 8; ++k)
    for (uint32_t v = 0; v < 16; ++v) {
      const uint32_t x = v << (4 * k);
      uint32_t c = 0;
      for (int b = 0; b < 4; ++b) c = tb.t[0][(c ^ (x >> (8 * b))) & 0xFF] ^ (c >> 8);
      for (uint32_t p = 0; p < kIcrcWordPositions; ++p) {
        w.at[k][v][p] = c;
        for (int b = 0; b < 4; ++b) c = tb.t[0][c & 0xFF] ^ (c >> 8);
      }
    }
  return w;
}

// Shared memory a kernel that calls icrc_words2() reserves for the tables at
// the start of its dynamic shared memory, its own buffers after them. Dynamic,
// not static: the crews' kernel (which takes the express path for lone frames)
// has no room left under the 48 KiB static limit.
constexpr uint32_t kIcrcWordSmemBytes = uint32_t(sizeof(IcrcWordTables));

namespace detail {
#if defined(__CUDACC__)
// As the CRC tables (crc32.h): a copy per translation unit, read from a
// block's shared copy.
static __device__ const IcrcWordTables kIcrcWordDeviceTables =
    make_icrc_word_tables(make_crc32_tables());
__device__ inline IcrcWordTables& icrc_word_shared_tables() {
  extern __shared__ __align__(16) uint8_t rt_dynamic_smem[];
  return *reinterpret_cast<IcrcWordTables*>(rt_dynamic_smem);
}
#endif
inline constexpr IcrcWordTables kIcrcWordHostTables = make_icrc_word_tables(kCrc32HostTables);

RT_HD inline const IcrcWordTables& icrc_word_tables() {
#if RT_DEVICE_CODE
  return icrc_word_shared_tables();
#else
  return kIcrcWordHostTables;
#endif
}
}  // namespace detail

#if defined(__CUDACC__)
// A kernel that calls icrc_words2() calls this first, with all threads of the
// block (it ends with __syncthreads()); `dynamic` is its dynamic shared memory.
// Returns where the kernel's own part of it starts.
__device__ inline uint8_t* icrc_word_tables_to_shared(uint8_t* dynamic) {
  copy_to_shared(dynamic, &detail::kIcrcWordDeviceTables, sizeof(IcrcWordTables));
  return dynamic + kIcrcWordSmemBytes;
}
#endif

namespace icrc_words_detail {

// The little-endian word at p, which may be 2 bytes off a word boundary (the
// IP header follows a 14-byte Ethernet header): two aligned loads and a shift.
RT_HD inline uint32_t load_word(const uint8_t* p) {
#if RT_DEVICE_CODE
  const uint32_t off = uint32_t(reinterpret_cast<uintptr_t>(p) & 3);
  const auto* q = reinterpret_cast<const uint32_t*>(p - off);
  return off ? __funnelshift_r(q[0], q[1], 8 * off) : q[0];
#else
  return load_le32(p);
#endif
}

// Input word i of a frame laid out as `l`, counted from the start: word 0 is
// the four ones that stand for the LRH's eight, word i >= 1 the frame's 4 bytes
// at 4 (i - 1) from its IP header, masked. From the start, not the end, so that
// a lane's address and mask do not wait on the frame's length.
RT_HD inline uint32_t input_word(const uint8_t* frame, const IcrcLayout& l, uint32_t i) {
  if (i == 0) return 0xFFFFFFFFu;
  const uint32_t a = 4 * (i - 1);
  return load_word(frame + l.l3 + a) | (a < l.masked ? l.masks[a / 4] : 0u);
}

// Input words in all: (end - l3) bytes and the four ones.
RT_HD inline uint32_t input_words(const IcrcLayout& l) { return (l.end - l.l3) / 4 + 1; }

// Lane i's part of a frame's register: its word's contribution from its
// position from the end, n - 1 - i (a lane a table column, still: no conflicts).
template <class Team>
RT_HD inline uint32_t lane_part(const Team& t, const IcrcWordTables& tw, const uint8_t* frame,
                                const IcrcLayout& l);

// Word w's contribution from position p (< kIcrcWordPositions).
RT_HD inline uint32_t contribution(const IcrcWordTables& tw, uint32_t w, uint32_t p) {
  uint32_t r = 0;
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
  for (uint32_t k = 0; k < 8; ++k) r ^= tw.at[k][(w >> (4 * k)) & 15u][p];
  return r;
}

}  // namespace icrc_words_detail

// Whether a frame laid out as `l` is short enough for icrc_words2(), with its
// masks worked out (icrc_masks_for): a lane's mask is one load, not a search.
RT_HD inline bool icrc_words_fit(const IcrcLayout& l) {
  return l.masks && icrc_team_fits(l) && l.end - l.l3 + 4 <= 4 * kIcrcWordPositions;
}

// The ICRCs of two short frames (a request's and its reply's; icrc_words_fit()
// for both), every lane getting both. A team of one computes them in order.
template <class Team>
RT_HD inline void icrc_words2(const Team& t, const uint8_t* fa, const IcrcLayout& la,
                              const uint8_t* fb, const IcrcLayout& lb, uint32_t* a, uint32_t* b) {
  if constexpr (Team::kLanes == 1) {
    *a = icrc_team(t, fa, la);
    *b = icrc_team(t, fb, lb);
  } else {
    using namespace icrc_words_detail;
    static_assert(Team::kLanes == kIcrcWordPositions, "a lane a position");
    const IcrcWordTables& tw = detail::icrc_word_tables();
    const uint32_t pa = lane_part(t, tw, fa, la), pb = lane_part(t, tw, fb, lb);
    *a = ~t.xor_all(pa);
    *b = ~t.xor_all(pb);
  }
}

// One short frame's ICRC (icrc_words_fit()).
template <class Team>
RT_HD inline uint32_t icrc_words(const Team& t, const uint8_t* frame, const IcrcLayout& l) {
  if constexpr (Team::kLanes == 1) {
    return icrc_team(t, frame, l);
  } else {
    return ~t.xor_all(icrc_words_detail::lane_part(t, detail::icrc_word_tables(), frame, l));
  }
}

namespace icrc_words_detail {
template <class Team>
RT_HD inline uint32_t lane_part(const Team& t, const IcrcWordTables& tw, const uint8_t* frame,
                                const IcrcLayout& l) {
  const uint32_t i = t.lane(), n = input_words(l);
  return i < n ? contribution(tw, input_word(frame, l, i), n - 1 - i) : 0;
}
}  // namespace icrc_words_detail

}  // namespace rt
