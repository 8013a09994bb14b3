// Invalidate Extended Transport Header (IBA 9.3.7): SEND with Invalidate.
#pragma once

#include "rt/protocol/byte_order.h"

namespace rt {

struct Ieth {
  Be32 rkey;  // the R_Key the SEND with Invalidate invalidates
};
static_assert(sizeof(Ieth) == 4, "IETH is 4 bytes");

}  // namespace rt
