// Datagram Extended Transport Header (IBA 9.3.2): UD queue key and source QP.
#pragma once

#include "rt/protocol/byte_order.h"

namespace rt {

struct Deth {
  Be32 qkey;
  uint8_t reserved;
  Be24 src_qp;
};
static_assert(sizeof(Deth) == 8, "DETH is 8 bytes");

}  // namespace rt
