// RDMA Extended Transport Header (IBA 9.3.3.2): where an RDMA WRITE or READ lands.
#pragma once

#include "rt/protocol/byte_order.h"

namespace rt {

struct Reth {
  Be64 va;       // remote virtual address of the first byte
  Be32 rkey;     // remote key of the memory region
  Be32 dma_len;  // bytes of the whole message, not of this packet
};
static_assert(sizeof(Reth) == 16, "RETH is 16 bytes");

}  // namespace rt
