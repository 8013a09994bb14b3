// The host-only floor (two CPU threads), the argument checks and wording every
// floor shares, and, in builds without CUDA, stand-ins for the GPU floors.
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>

#include "rt/bench/floors.h"
#include "rt/bench/host_spin.h"
#include "rt/bench/op_costs.h"

namespace rt::bench {

namespace detail {

void check_iterations(const char* floor, int64_t iterations) {
  if (iterations < 1 || iterations > kFloorMaxIterations)
    throw std::invalid_argument(std::string(floor) + ": iterations=" + std::to_string(iterations) +
                                ": must be between 1 and " + std::to_string(kFloorMaxIterations));
}

void check_timeout(const char* floor, double timeout_s) {
  // An hour bounds the conversion to clock ticks; no floor needs more.
  if (!std::isfinite(timeout_s) || timeout_s <= 0 || timeout_s > 3600)
    throw std::invalid_argument(std::string(floor) + ": timeout_s=" + seconds_text(timeout_s) +
                                ": must be more than 0 and at most 3600 s");
}

void check_message_size(const char* floor, size_t size) {
  if (size < 1 || size > kFloorMaxMessageBytes)
    throw std::invalid_argument(std::string(floor) + ": size=" + std::to_string(size) +
                                ": must be between 1 and " + std::to_string(kFloorMaxMessageBytes) +
                                " bytes");
}

void check_plain_pass(const std::vector<std::string>& packets, uint32_t slot_bytes, uint32_t blocks,
                      uint32_t threads, const PlainPassTarget& target, int repeats) {
  const auto bad = [](const std::string& why) {
    throw std::invalid_argument("plain_pass: " + why);
  };
  // 16-byte slots keep the pass's wide loads aligned, as the rx ring's slots are.
  if (slot_bytes < 16 || slot_bytes % 16 != 0)
    bad("slot_bytes=" + std::to_string(slot_bytes) + ": must be a multiple of 16, at least 16");
  if (packets.empty()) bad("no packets");
  if (uint64_t(packets.size()) * slot_bytes > kPlainPassMaxBytes)
    bad(std::to_string(packets.size()) + " packets of " + std::to_string(slot_bytes) +
        "-byte slots: more than " + std::to_string(kPlainPassMaxBytes) + " bytes of ring");
  for (size_t k = 0; k < packets.size(); ++k)
    if (packets[k].empty() || packets[k].size() > slot_bytes)
      bad("packet " + std::to_string(k) + " is " + std::to_string(packets[k].size()) +
          " bytes: must be between 1 and slot_bytes=" + std::to_string(slot_bytes));
  if (blocks < 1 || blocks > kPlainPassMaxBlocks)
    bad("blocks=" + std::to_string(blocks) + ": must be between 1 and " +
        std::to_string(kPlainPassMaxBlocks));
  if (threads < 32 || threads > kPlainPassMaxThreads || threads % 32 != 0)
    bad("threads=" + std::to_string(threads) + ": must be a multiple of 32 between 32 and " +
        std::to_string(kPlainPassMaxThreads));
  if (target.qpn_count < 1 || uint64_t(target.qpn_first) + target.qpn_count > (1u << 24))
    bad("QPs " + std::to_string(target.qpn_first) + " + " + std::to_string(target.qpn_count) +
        ": must be at least one, all below 2^24");
  if (target.region_bytes < 1 || target.region_bytes > kPlainPassMaxBytes ||
      target.region_va > UINT64_MAX - target.region_bytes)
    bad("region_bytes=" + std::to_string(target.region_bytes) +
        " at va=" + std::to_string(target.region_va) + ": must be between 1 and " +
        std::to_string(kPlainPassMaxBytes) + ", not past the end of the address space");
  if (repeats < 1 || repeats > kPlainPassMaxRepeats)
    bad("repeats=" + std::to_string(repeats) + ": must be between 1 and " +
        std::to_string(kPlainPassMaxRepeats));
}

std::string iteration_name(uint64_t seq, int64_t iterations) {
  const uint64_t warmup = uint64_t(kFloorWarmup);
  if (seq <= warmup)
    return "warm-up iteration " + std::to_string(seq) + " of " + std::to_string(warmup);
  return "iteration " + std::to_string(seq - warmup) + " of " + std::to_string(iterations);
}

std::string seconds_text(double seconds) {
  // printf's %g, not a stream: short ("2 s", "0.25 s", "1e-06 s") and no locale.
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g s", seconds);
  return buf;
}

}  // namespace detail

namespace {

// One word per cache line, so the two threads never write the same line and
// a round trip moves exactly two lines between the cores.
struct alignas(64) Word {
  std::atomic<uint32_t> value{0};
};
static_assert(sizeof(Word) == 64, "one word per 64-byte cache line");

struct PingPongWords {
  Word ping;  // written by the initiator (the timing thread), read by the responder
  Word pong;  // written by the responder, read by the initiator
  Word stop;  // written by the initiator on its way out, on every path
};

// Answers ping `seq` with pong `seq` until all `total` are answered, the
// initiator raises stop, or no ping comes for `timeout`.
void respond(PingPongWords& w, uint32_t total, FloorClock::duration timeout) {
  for (uint32_t seq = 1; seq <= total; ++seq) {
    const bool pinged = spin_until(
        [&] {
          return w.ping.value.load(std::memory_order_acquire) == seq ||
                 w.stop.value.load(std::memory_order_relaxed) != 0;
        },
        FloorClock::now(), timeout);
    if (!pinged || w.stop.value.load(std::memory_order_relaxed) != 0) return;
    w.pong.value.store(seq, std::memory_order_release);
  }
}

// Raises stop and joins the responder on every path out of the floor.
class Responder {
 public:
  Responder(PingPongWords& w, uint32_t total, FloorClock::duration timeout)
      : words_(w), thread_(respond, std::ref(w), total, timeout) {}
  ~Responder() {
    words_.stop.value.store(1, std::memory_order_release);
    thread_.join();
  }
  Responder(const Responder&) = delete;
  Responder& operator=(const Responder&) = delete;

