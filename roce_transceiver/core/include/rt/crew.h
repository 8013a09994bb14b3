// Who serves a queue: a crew of teams (team.h). On the GPU the warps of one
// block, each a team of 32 lanes; on a CPU thread one team of one lane.
//
// Crew-wide code (the engine's batch step, batch.h) is written once for both:
// team k of the crew takes the batch's packets k, k + teams(), ... in
// parallel, the crew leader (team 0's leader) makes the ordered decisions,
// and sync() separates the phases. Every thread of the crew calls every
// crew-wide function.
#pragma once

#include "rt/team.h"

namespace rt {

// The most teams a crew may have: the GPU's 1024-thread blocks.
constexpr uint32_t kMaxTeams = 32;
// The most warps the GPU's crew kernel has: its registers are bounded for them.
constexpr uint32_t kMaxCrewWarps = 16;
// The threads of a block of a user's module's one-warp kernels: the engine's warp and the
// handler's (cuda/handler_warp.cuh).
constexpr uint32_t kHandlerWarpThreads = 64;

struct SoloCrew {
  using Team = SoloTeam;
  RT_HD uint32_t teams() const { return 1; }
  RT_HD uint32_t team_index() const { return 0; }
  RT_HD Team team() const { return Team{}; }
  RT_HD bool leader() const { return true; }
  RT_HD void sync() const {}
};

#if defined(__CUDACC__)
// The warps of one block (blockDim.x a multiple of 32, at most 1024).
struct BlockCrew {
  using Team = WarpTeam;
  __device__ uint32_t teams() const { return blockDim.x >> 5; }
  __device__ uint32_t team_index() const { return threadIdx.x >> 5; }
  __device__ Team team() const { return Team{}; }
  __device__ bool leader() const { return threadIdx.x == 0; }
  // Also orders memory within the block: what a thread wrote before it is seen by
  // every thread of the block after it.
  __device__ void sync() const { __syncthreads(); }
};
#endif

}  // namespace rt
