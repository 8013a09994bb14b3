// The engine's kernels with a user handler's entry left to the linker: compiled once, at build
// time, as relocatable device code (nvcc -rdc), and linked with the user's handler at start
// (custom_handler.py: NVRTC compiles the handler alone, in a fraction of a second, and
// nvJitLink links the two), rather than compiled whole with it by NVRTC (tens of seconds).
//
// Built once for each kernel set (RT_ENGINE_KERNEL_SET, engine_kernels.cuh): the one-warp
// kernels, and the crew's, whose register bound (__launch_bounds__: kMaxCrewWarps warps on one
// SM) -maxrregcount gives every function of that build (CMakeLists.txt): relocatable code keeps
// the functions the kernels call apart, and each must fit its callers' bound.
//
// The one-warp kernels (the request loop, whose round trip is the product's figure) run the
// handler on a warp of their own (handler_warp.cuh): the engine's warp posts each call to it,
// and its code has no call. The crew's warps call the entry themselves: a crew takes messages
// in parallel, and a batch's cost is not one message's latency. The entry: handlers/linked_entry.h.
// One set a build (CMakeLists.txt): the host launches a user's one-warp kernel with the handler's
// warp beside the engine's (engine_kernel.cu), and a crew kernel without.
#if !defined(RT_ENGINE_KERNEL_SET) || (RT_ENGINE_KERNEL_SET & ~3 && RT_ENGINE_KERNEL_SET & 3)
#error "RT_ENGINE_KERNEL_SET: the one-warp kernels (bits 1, 2) or the crew's (4, 8), not both"
#elif RT_ENGINE_KERNEL_SET & 3
#include "rt/cuda/handler_warp.cuh"
#define RT_HANDLER_WARP 1
#define RT_CUSTOM_ENTRY ::rt::cuda::handler_warp_call
#else
#include "rt/handlers/linked_entry.h"
#define RT_CUSTOM_ENTRY ::rt::call_linked_entry
#endif

#include "rt/cuda/engine_kernels.cuh"
