// GPU clocks, as named device functions: the one place that holds inline PTX
// for reading time on the device (platform.h keeps the host/device vocabulary).
//
// Device code only: this header is empty outside nvcc.
#pragma once

#include "rt/fixed_width.h"

#if defined(__CUDACC__)

namespace rt {

// Nanoseconds of the GPU's global timer (PTX %globaltimer), shared by every
// SM. The PTX ISA promises no resolution and it ticks coarsely on some GPUs
// (steps near 1 us), so use it for deadlines and for spans of many
// microseconds, not to time one short event.
__device__ inline uint64_t globaltimer_ns() {
  uint64_t ns;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(ns)::"memory");
  return ns;
}

// Cycles of this SM's clock (PTX %clock64): fine-grained, but per SM and at
// whatever frequency the SM runs, so convert to time with a span measured
// against globaltimer_ns().
__device__ inline uint64_t sm_cycles() {
  uint64_t cycles;
  asm volatile("mov.u64 %0, %%clock64;" : "=l"(cycles)::"memory");
  return cycles;
}

}  // namespace rt

#endif  // __CUDACC__
