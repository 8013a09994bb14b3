// Host/device vocabulary shared by every header of the data path.
//
// The protocol, queue and engine code is written once and compiled twice: by
// g++ into the CPU executor and by nvcc into the persistent kernel. RT_HD is
// the only annotation that code needs; it vanishes when nvcc is absent.
#pragma once

#if !defined(__CUDA_ARCH__)
#include <time.h>
#endif

#include "rt/device_clock.h"
#include "rt/fixed_width.h"
#include "rt/hd.h"

namespace rt {

// A read-only byte range. std::span is C++20 and absent from device code, so
// the data path uses this instead.
struct ByteSpan {
  const uint8_t* data = nullptr;
  size_t size = 0;

  constexpr ByteSpan() = default;
  RT_HD constexpr ByteSpan(const uint8_t* d, size_t n) : data(d), size(n) {}
  RT_HD constexpr const uint8_t& operator[](size_t i) const { return data[i]; }
  RT_HD constexpr ByteSpan sub(size_t offset, size_t n) const { return ByteSpan(data + offset, n); }
};

// A writable byte range.
struct MutByteSpan {
  uint8_t* data = nullptr;
  size_t size = 0;

  constexpr MutByteSpan() = default;
  RT_HD constexpr MutByteSpan(uint8_t* d, size_t n) : data(d), size(n) {}
  RT_HD constexpr uint8_t& operator[](size_t i) const { return data[i]; }
  RT_HD constexpr operator ByteSpan() const { return ByteSpan(data, size); }
};

// Who else may touch a shared word. kSystem: the other side is across PCIe
// (a CPU thread and a kernel, pinned memory); kDevice: both sides are on the
// GPU (device memory). A word is always used under one scope (PTX memory model).
enum class Scope { kDevice, kSystem };

// The device side of the atomics below is one PTX instruction each, the ones
// libcu++'s atomic_ref emits, written out so that the same headers compile
// under NVRTC without libcu++ (a user handler's kernel, custom_handler.py).
// The host build uses the compiler's builtins (std::atomic_ref's semantics).

// Acquire loads and release stores of 32-bit shared indices and flags.
template <Scope S>
RT_HD inline uint32_t load_acquire(const uint32_t* p) {
#if RT_DEVICE_CODE
  uint32_t v;
  if constexpr (S == Scope::kSystem)
    asm volatile("ld.acquire.sys.b32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  else
    asm volatile("ld.acquire.gpu.b32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
#else
  return __atomic_load_n(p, __ATOMIC_ACQUIRE);
#endif
}

template <Scope S>
RT_HD inline void store_release(uint32_t* p, uint32_t v) {
#if RT_DEVICE_CODE
  if constexpr (S == Scope::kSystem)
    asm volatile("st.release.sys.b32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
  else
    asm volatile("st.release.gpu.b32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
#else
  __atomic_store_n(p, v, __ATOMIC_RELEASE);
#endif
}

// 32-bit progress words one side only needs eventually (a count a window is kept by),
// or whose ordering a release elsewhere already gives: relaxed, no fence.
template <Scope S>
RT_HD inline void store_relaxed(uint32_t* p, uint32_t v) {
#if RT_DEVICE_CODE
  if constexpr (S == Scope::kSystem)
    asm volatile("st.relaxed.sys.b32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
  else
    asm volatile("st.relaxed.gpu.b32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
#else
  __atomic_store_n(p, v, __ATOMIC_RELAXED);
#endif
}

template <Scope S>
RT_HD inline uint32_t load_relaxed(const uint32_t* p) {
#if RT_DEVICE_CODE
  uint32_t v;
  if constexpr (S == Scope::kSystem)
    asm volatile("ld.relaxed.sys.b32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  else
    asm volatile("ld.relaxed.gpu.b32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
#else
  return __atomic_load_n(p, __ATOMIC_RELAXED);
#endif
}

// 64-bit counters: one writer, readers anywhere. Relaxed, naturally aligned:
// a reader sees some recent value, never a torn one.
template <Scope S>
RT_HD inline void store_relaxed(uint64_t* p, uint64_t v) {
#if RT_DEVICE_CODE
  if constexpr (S == Scope::kSystem)
    asm volatile("st.relaxed.sys.b64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
  else
    asm volatile("st.relaxed.gpu.b64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
#else
  __atomic_store_n(p, v, __ATOMIC_RELAXED);
#endif
}

template <Scope S>
RT_HD inline uint64_t load_relaxed(const uint64_t* p) {
#if RT_DEVICE_CODE
  uint64_t v;
  if constexpr (S == Scope::kSystem)
    asm volatile("ld.relaxed.sys.b64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  else
    asm volatile("ld.relaxed.gpu.b64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
#else
  return __atomic_load_n(p, __ATOMIC_RELAXED);
#endif
}

// RDMA atomics on a registered region (a peer's FETCH_ADD / COMPARE_SWAP): system scope,
// acquire-release, so that WRITEs placed before them are visible to whoever sees the new value
// (a signal word polled by a kernel or the host). Return the value before.
RT_HD inline uint64_t fetch_add_system(uint64_t* p, uint64_t v) {
#if RT_DEVICE_CODE
  uint64_t old;
  asm volatile("atom.add.acq_rel.sys.u64 %0, [%1], %2;" : "=l"(old) : "l"(p), "l"(v) : "memory");
  return old;
#else
  return __atomic_fetch_add(p, v, __ATOMIC_ACQ_REL);
#endif
}

RT_HD inline uint64_t compare_swap_system(uint64_t* p, uint64_t compare, uint64_t swap) {
#if RT_DEVICE_CODE
  uint64_t old;
  asm volatile("atom.cas.acq_rel.sys.b64 %0, [%1], %2, %3;"
               : "=l"(old)
               : "l"(p), "l"(compare), "l"(swap)
               : "memory");
  return old;  // on failure, the value found; on success, the one expected, equal to it
#else
  __atomic_compare_exchange_n(p, &compare, swap, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
  return compare;
#endif
}

// Make an earlier relaxed load that saw a producer's flag an acquire: what the
// producer wrote before its release is seen by every load after this.
template <Scope S>
RT_HD inline void fence_acquire() {
#if RT_DEVICE_CODE
  if constexpr (S == Scope::kSystem)
    asm volatile("fence.acq_rel.sys;" ::: "memory");
  else
    asm volatile("fence.acq_rel.gpu;" ::: "memory");
#else
  __atomic_thread_fence(__ATOMIC_ACQUIRE);
#endif
}

// Make later relaxed stores releases: what this thread wrote before the fence is seen by
// whoever acquires one of them (several flags published behind one fence).
template <Scope S>
RT_HD inline void fence_release() {
#if RT_DEVICE_CODE
  fence_acquire<S>();  // fence.acq_rel: both halves
#else
  __atomic_thread_fence(__ATOMIC_RELEASE);
#endif
}

// Back off inside a spin: the x86 pause hint on the host, a short sleep on the GPU.
RT_HD inline void spin_pause() {
#if RT_DEVICE_CODE
  __nanosleep(32);
#elif defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

#if defined(__CUDACC__)
// Wait at named barrier `id` (1 to 15: 0 is __syncthreads') until `threads` threads of the block
// (whole warps, each converged) have come to it; orders their memory as __syncthreads orders the
// block's, with no fence of its own (cuda/handler_warp.cuh: two warps meet there).
__device__ inline void barrier_sync(uint32_t id, uint32_t threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
#endif

// Nanoseconds of a clock that only moves forward. Host: CLOCK_MONOTONIC.
// Device: %globaltimer. The two are different clocks: compare timestamps
// only with timestamps taken on the same side.
RT_HD inline uint64_t now_ns() {
#if RT_DEVICE_CODE
  return globaltimer_ns();
#else
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
#endif
}

}  // namespace rt
