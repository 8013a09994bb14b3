// The engine's kernels with a user handler's entry left to the linker: compiled once, at build
// time, as relocatable device code (nvcc -rdc), and linked with the user's handler at start
// (custom_handler.py: NVRTC compiles the handler alone, in a fraction of a second, and
// nvJitLink links the two), rather than compiled whole with it by NVRTC (tens of seconds).
//
// Built once for each kernel set (RT_ENGINE_KERNEL_SET, engine_kernels.cuh): the one-warp
// kernels, and the crew's, whose register bound (__launch_bounds__: kMaxCrewWarps warps on one
// SM) -maxrregcount gives every function of that build (CMakeLists.txt): relocatable code keeps
// the functions the kernels call apart, and each must fit its callers' bound.
#include "rt/handlers/custom.h"

// What the user's unit defines (custom_handler.py): the entry, under one name for every
// handler, with C linkage so that both compilers name it alike. The call by value: its fields
// travel in the call's parameter registers, where a reference would make the caller store the
// whole call in local memory for the callee to read back.
extern "C" __device__ int rt_custom_linked_entry(::rt::CustomCall call);
#define RT_CUSTOM_ENTRY ::rt_custom_linked_entry

#include "rt/cuda/engine_kernels.cuh"
