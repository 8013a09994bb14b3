// UDP header; RoCEv2 is UDP destination port 4791.
#pragma once

#include "rt/protocol/byte_order.h"

namespace rt {

constexpr uint16_t kRoceV2Port = 4791;

struct UdpHdr {
  Be16 src_port;  // entropy for ECMP; HSB sensors send from 12288
  Be16 dst_port;
  Be16 length;    // header + data, in bytes
  Be16 checksum;  // RoCEv2 NICs send 0; masked to ones by the ICRC
};
static_assert(sizeof(UdpHdr) == 8, "UDP header is 8 bytes");

}  // namespace rt
