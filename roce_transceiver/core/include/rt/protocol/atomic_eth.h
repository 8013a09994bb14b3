// Atomic headers (IBA 9.3.3.3 and 9.3.5.3): FETCH_ADD / COMPARE_SWAP requests
// and the ATOMIC ACKNOWLEDGE that returns the original value.
#pragma once

#include "rt/protocol/byte_order.h"

namespace rt {

struct AtomicEth {
  Be64 va;  // 8-byte aligned remote address
  Be32 rkey;
  Be64 swap_add;  // add operand (FETCH_ADD) or swap value (COMPARE_SWAP)
  Be64 compare;   // compare operand, COMPARE_SWAP only
};
static_assert(sizeof(AtomicEth) == 28, "AtomicETH is 28 bytes");

struct AtomicAckEth {
  Be64 orig;  // the remote value before the atomic operation
};
static_assert(sizeof(AtomicAckEth) == 8, "AtomicAckETH is 8 bytes");

}  // namespace rt
