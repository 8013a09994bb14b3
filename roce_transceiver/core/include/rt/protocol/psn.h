// 24-bit packet sequence numbers (IBA 9.7.1): the only place that knows the wrap.
//
// PSNs live on a circle of 2^24. "a is before b" means b lies in the half
// circle ahead of a; a distance of exactly 2^23 is ambiguous and the spec
// leaves it to the window, so psn_diff maps it to -2^23 (behind).
#pragma once

#include "rt/platform.h"

namespace rt {

constexpr uint32_t kPsnMask = 0xFFFFFF;
constexpr uint32_t kPsnHalf = 0x800000;

RT_HD constexpr uint32_t psn_add(uint32_t psn, uint32_t n) { return (psn + n) & kPsnMask; }

// Signed distance b - a on the 24-bit circle, in [-2^23, 2^23).
RT_HD constexpr int32_t psn_diff(uint32_t b, uint32_t a) {
  const uint32_t d = (b - a) & kPsnMask;
  return d >= kPsnHalf ? int32_t(d) - int32_t(kPsnMask + 1) : int32_t(d);
}

RT_HD constexpr bool psn_before(uint32_t a, uint32_t b) { return psn_diff(b, a) > 0; }

static_assert(psn_add(kPsnMask, 1) == 0, "wraps at 2^24");
static_assert(psn_diff(0, kPsnMask) == 1, "0 follows 0xFFFFFF");
static_assert(psn_diff(kPsnMask, 0) == -1, "0xFFFFFF precedes 0");
static_assert(psn_diff(kPsnHalf, 0) == -int32_t(kPsnHalf), "half circle counts as behind");
static_assert(psn_before(0xFFFFF0, 0x10), "order across the wrap");

}  // namespace rt
