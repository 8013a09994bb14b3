// Base Transport Header (IBA 9.2), the first 12 bytes after UDP.
#pragma once

#include "rt/protocol/byte_order.h"

namespace rt {

struct Bth {
  uint8_t opcode;
  uint8_t flags;  // SE (bit 7) | MigReq (6) | PadCnt (5:4) | TVer (3:0)
  Be16 pkey;
  uint8_t becn_fecn;  // FECN (7) | BECN (6) | reserved; the byte the ICRC masks
  Be24 dest_qp;
  uint8_t ack_req;  // AckReq (7) | reserved
  Be24 psn;

  RT_HD constexpr bool se() const { return flags & 0x80; }
  RT_HD constexpr bool mig_req() const { return flags & 0x40; }
  RT_HD constexpr uint8_t pad_count() const { return (flags >> 4) & 0x3; }
  RT_HD constexpr uint8_t tver() const { return flags & 0xF; }
  RT_HD constexpr bool fecn() const { return becn_fecn & 0x80; }
  RT_HD constexpr bool becn() const { return becn_fecn & 0x40; }
  RT_HD constexpr bool ack_requested() const { return ack_req & 0x80; }

  RT_HD constexpr void set_flags(bool se_, bool mig_req_, uint8_t pad, uint8_t tver_) {
    flags = uint8_t((se_ ? 0x80 : 0) | (mig_req_ ? 0x40 : 0) | (pad & 0x3) << 4 | (tver_ & 0xF));
  }
  RT_HD constexpr void set_ecn(bool fecn_, bool becn_) {
    becn_fecn = uint8_t((fecn_ ? 0x80 : 0) | (becn_ ? 0x40 : 0));
  }
  RT_HD constexpr void set_ack_req(bool a) { ack_req = a ? 0x80 : 0; }
};
static_assert(sizeof(Bth) == 12, "BTH is 12 bytes");
constexpr size_t kBthFecnByte = 4;  // offset of the byte the ICRC masks

}  // namespace rt
