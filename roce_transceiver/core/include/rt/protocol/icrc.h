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

// ICRC of a decoded frame that has its IP header (decode(), not
// decode_transport()). Computes; does not compare.
RT_HD inline uint32_t icrc_compute(const FrameView& f) {
  uint8_t prefix[kIcrcPrefixMax];
  const uint32_t n = icrc_masked_prefix(f, prefix);
  const uint32_t after_bth = f.bth + uint32_t(sizeof(Bth));
  uint32_t c = crc32_update_fast(0, prefix, n);
  return crc32_update_fast(c, f.base + after_bth, f.icrc - after_bth);
}

RT_HD inline bool icrc_ok(const FrameView& f) { return icrc_compute(f) == f.icrc_field(); }

}  // namespace rt
