// Latency floors: the best round trip any design could reach on this machine.
//
// Every round-trip benchmark prints its figure next to these, measured in the
// same run (DESIGN.md section 8), so a figure is read as a ratio to what the
// hardware allows rather than as an absolute. Each floor runs a warm-up first
// and returns one round-trip time per measured iteration, in nanoseconds; the
// one throughput floor, plain_pass, the best time of a launch over a stream.
//
// Plain C++ so host code compiled by g++ (the pybind11 bindings) can call it.
// The GPU floors live in cuda/floors.cu; a build without CUDA links stubs
// (src/floors_cpu.cpp) that throw "this build has no CUDA support".
//
// Errors: std::invalid_argument for bad arguments; std::runtime_error for
// everything else (no GPU, a CUDA call failing, a peer that did not answer in
// time), its message naming the floor and what was outstanding. No floor
// hangs: every wait has a deadline, and every persistent kernel has a stop flag
// and a budget of its own.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace rt::bench {

// Round trips run before measuring, so first-touch costs (page faults, lazy
// module loading, cold caches, clocks ramping up) stay out of the samples.
inline constexpr int64_t kFloorWarmup = 1000;
// Upper bound on `iterations`: keeps sample vectors (8 bytes each) and the
// 32-bit sequence words of the ping-pongs well within range.
inline constexpr int64_t kFloorMaxIterations = 10'000'000;
inline constexpr double kFloorDefaultTimeoutS = 2.0;
// Largest message launch_per_message copies and echoes.
inline constexpr size_t kFloorMaxMessageBytes = size_t(1) << 20;

// Two CPU threads ping-pong sequence numbers through two words of ordinary
// memory, each on its own 64-byte cache line (release stores, acquire loads,
// spinning with the CPU's pause instruction). Timed by the initiating thread
// with std::chrono::steady_clock. The floor of the cpu executor; host-only,
// runs everywhere. Throws if the other thread does not answer one round trip
// within timeout_s.
std::vector<double> cpu_thread_pingpong(int64_t iterations,
                                        double timeout_s = kFloorDefaultTimeoutS);

// The host writes a sequence number into a flag in mapped pinned host memory
// (cudaHostAllocMapped); a persistent kernel of one thread polls it with
// system-scope acquire loads and answers in a second pinned flag with a
// system-scope release store; the host polls that. Timed on the host with
// std::chrono::steady_clock (CLOCK_MONOTONIC). Throws, naming the iteration,
// if the kernel does not answer within timeout_s.
std::vector<double> pinned_pingpong(int64_t iterations, double timeout_s = kFloorDefaultTimeoutS);

// Two thread blocks of one kernel ping-pong through flags in device memory
// (cudaMalloc) with device-scope acquire/release atomics; nothing crosses PCIe
// while measuring. Timed on the GPU: each round trip in the initiating SM's
// clock64() cycles, converted to ns by the %globaltimer span of the whole run
// (%globaltimer alone ticks too coarsely to time one sub-microsecond round
// trip). The kernel gives up once one wait lasts timeout_s; throws, naming
// the round trip, if it did, and if the kernel outlives a generous deadline.
std::vector<double> device_block_pingpong(int64_t iterations,
                                          double timeout_s = kFloorDefaultTimeoutS);

// Per message: the host copies `size` bytes into pinned memory, launches a
// kernel that echoes them into a second pinned buffer (as a plain launch, or
// as a CUDA graph when `graph` is true), synchronises the stream and checks
// the echo. Timed on the host with std::chrono::steady_clock from the copy to
// the end of the synchronisation (the check is outside the timed part).
std::vector<double> launch_per_message(int64_t iterations, size_t size = 32, bool graph = false);

// ---- the plain per-packet pass ---------------------------------------------------------

// Where plain_pass takes a packet as its own: the header checks of the frames stream's
// classify (stream_kind), on a range of QPs and one region.
struct PlainPassTarget {
  uint32_t qpn_first = 0;  // BTH dest QPs qpn_first .. qpn_first + qpn_count - 1
  uint32_t qpn_count = 1;
  uint32_t rkey = 0;
  uint64_t region_va = 0;  // the region the RETH's VA range must lie in
  uint64_t region_bytes = 0;
};

struct PlainPassResult {
  double ns = 0;       // the fastest measured launch, CUDA events around it
  uint64_t good = 0;   // packets that passed every check, their ICRC too
  uint64_t bad = 0;    // the others
  uint64_t bytes = 0;  // payload bytes of the good packets, placed in the region
};

// Bounds plain_pass checks its arguments against. A block's threads are 32..1024; the
// region and the ring are at most 4 GiB, the engine's regions' bound (32-bit lengths).
inline constexpr uint32_t kPlainPassMaxThreads = 1024;
inline constexpr uint32_t kPlainPassMaxBlocks = 4096;
inline constexpr uint64_t kPlainPassMaxBytes = uint64_t(1) << 32;
inline constexpr int kPlainPassMaxRepeats = 1000;

// The engine's own per-packet pass with no batch, no commit and no ordering: the floor of
// the frames stream's step by the same SMs. `packets` go into a device-memory ring of
// `slot_bytes`-byte slots (packet k in slot k, as the rx ring holds them), and `blocks`
// blocks of `threads` threads take them, thread g packets g, g + blocks * threads, ...
// Per packet: decode (rt::decode), the header checks (a WRITE Only, with or without
// immediate, with a RETH; dest QP, rkey and the VA range as `target` says; payload within
// the DMA length), then one pass over the payload that checks the ICRC and stores it at
// its VA in a device region of target.region_bytes (icrc_place, the stream step's own).
// A packet with a bad ICRC has been stored too, as classify stores it before the commit
// knows. One warm-up launch, then the best of `repeats`; every launch must count the same.
PlainPassResult plain_pass(const std::vector<std::string>& packets, uint32_t slot_bytes,
                           uint32_t blocks, uint32_t threads, const PlainPassTarget& target,
                           int repeats);

namespace detail {
// Shared by every floor and build, so all reject the same inputs and name
// what was outstanding in the same words.

// Throw std::invalid_argument naming the floor, the value and the limit.
void check_iterations(const char* floor, int64_t iterations);
void check_timeout(const char* floor, double timeout_s);
void check_message_size(const char* floor, size_t size);
// All of plain_pass's arguments, before anything touches CUDA.
void check_plain_pass(const std::vector<std::string>& packets, uint32_t slot_bytes, uint32_t blocks,
                      uint32_t threads, const PlainPassTarget& target, int repeats);

// Round trip `seq` (1-based, counting the warm-up) as a person counts it:
// "warm-up iteration 7 of 1000" or "iteration 1234 of 10000".
std::string iteration_name(uint64_t seq, int64_t iterations);
// "2 s", "0.25 s".
std::string seconds_text(double seconds);
}  // namespace detail

}  // namespace rt::bench
