// The user-handler ABI: the one signature a user's own handler has, in CUDA
// C++ that compiles for both executors (docs/handlers.md, "Your own handler").
//
//   RT_HD int my_decode(const rt::CustomCall& call);
//
// returns the reply length (0 .. call.reply_capacity), rt::kNoReply or
// rt::kHandlerError. This header is what a user's source includes, and all it
// may include of the engine: NVRTC compiles it (on the cuda executor, before the
// handler is linked into the engine's kernels) and has no C++ standard library,
// so it includes nothing but the three dependency-free headers below.
#pragma once

#include "rt/fixed_width.h"
#include "rt/handlers/reply.h"
#include "rt/hd.h"

namespace rt {

// Bumped when CustomCall changes incompatibly; the engine refuses a handler
// compiled against another version.
constexpr uint32_t kCustomAbiVersion = 1;

// One call: one message in, at most one reply out. Every pointer is valid only
// during the call. On the GPU's express path the calling team is one warp and
// every lane calls the entry with the same CustomCall except `lane`; on its
// general path and on the CPU the team is one lane. The engine sends the
// leader's (lane 0's) return value; every lane must return it.
struct CustomCall {
  // The message: the payload of one SEND or WRITE (all its packets), or one
  // frame's record on the frames stream.
  const uint8_t* request;
  uint32_t request_len;
  uint32_t imm;    // immediate data, when has_imm
  bool has_imm;    // the message came with immediate data
  uint8_t opcode;  // the RoCEv2 opcode that completed the message
  uint16_t queue;  // which of the transceiver's queues it arrived on

  // The reply: write at most reply_capacity bytes, starting at reply[0], and
  // return how many. The engine checks the returned length against the
  // capacity (a longer one is a handler error, nothing is sent).
  uint8_t* reply;
  uint32_t reply_capacity;

  // This queue's state: state_bytes (custom.state_bytes) of memory kept from
  // one call to the next, zeroed at start, 16-byte aligned, not shared with
  // other queues. nullptr when state_bytes is 0.
  uint8_t* state;
  uint32_t state_bytes;

  // The user's parameters (custom.params): read-only, the same for every call
  // of the run, 16-byte aligned. nullptr when params_bytes is 0.
  const uint8_t* params;
  uint32_t params_bytes;

  // The calling team: this lane's index, 0 .. lanes - 1, and the team's size
  // (32 on the GPU, 1 on the CPU). Split work by lane; see custom_sync().
  uint32_t lane;
  uint32_t lanes;
};

// The same bytes for NVRTC, nvcc and the host compiler (LP64 everywhere): the
// engine fills one CustomCall for code any of them compiled.
static_assert(sizeof(CustomCall) == 80, "CustomCall's layout is the ABI (kCustomAbiVersion)");

// The type of an entry. `check-handler` compiles the user's source against it,
// so a function of another type is a compile error naming the entry.
using CustomEntry = int (*)(const CustomCall&);

// Wait for every lane of the calling team and make their writes to reply and
// state visible to one another: call it, on every lane, between lanes writing
// and lanes reading each other's bytes. A no-op for one lane.
RT_HD inline void custom_sync(const CustomCall& call) {
#if RT_DEVICE_CODE
  if (call.lanes > 1) __syncwarp();
#else
  (void)call;
#endif
}

// The sum of `value` over the calling team's lanes, returned to every lane:
// one warp reduction on the GPU (every lane must call it), `value` on the CPU.
RT_HD inline uint32_t custom_sum(const CustomCall& call, uint32_t value) {
#if RT_DEVICE_CODE
  if (call.lanes > 1) {
#if __CUDA_ARCH__ >= 800
    return __reduce_add_sync(0xffffffffu, value);
#else
    for (int d = 16; d > 0; d >>= 1) value += __shfl_xor_sync(0xffffffffu, value, d);
    return value;
#endif
  }
#else
  (void)call;
#endif
  return value;
}

}  // namespace rt
