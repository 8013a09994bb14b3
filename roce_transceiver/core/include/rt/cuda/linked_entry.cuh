// The user's entry as the linker joins it to the engine's and the Verbs serve loop's relocatable
// kernels (cuda/engine_linkable.cu, cuda/verbs_linkable.cu): custom_handler.py defines it in the
// handler's unit, under one name for every handler, with C linkage so that both compilers name
// it alike. The call by value: its fields travel in the call's parameter registers, where a
// reference would make the caller store the whole call in local memory for the callee to read.
#pragma once

#include "rt/handlers/custom.h"

extern "C" __device__ int rt_custom_linked_entry(::rt::CustomCall call);
