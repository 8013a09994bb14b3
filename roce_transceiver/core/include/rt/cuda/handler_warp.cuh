// A user's handler on a warp of its own: the one-warp engine kernels of a user's module
// (cuda/engine_linkable.cu) run with two warps, the engine's (warp 0) and the handler's
// (warp 1), which meet at a named barrier around each call.
//
// Why: the handler is compiled apart and linked in (custom_handler.py), so it is called through
// the ABI, and a call from the engine's loop must save what the loop keeps live across it.
// With the call in the engine warp's code, ptxas gave the linked rt_engine_kernel_system 255
// registers and 140 bytes of spills (1272-byte frame), and the custom echo's p50 was 1.08-1.11x
// the built-in one's; without it, 214 registers and none (1152-byte frame: the descriptor's
// copy). Here the call is made where almost nothing is live, and the engine's code has no call.
//
// Why a barrier and not a flag in shared memory: a flag each way (a cta-scope release store and
// acquire load: on sm_90 a MEMBAR.ALL.CTA and generic stores and loads) cost the custom echo
// 0.9-1.0 us a round trip on the H100 (docs/performance.md), where a barrier orders the two
// warps' memory with no fence. A barrier takes whole warps: the engine calls a user's handler
// from every lane of its warp (custom_team; the general path delivers a user's message
// team-wide, transmit.h's carry_out).
//
// Device code for the module of a user's handler only; included by cuda/engine_linkable.cu.
#pragma once

#include "rt/crew.h"
#include "rt/handlers/linked_entry.h"
#include "rt/platform.h"

namespace rt::cuda {

// The named barrier where the engine's warp and the handler's meet (kHandlerWarpThreads, crew.h;
// 0 is __syncthreads').
constexpr uint32_t kHandlerBarrier = 1;

struct HandlerMailbox {
  CustomCall call;  // written by the engine warp's lane 0 before a call, read by the handler warp
  int reply;        // written by the handler warp's lane 0, read by the engine warp after a call
  uint32_t quit;    // 0 from the block's start; set by the engine warp's lane 0 at its epoch's end
};

static __shared__ HandlerMailbox handler_mailbox;

__device__ inline bool first_lane() { return (threadIdx.x & 31u) == 0; }

// Block-wide, before the warps part (a __syncthreads must follow): nothing to quit yet.
__device__ inline void handler_warp_open() {
  if (threadIdx.x == 0) handler_mailbox.quit = 0;
}

// The handler warp: runs each call the engine warp posts, on its every lane, until the engine
// warp quits. A handler that never returns holds the engine warp at its second barrier: the
// loop stops, and the host's stop() says so (as when the engine called it itself).
__device__ inline void handler_warp_serve() {
  HandlerMailbox& box = handler_mailbox;
  for (;;) {
    barrier_sync(kHandlerBarrier, kHandlerWarpThreads);  // a call is in, or the quit
    if (box.quit) return;
    CustomCall call = box.call;
    call.lane = threadIdx.x & 31u;
    const int n = call_linked_entry(call);
    if (first_lane()) box.reply = n;
    barrier_sync(kHandlerBarrier, kHandlerWarpThreads);  // the reply and its bytes are out
  }
}

// What the engine calls for the entry (RT_CUSTOM_ENTRY), on every lane of its warp (a team of
// 32: custom_team): one call, run by the handler warp; its return. What the handler wrote
// (reply, state) is seen by the engine warp after the barrier.
__device__ inline int handler_warp_call(const CustomCall& call) {
  if (call.lanes != 32) __trap();  // a lane alone would wait at the barrier for its warp forever
  HandlerMailbox& box = handler_mailbox;
  if (first_lane()) box.call = call;
  barrier_sync(kHandlerBarrier, kHandlerWarpThreads);  // the call is in
  barrier_sync(kHandlerBarrier, kHandlerWarpThreads);  // the handler warp has answered
  return box.reply;
}

// The engine warp, every lane, at its epoch's end: the handler warp returns.
__device__ inline void handler_warp_close() {
  if (first_lane()) handler_mailbox.quit = 1;
  barrier_sync(kHandlerBarrier, kHandlerWarpThreads);
}

}  // namespace rt::cuda
