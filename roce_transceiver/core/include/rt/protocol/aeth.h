// ACK Extended Transport Header (IBA 9.3.5): RC acknowledgements.
#pragma once

#include "rt/protocol/byte_order.h"

namespace rt {

struct Aeth {
  Be32 syndrome_msn;  // syndrome (8 bits) | MSN (24 bits)

  RT_HD constexpr uint8_t syndrome() const { return uint8_t(syndrome_msn.get() >> 24); }
  RT_HD constexpr uint32_t msn() const { return syndrome_msn.get() & 0xFFFFFF; }
  RT_HD constexpr void set(uint8_t syndrome, uint32_t msn) {
    syndrome_msn.set(uint32_t(syndrome) << 24 | (msn & 0xFFFFFF));
  }
};
static_assert(sizeof(Aeth) == 4, "AETH is 4 bytes");

// Syndromes (IBA table 44): bits 6:5 select ACK / RNR NAK / NAK, bits 4:0 carry
// a credit count or NAK code. 0x1F is an ACK with "invalid credit count", which is
// what RoCE NICs send; 0x60 is NAK "PSN sequence error".
constexpr uint8_t kAethAck = 0x1F;
constexpr uint8_t kAethNakPsnSeqError = 0x60;
constexpr uint8_t kAethNakInvalidRequest = 0x61;
constexpr uint8_t kAethNakRemoteAccessError = 0x62;

}  // namespace rt
