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
// Chunk j from the end is then shifted by 16 j bytes: a product with
// x^(128 j), from the tables, and the XOR of all chunks is the register.
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
};

// The most input a team covers: one chunk per lane of a warp.
constexpr uint32_t kIcrcTeamMaxChunks = 32;

namespace icrc_team_detail {

// Word `p` (byte offset into the input, a multiple of 4, may be negative:
// the zeros in front of the first chunk).
RT_HD inline uint32_t input_word(const uint8_t* frame, const IcrcLayout& l, int32_t p) {
  if (p < 0) return 0;
  if (p < 4) return 0xFFFFFFFFu;
  const uint32_t a = uint32_t(p) - 4;  // from the IP header
  const uint32_t w = load_le32(frame + l.l3 + a);
  return a < l.masked ? w | icrc_detail::mask_word(a, l.ip_version, l.l3_len) : w;
}

// The raw register of chunk j (16 bytes ending 16 j bytes before the input's
// end), started from zero.
RT_HD inline uint32_t chunk_register(const Crc32Tables& tb, const uint8_t* frame,
                                     const IcrcLayout& l, int32_t input_len, uint32_t j) {
  const int32_t p = input_len - int32_t(kChunkBytes * (j + 1));
  const uint32_t c = crc32_step8(tb, 0, input_word(frame, l, p), input_word(frame, l, p + 4));
  return crc32_step8(tb, c, input_word(frame, l, p + 8), input_word(frame, l, p + 12));
}

}  // namespace icrc_team_detail

// Every lane gets the ICRC. The caller makes sure (end - l3) is a multiple of
// 4 and the input fits kIcrcTeamMaxChunks chunks (icrc_team_fits()).
template <class Team>
RT_HD inline uint32_t icrc_team(const Team& t, const uint8_t* frame, const IcrcLayout& l) {
  using namespace icrc_team_detail;
  const Crc32Tables& tb = detail::crc32_tables();
  const int32_t input_len = int32_t(l.end - l.l3) + 4;
  const uint32_t chunks = (uint32_t(input_len) + kChunkBytes - 1) / kChunkBytes;
  uint32_t reg = 0;
  if constexpr (Team::kLanes == 1) {
    // One lane: feed the chunks in order, no shifts needed.
    for (uint32_t j = chunks; j-- > 0;) {
      const int32_t p = input_len - int32_t(kChunkBytes * (j + 1));
      reg = crc32_step8(tb, reg, input_word(frame, l, p), input_word(frame, l, p + 4));
      reg = crc32_step8(tb, reg, input_word(frame, l, p + 8), input_word(frame, l, p + 12));
    }
  } else {
    for (uint32_t j = t.lane(); j < chunks; j += t.size()) {
      const uint32_t c = chunk_register(tb, frame, l, input_len, j);
      reg ^= j ? crc32_mulmod(tb.x128j[j], c) : c;
    }
    reg = t.xor_all(reg);
  }
  return ~reg;
}

RT_HD inline bool icrc_team_fits(const IcrcLayout& l) {
  return l.end > l.l3 && (l.end - l.l3) % 4 == 0 &&
         l.end - l.l3 + 4 <= kIcrcTeamMaxChunks * kChunkBytes;
}

}  // namespace rt
