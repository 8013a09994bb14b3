// The host/device annotations, alone: RT_HD and friends with no include, so
// that a header compiled by NVRTC (which has no C++ standard library, and no
// libcu++ unless told where it is) can use them. platform.h includes this.
#pragma once

#if defined(__CUDACC__)
#define RT_HD __host__ __device__
#define RT_DEVICE __device__
#else
#define RT_HD
#define RT_DEVICE
#endif

// For the loop's rare paths: kept out of line so the common path, inlined
// into the persistent kernel, keeps its registers (no spills to local memory).
#if defined(__CUDACC__)
#define RT_COLD __noinline__
#else
#define RT_COLD __attribute__((noinline))
#endif

// True while compiling the device side of a .cu file. Branch on this only in
// platform.h and in the few leaf helpers that must differ (tables, clocks).
#if defined(__CUDA_ARCH__)
#define RT_DEVICE_CODE 1
#else
#define RT_DEVICE_CODE 0
#endif

// 0 under NVRTC, which compiles device code only and refuses a host function
// even declared: host-only declarations and wrappers sit behind this.
#if defined(__CUDACC_RTC__)
#define RT_HOST_FUNCTIONS 0
#else
#define RT_HOST_FUNCTIONS 1
#endif
