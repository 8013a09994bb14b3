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

// HSB's emulator counts its PSNs in 20 bits (the end-of-frame immediate carries
// psn[19:0]), so its 0xFFFFF is followed by 0, not 0x100000. A 24-bit sender at
// 0x100000 sends 0x100000: "expected 2^20, got 0" can only be that wrap.
constexpr uint32_t kPsnWrap20 = 1u << 20;

RT_HD constexpr bool psn_wraps_at_20_bits(uint32_t psn, uint32_t expected) {
  return expected == kPsnWrap20 && psn == 0;
}

// psn_diff for a sensor that may wrap at 20 bits: when both PSNs lie in
// [0, 2^20], the shorter way round the 2^20 circle is taken. For a 24-bit
// sender the two agree unless the PSNs are 2^19 packets apart, which no frame is.
RT_HD constexpr int32_t psn_diff_sensor(uint32_t b, uint32_t a) {
  const int32_t d24 = psn_diff(b, a);
  if (a > kPsnWrap20 || b > kPsnWrap20) return d24;
  const uint32_t u = (b - a) & (kPsnWrap20 - 1);
  const int32_t d20 = u >= kPsnWrap20 / 2 ? int32_t(u) - int32_t(kPsnWrap20) : int32_t(u);
  return (d20 < 0 ? -d20 : d20) < (d24 < 0 ? -d24 : d24) ? d20 : d24;
}

static_assert(psn_add(kPsnMask, 1) == 0, "wraps at 2^24");
static_assert(psn_diff(0, kPsnMask) == 1, "0 follows 0xFFFFFF");
static_assert(psn_diff(kPsnMask, 0) == -1, "0xFFFFFF precedes 0");
static_assert(psn_diff(kPsnHalf, 0) == -int32_t(kPsnHalf), "half circle counts as behind");
static_assert(psn_before(0xFFFFF0, 0x10), "order across the wrap");
static_assert(psn_wraps_at_20_bits(0, kPsnWrap20) && !psn_wraps_at_20_bits(0, 0xFFFFF),
              "only 2^20 -> 0 is the 20-bit wrap");
static_assert(psn_diff_sensor(0x10, 0xFFFF0) == 0x20, "a 20-bit sender across its wrap");
static_assert(psn_diff_sensor(0, kPsnWrap20) == 0, "the 20-bit wrap is the next PSN");
static_assert(psn_diff_sensor(0x100010, 0xFFFF0) == 0x20, "a 24-bit sender past 2^20");
static_assert(psn_diff_sensor(5, 9) == -4, "short distances as psn_diff");

}  // namespace rt
