// A user's handler on a warp of its own: the one-warp engine kernels of a user's module
// (cuda/engine_linkable.cu) run with two warps, the engine's (warp 0) and the handler's
// (warp 1). The engine's team leader posts each call in shared memory and waits for its answer;
// the handler warp runs it.
//
// Why: the handler is compiled apart and linked in (custom_handler.py), so it is called through
// the ABI, and a call from the engine's loop must save what the loop keeps live across it.
// With the call in the engine warp's code, ptxas gave the linked rt_engine_kernel_system 255
// registers and 140 bytes of spills (1272-byte frame), and the custom echo's p50 was 1.08-1.11x
// the built-in one's; without it, 214 registers and none (1152-byte frame: the descriptor's
// copy). Here the call is made where almost nothing is live, and the engine's code has no call.
//
// Why a word in shared memory and not a named barrier: the general path calls the handler
// from its leader lane alone (a team of one, lanes 1), and a barrier waits for the whole warp.
//
// Device code for the module of a user's handler only; included by cuda/engine_linkable.cu.
#pragma once

#include "rt/crew.h"
#include "rt/cuda/linked_entry.cuh"
#include "rt/platform.h"

namespace rt::cuda {

struct HandlerMailbox {
  CustomCall call;    // written by the caller's leader before it posts, read by the handler warp
  int reply;          // written by the handler warp's lane 0 before it answers
  uint32_t posted;    // calls posted: written by the engine warp's lane 0 (a release)
  uint32_t answered;  // calls answered: written by the handler warp's lane 0 (a release)
  uint32_t quit;      // set by the engine warp's lane 0, before its last post, at its epoch's end
};

static __shared__ HandlerMailbox handler_mailbox;

// Block-wide, before the warps part (a __syncthreads must follow): no call yet.
__device__ inline void handler_warp_open() {
  if (threadIdx.x == 0) {
    handler_mailbox.posted = 0;
    handler_mailbox.answered = 0;
    handler_mailbox.quit = 0;
  }
}

// The handler warp: runs each call posted, on as many of its lanes as the call's team has
// (call.lanes: 32 from the express path, 1 from the general path), until the engine warp quits.
// A handler that never returns keeps the engine warp waiting for its answer: the loop stops,
// and the host's stop() says so, as when the engine called it itself.
__device__ inline void handler_warp_serve() {
  HandlerMailbox& box = handler_mailbox;
  const uint32_t lane = threadIdx.x & 31u;
  for (uint32_t served = 0;;) {
    if (lane == 0)
      while (load_acquire_block(&box.posted) == served) {
      }
    __syncwarp();  // lane 0's acquire, for every lane
    if (box.quit) return;
    CustomCall call = box.call;
    ++served;
    int n = 0;
    if (lane < call.lanes) {
      call.lane = lane;
      n = rt_custom_linked_entry(call);
    }
    __syncwarp();  // every lane's reply bytes and state before lane 0's release
    if (lane == 0) {
      box.reply = n;
      store_release_block(&box.answered, served);
    }
  }
}

// What the engine calls for the entry (RT_CUSTOM_ENTRY): the team's leader posts the call and
// waits for its answer; its return is the team's (custom_team hands the leader's to every lane,
// and with it what the handler wrote). The other lanes return at once.
__device__ inline int handler_warp_call(const CustomCall& call) {
  if (call.lane != 0) return 0;
  HandlerMailbox& box = handler_mailbox;
  box.call = call;
  const uint32_t ticket = box.posted + 1;
  store_release_block(&box.posted, ticket);
  while (load_acquire_block(&box.answered) != ticket) {
  }
  return box.reply;
}

// The engine warp, at its epoch's end: the handler warp returns.
__device__ inline void handler_warp_close() {
  if ((threadIdx.x & 31u) != 0) return;
  HandlerMailbox& box = handler_mailbox;
  box.quit = 1;
  store_release_block(&box.posted, box.posted + 1);
}

}  // namespace rt::cuda
