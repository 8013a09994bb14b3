// The function a user's handler is linked in as (custom_handler.py): the relocatable kernels
// built with the package (cuda/engine_linkable.cu, cuda/verbs_linkable.cu) call it, the
// handler's unit defines it (RT_DEFINE_LINKED_ENTRY, around the user's entry), one name for
// every handler, with C linkage so that both compilers name it alike.
//
// Its arguments are the CustomCall's fields, most used first: the ABI passes a call's first
// sixteen words in registers and an aggregate in local memory, where an 80-byte CustomCall by
// value cost the entry a chain of local loads before its first byte. Device code for nvcc and
// NVRTC; one list of the arguments for both sides.
#pragma once

#include "rt/handlers/custom.h"

#if defined(__CUDACC__)

#define RT_LINKED_ENTRY_PARAMS                                                           \
  const uint8_t *request, uint8_t *reply, uint32_t request_len, uint32_t reply_capacity, \
      uint32_t lane, uint32_t lanes, uint32_t imm, uint32_t shape, uint8_t *state,       \
      uint32_t state_bytes, const uint8_t *params, uint32_t params_bytes

extern "C" __device__ int rt_custom_linked_entry(RT_LINKED_ENTRY_PARAMS);

namespace rt {

// `shape`: has_imm, the opcode and the queue in one word.
__device__ inline uint32_t linked_shape(const CustomCall& c) {
  return uint32_t(c.has_imm) | uint32_t(c.opcode) << 8 | uint32_t(c.queue) << 16;
}

// The call, as the linked entry takes it.
__device__ inline int call_linked_entry(const CustomCall& c) {
  return rt_custom_linked_entry(c.request, c.reply, c.request_len, c.reply_capacity, c.lane,
                                c.lanes, c.imm, linked_shape(c), c.state, c.state_bytes, c.params,
                                c.params_bytes);
}

}  // namespace rt

// The handler's unit: the linked entry, calling `entry` (a user's function of exactly the
// CustomEntry type, which the line taking its address checks) with the call rebuilt.
#define RT_DEFINE_LINKED_ENTRY(entry)                                        \
  extern "C" __device__ int rt_custom_linked_entry(RT_LINKED_ENTRY_PARAMS) { \
    const ::rt::CustomEntry checked = &entry;                                \
    (void)checked;                                                           \
    const ::rt::CustomCall call{request,                                     \
                                request_len,                                 \
                                imm,                                         \
                                (shape & 1u) != 0,                           \
                                uint8_t(shape >> 8),                         \
                                uint16_t(shape >> 16),                       \
                                reply,                                       \
                                reply_capacity,                              \
                                state,                                       \
                                state_bytes,                                 \
                                params,                                      \
                                params_bytes,                                \
                                lane,                                        \
                                lanes};                                      \
    return entry(call);                                                      \
  }

#endif