 private:
  PingPongWords& words_;
  std::thread thread_;
};

}  // namespace

std::vector<double> cpu_thread_pingpong(int64_t iterations, double timeout_s) {
  constexpr const char* kFloor = "cpu_thread_pingpong";
  detail::check_iterations(kFloor, iterations);
  detail::check_timeout(kFloor, timeout_s);
  const uint32_t total = uint32_t(kFloorWarmup + iterations);
  const FloorClock::duration timeout = to_duration(timeout_s);

  std::vector<double> samples;
  samples.reserve(size_t(iterations));
  PingPongWords words;
  Responder responder(words, total, timeout);
  for (uint32_t seq = 1; seq <= total; ++seq) {
    const auto t0 = FloorClock::now();
    words.ping.value.store(seq, std::memory_order_release);
    const bool answered = spin_until(
        [&] { return words.pong.value.load(std::memory_order_acquire) == seq; }, t0, timeout);
    const auto t1 = FloorClock::now();
    if (!answered)
      throw std::runtime_error(std::string(kFloor) + ": responder thread did not answer " +
                               detail::iteration_name(seq, iterations) + " within " +
                               detail::seconds_text(timeout_s));
    if (seq > uint32_t(kFloorWarmup)) samples.push_back(elapsed_ns(t0, t1));
  }
  return samples;
}

#if !defined(RT_WITH_CUDA)

namespace {
[[noreturn]] void no_cuda(const char* floor) {
  throw std::runtime_error(std::string(floor) +
                           ": this build has no CUDA support (built without nvcc, or RT_CUDA=OFF)");
}
}  // namespace

// The same argument checks as the CUDA build, then the reason there is no figure.
std::vector<double> pinned_pingpong(int64_t iterations, double timeout_s) {
  detail::check_iterations("pinned_pingpong", iterations);
  detail::check_timeout("pinned_pingpong", timeout_s);
  no_cuda("pinned_pingpong");
}

std::vector<double> device_block_pingpong(int64_t iterations, double timeout_s) {
  detail::check_iterations("device_block_pingpong", iterations);
  detail::check_timeout("device_block_pingpong", timeout_s);
  no_cuda("device_block_pingpong");
}

std::vector<double> launch_per_message(int64_t iterations, size_t size, bool graph) {
  const char* floor = graph ? "launch_per_message(graph)" : "launch_per_message";
  detail::check_iterations(floor, iterations);
  detail::check_message_size(floor, size);
  no_cuda(floor);
}

PlainPassResult plain_pass(const std::vector<std::string>& packets, uint32_t slot_bytes,
                           uint32_t blocks, uint32_t threads, const PlainPassTarget& target,
                           int repeats) {
  detail::check_plain_pass(packets, slot_bytes, blocks, threads, target, repeats);
  no_cuda("plain_pass");
}

OpCosts device_op_costs(const std::vector<uint8_t>&, int) { no_cuda("device_op_costs"); }

#endif  // !RT_WITH_CUDA

}  // namespace rt::bench
