// IPv4 header (RFC 791) and its header checksum.
#pragma once

#include "rt/protocol/byte_order.h"

namespace rt {

constexpr uint8_t kIpProtoUdp = 17;

struct Ipv4Hdr {
  uint8_t version_ihl;  // version (4 bits) | header length in 32-bit words
  uint8_t tos;          // DSCP | ECN; masked to ones by the ICRC
  Be16 total_length;
  Be16 id;
  Be16 flags_fragment;  // flags (3 bits) | fragment offset in 8-byte units
  uint8_t ttl;          // masked to ones by the ICRC
  uint8_t protocol;
  Be16 checksum;  // masked to ones by the ICRC
  uint8_t src[4];
  uint8_t dst[4];

  RT_HD constexpr uint8_t version() const { return version_ihl >> 4; }
  RT_HD constexpr size_t header_bytes() const { return size_t(version_ihl & 0xF) * 4; }
};
static_assert(sizeof(Ipv4Hdr) == 20, "IPv4 header without options is 20 bytes");

constexpr uint16_t kIpv4DontFragment = 0x4000;

// One's-complement sum over the header with its checksum field taken as zero.
RT_HD inline uint16_t ipv4_header_checksum(const uint8_t* hdr, size_t len) {
  uint32_t sum = 0;
  for (size_t i = 0; i + 1 < len; i += 2) {
    if (i == 10) continue;  // the checksum field itself
    sum += uint32_t(hdr[i]) << 8 | hdr[i + 1];
  }
  while (sum >> 16) sum = (sum & 0xFFFF) + (sum >> 16);
  return uint16_t(~sum);
}

}  // namespace rt
