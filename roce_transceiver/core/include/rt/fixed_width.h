// The fixed-width integers and size_t, for each compiler of the data path's
// headers: the C++ library's under g++ and nvcc; under NVRTC, which has no C++
// standard library (but knows size_t), the same typedefs every CUDA target
// has, so that a source that also includes a libcu++ header still compiles.
// No other include: custom.h, the user handlers' ABI, includes this.
#pragma once

#if defined(__CUDACC_RTC__)
typedef unsigned char uint8_t;
typedef unsigned short uint16_t;
typedef unsigned int uint32_t;
typedef unsigned long long uint64_t;
typedef signed char int8_t;
typedef short int16_t;
typedef int int32_t;
typedef long long int64_t;
typedef unsigned long long uintptr_t;
#else
#include <cstddef>
#include <cstdint>
#endif
