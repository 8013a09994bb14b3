// ICRC of one frame computed by a team (team.h): every lane takes 16-byte
// chunks, the team XORs what they found. Same result as icrc_compute().
//
// The CRC's input (icrc.h) is 8 bytes of ones, then the masked headers from
// the IP header on, up to the ICRC. Two identities make it cut into equal
// chunks that need no per-byte bookkeeping:
// - starting from the all-ones register is starting from zero with the first
//   4 input bytes inverted: the 8 ones become 4 zeros and 4 ones, and leading
//   zeros leave a zero register as it is, so the input is 4 ones + the rest;
// - that input is a multiple of 4 bytes long (IP, UDP, BTH, extension headers
//   and the padded payload all are), so chunks cut from its end, with zeros
//   in front of the first, fall on whole words of the IP-relative layout,
//   which is where the masks are stated (mask_word).
// Chunk j from the end is then shifted by 16 j bytes (crc32_shift16, eight
// table lookups), and the XOR of all chunks is the register.
#pragma once

#include "rt/protocol/crc32_combine.h"
#include "rt/protocol/icrc.h"
#include "rt/team.h"

namespace rt {

// The frame layout the ICRC needs, read once by whoever checks the header.
struct IcrcLayout {
  uint32_t l3;          // IP header offset
  uint32_t l3_len;      // its length
  uint32_t ip_version;  // 4 or 6
  uint32_t masked;      // IP + UDP + BTH bytes: where masks may apply
  uint32_t end;         // where the ICRC field starts
  // masks[i]: what mask_word() gives for IP-relative word i < masked / 4,
  // worked out once per layout; null: worked out per word.
  const uint32_t* masks;
};

// Header words that may carry masks: IPv4 with the longest options, UDP, BTH.
constexpr uint32_t kIcrcMaskWords = (60 + 8 + 12) / 4;

RT_HD inline void icrc_masks_for(const IcrcLayout& l, uint32_t* masks) {
  for (uint32_t i = 0; i < kIcrcMaskWords; ++i)
    masks[i] = 4 * i < l.masked ? icrc_detail::mask_word(4 * i, l.ip_version, l.l3_len) : 0;
}

namespace icrc_team_detail {

// Four little-endian words from p, which may be 2 bytes off a word boundary
// (the IP header follows a 14-byte Ethernet header). The GPU reads the five
// aligned words around them and shifts: a byte at a time costs four loads a word.
RT_HD inline void load_words(const uint8_t* p, uint32_t w[4]) {
#if RT_DEVICE_CODE
  const uint32_t off = uint32_t(reinterpret_cast<uintptr_t>(p) & 3);
  const auto* q = reinterpret_cast<const uint32_t*>(p - off);
  uint32_t a[5];
#pragma unroll
  for (int i = 0; i < 5; ++i) a[i] = i < 4 || off ? q[i] : 0;
#pragma unroll
  for (int i = 0; i < 4; ++i) w[i] = __funnelshift_r(a[i], a[i + 1], 8 * off);
#else
  for (int i = 0; i < 4; ++i) w[i] = load_le32(p + 4 * i);
#endif
}

RT_HD inline uint32_t mask_at(const IcrcLayout& l, uint32_t a) {
  if (a >= l.masked) return 0;
  return l.masks ? l.masks[a / 4] : icrc_detail::mask_word(a, l.ip_version, l.l3_len);
}

// The four input words of the chunk that starts at input byte p (a multiple
// of 4; negative: the zeros in front of the first chunk).
RT_HD inline void chunk_words(const uint8_t* frame, const IcrcLayout& l, int32_t p, uint32_t w[4]) {
  if (p >= 4) {                          // all from the frame
    const uint32_t a = uint32_t(p) - 4;  // from the IP header
    load_words(frame + l.l3 + a, w);
    for (uint32_t i = 0; i < 4; ++i) w[i] |= mask_at(l, a + 4 * i);
    return;
  }
  for (int32_t i = 0; i < 4; ++i) {  // the first chunk: zeros, the ones, then the IP header
    const int32_t q = p + 4 * i;
    if (q < 0) {
      w[i] = 0;
    } else if (q < 4) {
      w[i] = 0xFFFFFFFFu;
    } else {
      const uint32_t a = uint32_t(q) - 4;
      w[i] = load_le32(frame + l.l3 + a) | mask_at(l, a);
    }
  }
}

RT_HD inline uint32_t chunk_step(const Crc32Tables& tb, uint32_t reg, const uint32_t w[4]) {
  return crc32_step8(tb, crc32_step8(tb, reg, w[0], w[1]), w[2], w[3]);
}

// The input's bytes and chunks (the last one may be padded in front).
struct Input {
  int32_t len;
  uint32_t chunks;
};
RT_HD inline Input input_of(const IcrcLayout& l) {
  const int32_t len = int32_t(l.end - l.l3) + 4;
  return Input{len, (uint32_t(len) + kChunkBytes - 1) / kChunkBytes};
}

// A chunk's raw register, started from zero: `nibbles`, 32 lookups that never
// wait on a bank (crc32_chunk16), else slicing-by-8, 16 lookups that may. On the
// H200 the nibbles win once each lane has several chunks (a 4 KiB packet's ICRC
// by a crew of 16 warps: 22 000 -> 15 600 cycles), and lose for one chunk a lane
// (a short request's two ICRCs: 4 480 -> 4 560 cycles, its round trip +0.5 us).
RT_HD inline uint32_t chunk_value(const Crc32Tables& tb, const uint32_t w[4], bool nibbles) {
  return nibbles ? crc32_chunk16(tb, w) : chunk_step(tb, 0, w);
}

// Whether a team's lanes have more than one chunk each of an input of `chunks`.
RT_HD constexpr bool several_rounds(uint64_t chunks) { return chunks > 32; }

// Chunk j's raw register, started from zero (0 past the input).
RT_HD inline uint32_t chunk_register(const Crc32Tables& tb, const uint8_t* frame,
                                     const IcrcLayout& l, const Input& in, uint32_t j,
                                     bool nibbles) {
  if (j >= in.chunks) return 0;
  uint32_t w[4];
  chunk_words(frame, l, in.len - int32_t(kChunkBytes * (j + 1)), w);
  return chunk_value(tb, w, nibbles);
}

}  // namespace icrc_team_detail

// Every lane gets the ICRC of the frame laid out as `l`; the caller makes sure
// (end - l3) is a multiple of 4 (icrc_team_fits()). A warp's lane k takes
// chunks k, k + 32, k + 64...: Horner's rule over its chunks with the 512-byte
// shift, then its own shift of 16 k bytes.
template <class Team>
RT_HD inline uint32_t icrc_team(const Team& t, const uint8_t* frame, const IcrcLayout& l) {
  using namespace icrc_team_detail;
  static_assert(Team::kLanes == 1 || Team::kLanes == 32, "shift tables are for a warp");
  const Crc32Tables& tb = detail::crc32_tables();
  const Input in = input_of(l);
  uint32_t reg = 0;
  if constexpr (Team::kLanes == 1) {
    // One lane: feed the chunks in order, no shifts needed.
    uint32_t w[4];
    for (uint32_t j = in.chunks; j-- > 0;) {
      chunk_words(frame, l, in.len - int32_t(kChunkBytes * (j + 1)), w);
      reg = chunk_step(tb, reg, w);
    }
    return ~reg;
  } else {
    uint32_t m = (in.chunks + 31) / 32 - 1;  // the last round first: no shift for it
    const bool nibbles = several_rounds(in.chunks);
    reg = chunk_register(tb, frame, l, in, t.lane() + 32 * m, nibbles);
    while (m-- > 0)
      reg =
          crc32_shift16(tb, 32, reg) ^ chunk_register(tb, frame, l, in, t.lane() + 32 * m, nibbles);
    return ~t.xor_all(t.lane() ? crc32_shift16(tb, t.lane(), reg) : reg);
  }
}

// Two ICRCs at once (a request's and its reply's): each lane works on both
// frames' chunks together, so the two chains of table lookups overlap.
template <class Team>
RT_HD inline void icrc_team2(const Team& t, const uint8_t* fa, const IcrcLayout& la,
                             const uint8_t* fb, const IcrcLayout& lb, uint32_t* a, uint32_t* b) {
  if constexpr (Team::kLanes == 1) {
    *a = icrc_team(t, fa, la);
    *b = icrc_team(t, fb, lb);
  } else {
    using namespace icrc_team_detail;
    const Crc32Tables& tb = detail::crc32_tables();
    const Input ia = input_of(la), ib = input_of(lb);
    const uint32_t chunks = ia.chunks > ib.chunks ? ia.chunks : ib.chunks;
    uint32_t m = (chunks + 31) / 32 - 1;  // the last round first: no shift for it
    const bool nibbles = several_rounds(chunks);
    uint32_t reg_a = chunk_register(tb, fa, la, ia, t.lane() + 32 * m, nibbles);
    uint32_t reg_b = chunk_register(tb, fb, lb, ib, t.lane() + 32 * m, nibbles);
    while (m-- > 0) {
      const uint32_t j = t.lane() + 32 * m;
      const uint32_t ca = chunk_register(tb, fa, la, ia, j, nibbles);
      const uint32_t cb = chunk_register(tb, fb, lb, ib, j, nibbles);
      reg_a = crc32_shift16(tb, 32, reg_a) ^ ca;
      reg_b = crc32_shift16(tb, 32, reg_b) ^ cb;
    }
    if (t.lane()) {
      reg_a = crc32_shift16(tb, t.lane(), reg_a);
      reg_b = crc32_shift16(tb, t.lane(), reg_b);
    }
    *a = ~t.xor_all(reg_a);
    *b = ~t.xor_all(reg_b);
  }
}

RT_HD inline bool icrc_team_fits(const IcrcLayout& l) {
  return l.end > l.l3 && (l.end - l.l3) % 4 == 0;
}

}  // namespace rt

