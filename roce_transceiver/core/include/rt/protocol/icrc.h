// Invariant CRC of RoCEv2 (IBA annex A17.7.1).
//
// CRC-32 over: 8 bytes of 0xFF (standing in for the InfiniBand LRH), the IP
// header with the fields routers may change set to ones (IPv4: TOS, TTL,
// header checksum; IPv6: traffic class, flow label, hop limit), the UDP header
// with its checksum set to ones, the BTH with byte 4 (FECN, BECN, reserved)
// set to ones, then everything up to the ICRC. Sent least-significant byte
// first. IP identification, total length and flags are covered as they are.
#pragma once

#include "rt/protocol/crc32.h"
#include "rt/protocol/crc32_fast.h"
#include "rt/protocol/decode.h"

namespace rt {

// The masked prefix is at most 8 + 60 (IPv4 with options) + 8 + 12 bytes.
constexpr uint32_t kIcrcPrefixMax = 8 + 60 + sizeof(UdpHdr) + sizeof(Bth);

namespace icrc_detail {

// The raw CRC register after the 8 bytes of ones that open the ICRC's input.
RT_HD constexpr uint32_t register_after_lrh() {
  uint32_t c = 0xFFFFFFFFu;
  for (int byte = 0; byte < 8; ++byte) {
    c ^= 0xFFu;
    for (int bit = 0; bit < 8; ++bit) c = (c & 1) ? (c >> 1) ^ kCrc32Poly : c >> 1;
  }
  return c;
}
constexpr uint32_t kRegisterAfterLrh = register_after_lrh();

// The ones OR-ed into header bytes [at, at + 4) (counted from the IP header,
// little-endian) to mask the fields routers may change. The one statement of
// which bytes the ICRC masks: the copy and both CRC paths below use it.
RT_HD inline uint32_t mask_word(uint32_t at, uint32_t ip_version, uint32_t l3_len) {
  uint32_t m = 0;
  const auto put = [&](uint32_t pos, uint32_t ones) {
    if (pos - at < 4) m |= ones << (8 * (pos - at));  // unsigned: false for pos < at
  };
  if (ip_version == 4) {
    put(1, 0xFF);   // TOS
    put(8, 0xFF);   // TTL
    put(10, 0xFF);  // header checksum
    put(11, 0xFF);
  } else {
    put(0, 0x0F);  // traffic class, high nibble
    put(1, 0xFF);  // traffic class low nibble + flow label
    put(2, 0xFF);
    put(3, 0xFF);
    put(7, 0xFF);  // hop limit
  }
  put(l3_len + 6, 0xFF);  // UDP checksum
  put(l3_len + 7, 0xFF);
  put(l3_len + uint32_t(sizeof(UdpHdr) + kBthFecnByte), 0xFF);
  return m;
}

// One little-endian word into the raw register c, a byte at a time (the
// header's last word when its length is not a multiple of 8).
RT_HD inline uint32_t crc_word(const Crc32Tables& tb, uint32_t c, uint32_t w) {
  for (int b = 0; b < 4; ++b) c = tb.t[0][(c ^ (w >> (8 * b))) & 0xFF] ^ (c >> 8);
  return c;
}

// The n masked header bytes at h (IP, UDP, BTH; n is a multiple of 4) fed to
// the raw register c, eight at a time with the masks OR-ed in.
RT_HD inline uint32_t crc_masked_header(const Crc32Tables& tb, uint32_t c, const uint8_t* h,
                                        uint32_t n, uint32_t v, uint32_t l3) {
  uint32_t i = 0;
  for (; i + 8 <= n; i += 8)
    c = crc32_step8(tb, c, load_le32(h + i) | mask_word(i, v, l3),
                    load_le32(h + i + 4) | mask_word(i + 4, v, l3));
  return i < n ? crc_word(tb, c, load_le32(h + i) | mask_word(i, v, l3)) : c;
}

// The same for a layout fixed at compile time (IPv4 without options, IPv6):
// unrolled, the masks fold to constants.
template <uint32_t kVersion, uint32_t kL3Len>
RT_HD inline uint32_t crc_masked_header_fixed(const Crc32Tables& tb, uint32_t c, const uint8_t* h) {
  constexpr uint32_t n = kL3Len + uint32_t(sizeof(UdpHdr) + sizeof(Bth));
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
  for (uint32_t i = 0; i + 8 <= n; i += 8)
    c = crc32_step8(tb, c, load_le32(h + i) | mask_word(i, kVersion, kL3Len),
                    load_le32(h + i + 4) | mask_word(i + 4, kVersion, kL3Len));
  return n % 8 ? crc_word(tb, c, load_le32(h + n - 4) | mask_word(n - 4, kVersion, kL3Len)) : c;
}

}  // namespace icrc_detail

// Copy 0xFF x 8 | IP | UDP | BTH into `out` with the variant fields masked.
// Returns the number of bytes written.
RT_HD inline uint32_t icrc_masked_prefix(const FrameView& f, uint8_t* out) {
  for (int i = 0; i < 8; ++i) out[i] = 0xFF;
  const uint32_t n = f.bth + uint32_t(sizeof(Bth)) - f.l3;
  for (uint32_t i = 0; i < n; i += 4) {  // n is a multiple of 4: IP, UDP and BTH all are
    const uint32_t m = icrc_detail::mask_word(i, f.ip_version, f.l3_len);
    for (uint32_t b = 0; b < 4; ++b) out[8 + i + b] = f.base[f.l3 + i + b] | uint8_t(m >> (8 * b));
  }
  return 8 + n;
}

// ICRC of a decoded frame that has its IP header (decode(), not
// decode_transport()). Computes; does not compare. The masked header is fed to
// the CRC straight from the frame (a copy built byte by byte costs more on a
// GPU than the CRC itself); the two common layouts get constant masks.
// The raw ICRC register after the masked header (IP, UDP, BTH) of a decoded frame.
RT_HD inline uint32_t icrc_register_after_bth(const Crc32Tables& tb, const FrameView& f) {
  using namespace icrc_detail;
  const uint8_t* h = f.base + f.l3;
  const uint32_t n = f.bth + uint32_t(sizeof(Bth)) - f.l3;
  const uint32_t c = kRegisterAfterLrh;
  if (f.ip_version == 4 && n == 40) return crc_masked_header_fixed<4, 20>(tb, c, h);
  if (f.ip_version == 6 && n == 60) return crc_masked_header_fixed<6, 40>(tb, c, h);
  // IPv4 with options, or a layout not seen yet
  return crc_masked_header(tb, c, h, n, f.ip_version, f.l3_len);
}

RT_HD inline uint32_t icrc_compute(const FrameView& f) {
  const uint32_t c = icrc_register_after_bth(detail::crc32_tables(), f);
  const uint32_t after_bth = f.bth + uint32_t(sizeof(Bth));
  return crc32_update_fast(~c, f.base + after_bth, f.icrc - after_bth);
}

RT_HD inline bool icrc_ok(const FrameView& f) { return icrc_compute(f) == f.icrc_field(); }

}  // namespace rt
