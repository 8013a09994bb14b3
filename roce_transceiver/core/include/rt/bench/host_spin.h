// Host-side spin waits for the floors: a pause instruction and a deadline.
//
// Shared by src/floors_cpu.cpp (g++) and cuda/floors.cu (nvcc's host pass), so
// both sides of every ping-pong spin the same way. Host code only.
#pragma once

#include <chrono>
#include <cstdint>
#include <thread>

namespace rt::bench {

// Tells the core this is a spin loop: on x86 `pause` lets the sibling
// hyper-thread run and avoids the memory-order mis-speculation penalty when
// the awaited store lands; `yield` is the AArch64 counterpart.
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield" ::: "memory");
#endif
}

using FloorClock = std::chrono::steady_clock;

inline double elapsed_ns(FloorClock::time_point t0, FloorClock::time_point t1) {
  return double(std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count());
}

// A wait longer than this yields the CPU between checks. Several times every
// floor's typical round trip, so only outliers ever yield; but on a machine
// with fewer cores than spinning threads (a one-CPU CI runner) the peer thread
// gets to run.
inline constexpr std::chrono::microseconds kYieldAfter{50};

inline FloorClock::duration to_duration(double seconds) {
  return std::chrono::duration_cast<FloorClock::duration>(std::chrono::duration<double>(seconds));
}

// Spins until ready() is true or `timeout` has passed since `since`, and says
// which. Callers pass the time they already read, so a wait that is being
// timed costs no extra clock read; the clock is read only every 64 spins, as
// a read costs about as much as a round trip between two cores.
template <typename Ready>
bool spin_until(Ready ready, FloorClock::time_point since, FloorClock::duration timeout) {
  for (uint32_t spins = 1;; ++spins) {
    if (ready()) return true;
    cpu_relax();
    if (spins % 64 != 0) continue;
    const auto waited = FloorClock::now() - since;
    if (waited > timeout) return ready();
    if (waited > kYieldAfter) std::this_thread::yield();
  }
}

}  // namespace rt::bench