namespace rt {

// The raw CRC-32 register of n bytes (started from zero, not inverted at the
// end) by a team: the same chunking as icrc_team() without masks. Raw
// registers of consecutive pieces combine by crc32_x8n shifts (a crew's CRC).
template <class Team>
RT_HD inline uint32_t crc32_raw_team(const Team& t, const uint8_t* p, uint64_t n) {
  if constexpr (Team::kLanes == 1) {
    return ~crc32_update_fast(0xFFFFFFFFu, p, size_t(n));
  } else {
    using namespace icrc_team_detail;
    if (n == 0) return 0;
    const Crc32Tables& tb = detail::crc32_tables();
    const uint64_t chunks = (n + kChunkBytes - 1) / kChunkBytes;
    // Chunk j from the end, as four words; past the first byte: zeros.
    const auto load = [&](uint64_t j, uint32_t w[4]) {
      const int64_t start = int64_t(n) - int64_t(kChunkBytes * (j + 1));
      if (j < chunks && start >= 0) {
        load_words(p + start, w);
        return;
      }
      for (int i = 0; i < 4; ++i) {  // the first chunk: zeros in front of the data
        w[i] = 0;
        for (int b = 0; b < 4; ++b) {
          const int64_t at = start + 4 * i + b;
          if (j < chunks && at >= 0) w[i] |= uint32_t(p[at]) << (8 * b);
        }
      }
    };
    // Each lane folds its chunks j = lane + 32 m, m from the top down. The loads of a
    // group go out before any is folded: on a GPU each is a memory round trip, and a
    // frame's page is far from the SM (64 KiB: 128 of them a lane).
    constexpr uint32_t kGroup = 4;
    uint64_t m = (chunks + 31) / 32 - 1;
    uint32_t w[4];
    load(t.lane() + 32 * m, w);
    const bool nibbles = several_rounds(chunks);
    uint32_t reg = chunk_value(tb, w, nibbles);
    while (m > 0) {
      const uint32_t g = m < kGroup ? uint32_t(m) : kGroup;
      uint32_t ws[kGroup][4];
      for (uint32_t k = 0; k < kGroup; ++k)
        if (k < g) load(t.lane() + 32 * (m - 1 - k), ws[k]);
      for (uint32_t k = 0; k < kGroup; ++k)
        if (k < g) reg = crc32_shift16(tb, 32, reg) ^ chunk_value(tb, ws[k], nibbles);
      m -= g;
    }
    return t.xor_all(t.lane() ? crc32_shift16(tb, t.lane(), reg) : reg);
  }
}

// zlib's CRC-32 of n bytes from their raw register: zlib's all-ones start,
// carried over the n bytes, and the final inversion.
RT_HD inline uint32_t crc32_from_raw(uint32_t raw, uint64_t n) {
  return ~(raw ^ crc32_mulmod(crc32_x8n(n), 0xFFFFFFFFu));
}

// zlib's CRC-32 of n bytes by a team (the frames handler's page CRC).
template <class Team>
RT_HD inline uint32_t crc32_team(const Team& t, const uint8_t* p, uint64_t n) {
  if constexpr (Team::kLanes == 1) {
    return crc32_update_fast(0, p, size_t(n));
  } else {
    return crc32_from_raw(crc32_raw_team(t, p, n), n);
  }
}

}  // namespace rt
