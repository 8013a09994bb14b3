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

// Copy 0xFF x 8 | IP | UDP | BTH into `out` with the variant fields masked.
// Returns the number of bytes written.
RT_HD inline uint32_t icrc_masked_prefix(const FrameView& f, uint8_t* out) {
  for (int i = 0; i < 8; ++i) out[i] = 0xFF;
  const uint32_t n = f.bth + uint32_t(sizeof(Bth)) - f.l3;
  for (uint32_t i = 0; i < n; ++i) out[8 + i] = f.base[f.l3 + i];
  uint8_t* ip = out + 8;
  if (f.ip_version == 4) {
    ip[1] = 0xFF;            // TOS
    ip[8] = 0xFF;            // TTL
    ip[10] = ip[11] = 0xFF;  // header checksum
  } else {
    ip[0] |= 0x0F;                 // traffic class, high nibble
    ip[1] = ip[2] = ip[3] = 0xFF;  // traffic class low nibble + flow label
    ip[7] = 0xFF;                  // hop limit
  }
  uint8_t* udp = ip + f.l3_len;
  udp[6] = udp[7] = 0xFF;  // UDP checksum
  udp[sizeof(UdpHdr) + kBthFecnByte] = 0xFF;
  return 8 + n;
}

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
// little-endian) to mask the fields routers may change.
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

// The same masks for the two common layouts, word k covering header bytes
// [4k, 4k + 4): IPv4 without options (40 bytes with UDP and BTH) and IPv6 (60).
RT_HD constexpr uint32_t ipv4_mask(uint32_t k) {
  switch (k) {
    case 0: return 0x0000FF00u;  // TOS
    case 2: return 0xFFFF00FFu;  // TTL, header checksum
    case 6: return 0xFFFF0000u;  // UDP checksum
    case 8: return 0x000000FFu;  // BTH byte 4
    default: return 0;
  }
}
RT_HD constexpr uint32_t ipv6_mask(uint32_t k) {
  switch (k) {
    case 0: return 0xFFFFFF0Fu;   // traffic class, flow label
    case 1: return 0xFF000000u;   // hop limit
    case 11: return 0xFFFF0000u;  // UDP checksum
    case 13: return 0x000000FFu;  // BTH byte 4
    default: return 0;
  }
}

// The masked header of a fixed layout (kWords words, masks from Mask), fed
// to the raw register c. Unrolled, the masks become constants.
template <uint32_t kWords, uint32_t (*Mask)(uint32_t)>
RT_HD inline uint32_t crc_fixed_header(const Crc32Tables& tb, uint32_t c, const uint8_t* h) {
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
  for (uint32_t k = 0; k + 1 < kWords; k += 2)
    c = crc32_step8(tb, c, load_le32(h + 4 * k) | Mask(k), load_le32(h + 4 * k + 4) | Mask(k + 1));
  if (kWords & 1) {
    const uint32_t w = load_le32(h + 4 * (kWords - 1)) | Mask(kWords - 1);
    for (int b = 0; b < 4; ++b) c = tb.t[0][(c ^ (w >> (8 * b))) & 0xFF] ^ (c >> 8);
  }
  return c;
}

}  // namespace icrc_detail

// ICRC of a decoded frame that has its IP header (decode(), not
// decode_transport()). Computes; does not compare. The masked header is fed to
// the CRC straight from the frame, eight bytes at a time with the masks OR-ed
// in (a copy built byte by byte costs more on a GPU than the CRC itself).
RT_HD inline uint32_t icrc_compute(const FrameView& f) {
  using namespace icrc_detail;
  const Crc32Tables& tb = detail::crc32_tables();
  const uint8_t* h = f.base + f.l3;
  const uint32_t n = f.bth + uint32_t(sizeof(Bth)) - f.l3;
  const uint32_t v = f.ip_version, l3 = f.l3_len;
  uint32_t c = kRegisterAfterLrh;
  if (v == 4 && n == 40) {
    c = crc_fixed_header<10, ipv4_mask>(tb, c, h);
  } else if (v == 6 && n == 60) {
    c = crc_fixed_header<15, ipv6_mask>(tb, c, h);
  } else {  // IPv4 with options
    uint32_t i = 0;
    for (; i + 8 <= n; i += 8)
      c = crc32_step8(tb, c, load_le32(h + i) | mask_word(i, v, l3),
                      load_le32(h + i + 4) | mask_word(i + 4, v, l3));
    for (; i < n; ++i) {
      const uint32_t b = h[i] | (mask_word(i, v, l3) & 0xFF);
      c = tb.t[0][(c ^ b) & 0xFF] ^ (c >> 8);
    }
  }
  const uint32_t after_bth = f.bth + uint32_t(sizeof(Bth));
  return crc32_update_fast(~c, f.base + after_bth, f.icrc - after_bth);
}

RT_HD inline bool icrc_ok(const FrameView& f) { return icrc_compute(f) == f.icrc_field(); }

}  // namespace rt
