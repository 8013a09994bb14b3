// Where one pass of the engine spends its time on the GPU, piece by piece.
//
// One warp on one SM times each piece of the data path in SM cycles (clock64):
// decode, the ICRC by one thread and by the warp, encode, the echo handler,
// the memory operations the loop uses (release / acquire at each scope, in
// device and in pinned memory), and whole engine_step() calls on rings in
// device memory. A round trip of the cuda executor is read against these
// (docs/performance.md), so optimisation goes where the cycles are.
//
// Plain C++ for the bindings; a build without CUDA links a stand-in that
// throws "this build has no CUDA support".
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace rt::bench {

struct OpCost {
  std::string name;
  double min_cycles;
  double median_cycles;
};

struct OpCosts {
  std::vector<OpCost> ops;
  double sm_ghz;  // cycles per ns of the SM that measured, against %globaltimer
  // Requests the express-path steps (3 x repeats: two runs of engine_step, one in place)
  // actually took that way:
  // fewer means those rows timed the general path.
  uint64_t express_taken;
};

// `request` is a valid RoCEv2 SEND (Only) frame addressed to the engine; the
// engine under test is built from it (its QP, transport and PSN) with the echo
// handler. Each piece runs `repeats` times (1 to 64) after a warm-up.
// Throws std::invalid_argument for a frame that does not decode or is over
// 2048 bytes, std::runtime_error when CUDA fails.
OpCosts device_op_costs(const std::vector<uint8_t>& request, int repeats);

}  // namespace rt::bench
