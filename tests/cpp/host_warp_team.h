// A warp on the host, for tests: a team (rt/team.h) of 32 lanes, each a
// std::thread, with WarpTeam's interface, so the team-wide code the CUDA
// executor runs (icrc_team, crc32_team, the express path, engine_step) can run
// and be compared with SoloTeam where there is no GPU.
//
// Every team-wide call is a rendezvous of all 32 lanes, in two phases: each
// lane posts its value and the name of the call, all wait, each reads what it
// needs, all wait again (so the slots can be reused). A lane that makes a
// different call from the others (divergent team-wide code, undefined
// behaviour on a real warp) is reported with both calls and aborts the test;
// a lane that never arrives makes the others give up after kStuckSeconds.
//
// What this cannot show: the device-only leaf code (icrc_team's funnel-shift
// loads, __ldcv, shared memory) and timing; lanes run truly concurrently, so
// a missing sync() shows up as a data race (build with -fsanitize=thread).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

namespace rt_test {

// Threads meeting: each wait() returns once `threads` have called it, and what each wrote
// before it every other sees after it (the mutex). One that never comes makes the others
// give up after kStuckSeconds, naming where they waited.
class Barrier {
 public:
  static constexpr int kStuckSeconds = 30;

  explicit Barrier(uint32_t threads) : threads_(threads) {}

  void wait(uint32_t id, const char* what) {
    std::unique_lock<std::mutex> lock(mutex_);
    const uint64_t gen = generation_;
    if (++arrived_ == threads_) {
      arrived_ = 0;
      ++generation_;
      cv_.notify_all();
      return;
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(kStuckSeconds);
    if (!cv_.wait_until(lock, deadline, [&] { return generation_ != gen; })) {
      std::fprintf(stderr,
                   "stuck: thread %u waited %d s in %s at rendezvous %llu, %u of %u threads "
                   "arrived (one skipped a team-wide call)\n",
                   id, kStuckSeconds, what, static_cast<unsigned long long>(gen), arrived_,
                   threads_);
      std::abort();
    }
  }

  uint64_t generation() const { return generation_; }

 private:
  const uint32_t threads_;
  std::mutex mutex_;
  std::condition_variable cv_;
  uint32_t arrived_ = 0;
  uint64_t generation_ = 0;
};

class HostWarp {
 public:
  static constexpr uint32_t kLanes = 32;
  // Run body(team) on 32 threads, one HostWarpTeam each; returns when all end.
  template <class Body>
  void run(Body body);

  // One rendezvous: lane `lane` posts (what, v); returns every lane's value.
  const uint64_t* exchange(uint32_t lane, const char* what, uint64_t v) {
    values_[lane] = v;
    calls_[lane] = what;
    wait(lane, what);
    for (uint32_t i = 0; i < kLanes; ++i) {
      if (std::strcmp(calls_[i], calls_[0]) != 0) {
        std::fprintf(stderr, "divergent team: lane %u called %s while lane 0 called %s\n", i,
                     calls_[i], calls_[0]);
        std::abort();
      }
    }
    return values_;
  }
  // The second half of a rendezvous: every lane has read the slots.
  void done(uint32_t lane, const char* what) { wait(lane, what); }

  uint64_t rendezvous() const { return barrier_.generation(); }

 private:
  void wait(uint32_t lane, const char* what) { barrier_.wait(lane, what); }

  Barrier barrier_{kLanes};
  uint64_t values_[kLanes] = {};
  const char* calls_[kLanes] = {};
};

// WarpTeam's interface (rt/team.h), lane by lane: the same overloads, so code
// that would not compile for the warp does not compile here either.
struct HostWarpTeam {
  static constexpr uint32_t kLanes = HostWarp::kLanes;
  HostWarp* warp;
  uint32_t id;

  uint32_t lane() const { return id; }
  uint32_t size() const { return kLanes; }
  bool leader() const { return id == 0; }
  bool any(bool b) const {
    const uint64_t* v = warp->exchange(id, "any", b);
    bool r = false;
    for (uint32_t i = 0; i < kLanes; ++i) r = r || v[i] != 0;
    warp->done(id, "any");
    return r;
  }
  uint32_t ballot(bool b) const {
    const uint64_t* v = warp->exchange(id, "ballot", b);
    uint32_t r = 0;
    for (uint32_t i = 0; i < kLanes; ++i) r |= uint32_t(v[i] != 0) << i;
    warp->done(id, "ballot");
    return r;
  }
  uint32_t xor_all(uint32_t x) const {
    const uint64_t* v = warp->exchange(id, "xor_all", x);
    uint32_t r = 0;
    for (uint32_t i = 0; i < kLanes; ++i) r ^= uint32_t(v[i]);
    warp->done(id, "xor_all");
    return r;
  }
  uint32_t from_leader(uint32_t x) const {
    const uint32_t r = uint32_t(warp->exchange(id, "from_leader(uint32_t)", x)[0]);
    warp->done(id, "from_leader(uint32_t)");
    return r;
  }
  uint64_t from_leader(uint64_t x) const {
    const uint64_t r = warp->exchange(id, "from_leader(uint64_t)", x)[0];
    warp->done(id, "from_leader(uint64_t)");
    return r;
  }
  uint32_t from_lane(uint32_t x, uint32_t src) const {
    const uint32_t r = uint32_t(warp->exchange(id, "from_lane", x)[src]);
    warp->done(id, "from_lane");
    return r;
  }
  // Orders memory as __syncwarp() does: the mutex of the rendezvous makes what
  // a lane wrote before it visible to every lane after it.
  void sync() const {
    warp->exchange(id, "sync", 0);
    warp->done(id, "sync");
  }
};

template <class Body>
void HostWarp::run(Body body) {
  std::vector<std::thread> lanes;
  lanes.reserve(kLanes);
  for (uint32_t i = 0; i < kLanes; ++i)
    lanes.emplace_back([this, i, &body] { body(HostWarpTeam{this, i}); });
  for (auto& t : lanes) t.join();
}

}  // namespace rt_test
