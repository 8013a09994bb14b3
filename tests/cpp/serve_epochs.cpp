// Verbs mode's serve loop cut into epochs, on the host (tests/test_serve_epochs.py): the loop's
// progress carried from one serve_pass() to the next, as the GPU's serve kernel carries it in
// device memory between launches. A peer in this driver lands echo requests in the ring (at most
// `slots` outstanding, its credit being our replies) and bumps the signal word; a fake queue
// pair records every put_signal and completes each one a few polls later. Every epoch ends at
// once (until = now), so each pass serves what has landed and returns.
//
// Prints one line: "ok <requests> <epochs>" when every reply is its request, in order, and the
// loop ended as it must (done, or stopped with every reply completed); else what differs, and
// exits 1.
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "rt/verbs/serve_loop.h"

namespace {

using rt::verbs::PutSignal;

constexpr uint32_t kSlots = 4;
constexpr uint32_t kSlotBytes = 64;
constexpr uint64_t kStagingAddr = 0x7000'0000;

// Completes ticket t after `delay` polls of it; records each reply's bytes from the staging.
struct FakeQp {
  const uint8_t* staging = nullptr;
  uint32_t delay = 3;
  uint64_t next_ticket = 0;
  std::vector<uint32_t> polls_left;  // by ticket
  std::vector<std::vector<uint8_t>> replies;

  uint64_t put_signal(const PutSignal& p) {
    const uint8_t* src = staging + (p.laddr - kStagingAddr);
    replies.emplace_back(src, src + p.bytes);
    polls_left.push_back(delay);
    return next_ticket++;
  }
  int poll(uint64_t ticket) {
    if (ticket >= polls_left.size()) return EINVAL;
    if (polls_left[ticket] == 0) return 0;
    --polls_left[ticket];
    return EBUSY;
  }
  void idle() {}
};

std::vector<uint8_t> request(uint32_t i) {
  std::vector<uint8_t> b(8 + i % 40);
  for (size_t k = 0; k < b.size(); ++k) b[k] = uint8_t(i * 7 + k);
  return b;
}

bool run(uint32_t requests, bool stop_midway, uint64_t* epochs) {
  std::vector<uint8_t> ring(kSlots * kSlotBytes), staging(kSlots * (kSlotBytes + 8));
  uint64_t signal = 0;
  uint32_t stop = 0;
  rt::verbs::ServeDesc d;
  d.requests = ring.data();
  d.signal = &signal;
  d.slots = kSlots;
  d.slot_bytes = kSlotBytes;
  d.handler.kind = rt::HandlerKind::kEcho;
  d.staging = staging.data();
  d.staging_addr = kStagingAddr;
  d.max_requests = stop_midway ? 0 : requests;
  d.completion_timeout_ns = 1'000'000'000ull;
  rt::verbs::ServeShared shared;
  rt::verbs::ServeProgress p;
  FakeQp qp;
  qp.staging = staging.data();
  uint32_t landed = 0;
  *epochs = 0;
  bool running = true;
  while (running) {
    // The peer: a request lands while fewer than `slots` are unanswered.
    const uint32_t limit = stop_midway ? requests / 2 : requests;
    while (landed < limit && landed - qp.replies.size() < kSlots) {
      const std::vector<uint8_t> r = request(landed);
      uint8_t* slot = ring.data() + (landed % kSlots) * kSlotBytes;
      rt::verbs::slot_store_le32(slot + rt::verbs::kSlotLenOffset, uint32_t(r.size()));
      std::memcpy(slot + rt::verbs::kSlotHeaderBytes, r.data(), r.size());
      __atomic_store_n(&signal, uint64_t(++landed), __ATOMIC_RELEASE);
    }
    if (stop_midway && landed == limit && qp.replies.size() == limit)
      __atomic_store_n(&stop, 1u, __ATOMIC_RELEASE);
    ++*epochs;
    running = rt::verbs::serve_pass(d, qp, p, &shared, &stop, rt::now_ns());
    if (*epochs > 100000) {
      std::printf("no end after %llu epochs\n", static_cast<unsigned long long>(*epochs));
      return false;
    }
  }
  const uint32_t want = stop_midway ? requests / 2 : requests;
  const uint64_t state = stop_midway ? rt::verbs::kServeStopped : rt::verbs::kServeDone;
  if (p.state != state || shared.state != state || p.served != want || p.completed != want ||
      shared.served != want || shared.completed != want || qp.replies.size() != want) {
    std::printf("state %llu served %llu completed %llu replies %zu, want state %llu and %u\n",
                static_cast<unsigned long long>(p.state), static_cast<unsigned long long>(p.served),
                static_cast<unsigned long long>(p.completed), qp.replies.size(),
                static_cast<unsigned long long>(state), want);
    return false;
  }
  for (uint32_t i = 0; i < want; ++i) {
    const std::vector<uint8_t> r = request(i);
    const std::vector<uint8_t>& got = qp.replies[i];
    if (got.size() != 8 + r.size() || rt::verbs::slot_le32(got.data()) != r.size() ||
        rt::verbs::slot_le32(got.data() + 4) != rt::verbs::kReplyOk ||
        std::memcmp(got.data() + 8, r.data(), r.size()) != 0) {
      std::printf("reply %u is not its request's echo\n", i);
      return false;
    }
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  const uint32_t requests = argc > 1 ? uint32_t(std::atoi(argv[1])) : 100;
  const bool stop_midway = argc > 2 && std::strcmp(argv[2], "stop") == 0;
  uint64_t epochs = 0;
  if (!run(requests, stop_midway, &epochs)) return 1;
  std::printf("ok %u %llu\n", stop_midway ? requests / 2 : requests,
              static_cast<unsigned long long>(epochs));
  return 0;
}
