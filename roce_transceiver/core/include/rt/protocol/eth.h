// Ethernet II header and the optional 802.1Q tag.
#pragma once

#include "rt/protocol/byte_order.h"

namespace rt {

constexpr uint16_t kEtherTypeIpv4 = 0x0800;
constexpr uint16_t kEtherTypeIpv6 = 0x86DD;
constexpr uint16_t kEtherTypeVlan = 0x8100;

struct EthHdr {
  uint8_t dst[6];
  uint8_t src[6];
  Be16 ethertype;
};
static_assert(sizeof(EthHdr) == 14, "Ethernet header is 14 bytes");

// 802.1Q tag: sits between the source MAC and the real ethertype.
struct VlanTag {
  Be16 tci;  // PCP (3 bits) | DEI (1) | VID (12)
  Be16 ethertype;

  RT_HD constexpr uint16_t vid() const { return tci.get() & 0x0FFF; }
  RT_HD constexpr uint8_t pcp() const { return uint8_t(tci.get() >> 13); }
};
static_assert(sizeof(VlanTag) == 4, "802.1Q tag is 4 bytes");

}  // namespace rt
