// A short frame held in registers, a word a lane: how the express path builds
// a reply and an ACK without a round trip to memory between its pieces.
//
// The words of a frame of up to 128 bytes are spread over the team: word j
// (bytes 4j to 4j + 3, little-endian) is held by lane j % kLanes, in its slot
// j / kLanes (a warp: one word a lane; one CPU thread: all 32). Fields are
// patched in place by the lane that holds them, the ICRC is computed from the
// registers (each lane's input word put together from two neighbours' words by
// a shuffle, its contribution looked up as icrc_words.h has it, one XOR
// reduction) and the frame leaves in one store a lane. Against building the
// frame in shared memory, that takes out a sync and a reload between each
// pair of pieces: the template's copy, the header's patch, the ICRC's loads,
// its store and the copy to the slot.
#pragma once

#include "rt/protocol/icrc_words.h"
#include "rt/team.h"

namespace rt {

constexpr uint32_t kWordFrameWords = 32;
constexpr uint32_t kWordFrameBytes = 4 * kWordFrameWords;

namespace word_frame_detail {

// The low `n` bytes of a word (n clamped to 0..4).
RT_HD inline uint32_t low_bytes(int32_t n) {
  return n <= 0 ? 0u : n >= 4 ? ~0u : (1u << (8 * uint32_t(n))) - 1u;
}

RT_HD inline uint32_t load32(const uint8_t* p) { return *reinterpret_cast<const uint32_t*>(p); }

// Bits sh/8 bytes into the pair (lo, hi): the 4 bytes that start there.
RT_HD inline uint32_t funnel(uint32_t lo, uint32_t hi, uint32_t sh) {
#if RT_DEVICE_CODE
  return __funnelshift_r(lo, hi, sh);
#else
  return sh ? (lo >> sh) | (hi << (32 - sh)) : lo;
#endif
}

RT_HD inline uint32_t byte_swap(uint32_t v) {
#if RT_DEVICE_CODE
  return __byte_perm(v, 0, 0x0123);
#else
  return __builtin_bswap32(v);
#endif
}

}  // namespace word_frame_detail

template <class Team>
struct WordFrame {
  static constexpr uint32_t kPer = kWordFrameWords / Team::kLanes;
  static_assert(kPer * Team::kLanes == kWordFrameWords, "the words spread evenly");
  uint32_t w[kPer];

  // The frame: `head` bytes of `tmpl` (16-byte aligned, readable to its next
  // word), then the bytes of `body` from `head` to `end` (a buffer laid out as
  // the frame, 4-byte aligned; null: none), then zeroes to the 128th byte.
  // Every lane reads only its own words.
  RT_HD void load(const Team& t, const uint8_t* tmpl, uint32_t head, const uint8_t* body,
                  uint32_t end) {
    using namespace word_frame_detail;
    for (uint32_t k = 0; k < kPer; ++k) {
      const uint32_t a = 4 * (t.lane() + k * Team::kLanes);
      const uint32_t mt = low_bytes(int32_t(head) - int32_t(a));
      const uint32_t mb = body ? low_bytes(int32_t(end) - int32_t(a)) & ~mt : 0u;
      w[k] = (mt ? load32(tmpl + a) & mt : 0u) | (mb ? load32(body + a) & mb : 0u);
    }
  }

  // `bytes` (little-endian: its low byte first) ORed into the frame at `pos`, `n` of
  // them (1 to 4, within the first 128 bytes): the frame's bytes there must be zero
  // (a template leaves its patched fields zero). Every lane ORs in what falls in its
  // words: a shift and an OR, no chain of byte inserts.
  RT_HD void put(const Team& t, uint32_t pos, uint32_t bytes, uint32_t n) {
    if constexpr (Team::kLanes == 1) {
      const uint32_t j = pos >> 2, sh = 8 * (pos & 3);
      w[j] |= bytes << sh;
      if (sh && (pos & 3) + n > 4) w[j + 1] |= bytes >> (32 - sh);
    } else {
      for (uint32_t k = 0; k < kPer; ++k) {
        const int32_t d = int32_t(pos) - int32_t(4 * (t.lane() + k * Team::kLanes));
        if (d >= 0 && d < 4) w[k] |= bytes << (8 * d);
        if (d < 0 && d > -int32_t(n)) w[k] |= bytes >> (-8 * d);
      }
    }
  }
  // A big-endian field of `n` bytes (a length, a PSN): `v`'s low n bytes, high first.
  RT_HD void put_be(const Team& t, uint32_t pos, uint32_t v, uint32_t n) {
    put(t, pos, word_frame_detail::byte_swap(v) >> (8 * (4 - n)), n);
  }

  // Word j (< 32), for every lane: every lane calls it (a shuffle on a warp).
  RT_HD uint32_t word(const Team& t, uint32_t j) const {
    if constexpr (Team::kLanes == 1) {
      return w[j];
    } else {
      return t.from_lane(w[j / Team::kLanes], j % Team::kLanes);
    }
  }

  // This lane's part of the ICRC register of the frame laid out as `l` (its
  // end at most 124: icrc_words_fit), as icrc_words.h's lane_part has it but
  // from the registers. Every lane calls it; ~xor_all of the parts is the ICRC.
  RT_HD uint32_t icrc_part(const Team& t, const IcrcLayout& l) const {
    using namespace word_frame_detail;
    using icrc_words_detail::contribution;
    const IcrcWordTables& tw = detail::icrc_word_tables();
    const uint32_t n = (l.end - l.l3) / 4 + 1;
    const uint32_t sh = 8 * (l.l3 & 3);
    uint32_t part = 0;
    for (uint32_t k = 0; k < kPer; ++k) {
      const uint32_t i = t.lane() + k * Team::kLanes;  // input word i: frame bytes from l3
      const uint32_t a = i ? 4 * (i - 1) : 0;
      const uint32_t q = (l.l3 + a) >> 2;
      const uint32_t lo = word(t, q < kWordFrameWords ? q : kWordFrameWords - 1);
      const uint32_t hi = word(t, q + 1 < kWordFrameWords ? q + 1 : kWordFrameWords - 1);
      const uint32_t in = i ? funnel(lo, hi, sh) | (a < l.masked ? l.masks[a / 4] : 0u) : ~0u;
      if (i < n) part ^= contribution(tw, in, n - 1 - i);
    }
    return part;
  }

  // The first `len` bytes (rounded up to a word) to `dst` (4-byte aligned), a store a lane.
  RT_HD void store(const Team& t, uint8_t* dst, uint32_t len) const {
    for (uint32_t k = 0; k < kPer; ++k) {
      const uint32_t j = t.lane() + k * Team::kLanes;
      if (4 * j < len) reinterpret_cast<uint32_t*>(dst)[j] = w[k];
    }
  }
};

}  // namespace rt
