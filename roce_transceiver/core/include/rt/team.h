// Who runs a team-wide piece of the engine: the 32 lanes of a warp on the
// GPU, or one CPU thread.
//
// Team-wide code is written once for both: each lane takes the 16-byte chunks
// c = lane(), lane() + size(), ... of a frame, the team combines what the
// lanes found (any(), xor_all()), and state changes are made by the leader
// followed by sync(). On a CPU thread the team has one lane: the loops cover
// every chunk and the combining steps are the identity.
#pragma once

#include "rt/platform.h"

namespace rt {

constexpr uint32_t kChunkBytes = 16;

struct SoloTeam {
  static constexpr uint32_t kLanes = 1;
  RT_HD uint32_t lane() const { return 0; }
  RT_HD uint32_t size() const { return 1; }
  RT_HD bool leader() const { return true; }
  RT_HD bool any(bool b) const { return b; }
  RT_HD uint32_t ballot(bool b) const { return b ? 1u : 0u; }  // bit k: lane k's b
  RT_HD uint32_t xor_all(uint32_t v) const { return v; }
  template <typename T>
  RT_HD T from_leader(T v) const {
    return v;
  }
  RT_HD uint32_t from_lane(uint32_t v, uint32_t) const { return v; }  // lane src's v
  RT_HD void sync() const {}
};

#if defined(__CUDACC__)
// A whole warp, converged: every member calls every team-wide function.
struct WarpTeam {
  static constexpr uint32_t kLanes = 32;
  __device__ uint32_t lane() const { return threadIdx.x & 31u; }
  __device__ uint32_t size() const { return 32; }
  __device__ bool leader() const { return lane() == 0; }
  __device__ bool any(bool b) const { return __any_sync(0xFFFFFFFFu, b); }
  __device__ uint32_t ballot(bool b) const { return __ballot_sync(0xFFFFFFFFu, b); }
  __device__ uint32_t xor_all(uint32_t v) const {
#if __CUDA_ARCH__ >= 800
    return __reduce_xor_sync(0xFFFFFFFFu, v);  // one instruction, not five shuffles
#else
    for (int step = 16; step >= 1; step >>= 1) v ^= __shfl_xor_sync(0xFFFFFFFFu, v, step);
    return v;
#endif
  }
  __device__ uint32_t from_leader(uint32_t v) const { return __shfl_sync(0xFFFFFFFFu, v, 0); }
  __device__ uint64_t from_leader(uint64_t v) const {
    return __shfl_sync(0xFFFFFFFFu, static_cast<unsigned long long>(v), 0);
  }
  __device__ uint32_t from_lane(uint32_t v, uint32_t src) const {
    return __shfl_sync(0xFFFFFFFFu, v, int(src));
  }
  // Also orders memory: what a lane wrote before it is seen by every lane after it.
  __device__ void sync() const { __syncwarp(); }
};
#endif

}  // namespace rt
