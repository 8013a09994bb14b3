// Immediate data (IBA 9.3.6): a 32-bit big-endian word handed to the
// receiver's completion. HSB puts psn[19:0] << 12 | page[11:0] here (hsb.h).
#pragma once

#include "rt/protocol/byte_order.h"

namespace rt {

struct ImmDt {
  Be32 imm;
};
static_assert(sizeof(ImmDt) == 4, "ImmDt is 4 bytes");

}  // namespace rt
