// IPv6 fixed header (RFC 8200). Extension headers are not used by RoCEv2.
#pragma once

#include "rt/protocol/byte_order.h"

namespace rt {

struct Ipv6Hdr {
  Be32 vtc_flow;  // version (4) | traffic class (8) | flow label (20); TC and flow label masked by
                  // the ICRC
  Be16 payload_length;
  uint8_t next_header;
  uint8_t hop_limit;  // masked to ones by the ICRC
  uint8_t src[16];
  uint8_t dst[16];

  RT_HD constexpr uint8_t version() const { return uint8_t(vtc_flow.get() >> 28); }
  RT_HD constexpr uint8_t traffic_class() const { return uint8_t(vtc_flow.get() >> 20); }
  RT_HD constexpr uint32_t flow_label() const { return vtc_flow.get() & 0xFFFFF; }
};
static_assert(sizeof(Ipv6Hdr) == 40, "IPv6 fixed header is 40 bytes");

}  // namespace rt
