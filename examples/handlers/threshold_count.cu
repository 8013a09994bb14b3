// A per-frame statistic as a user handler: how many samples of a frame exceed
// a threshold (docs/handlers.md, "Your own handler"). Runs on the cpu executor
// as a message handler (a frame a SEND); check-handler compiles it for the GPU.
//
//   params   2 bytes: the threshold, uint16 little-endian (0 when absent)
//   request  the frame: uint16 samples, little-endian (an odd last byte is ignored)
//   reply    16 bytes, little-endian: uint32 samples above the threshold,
//            uint32 samples in the frame, uint64 frames seen on this queue
//   state    8 bytes (custom.state_bytes >= 8): the frame count, kept by lane 0
//
// The lanes split the samples and add their counts with rt::custom_sum.
#include "rt/handlers/custom.h"

namespace {

RT_HD void put_u32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = uint8_t(v >> (8 * i));
}

}  // namespace

RT_HD int threshold_count(const rt::CustomCall& call) {
  if (call.reply_capacity < 16 || call.state_bytes < 8) return rt::kHandlerError;
  const uint32_t threshold =
      call.params_bytes >= 2 ? uint32_t(call.params[0]) | uint32_t(call.params[1]) << 8 : 0;
  const uint32_t samples = call.request_len / 2;

  uint32_t above = 0;
  for (uint32_t i = call.lane; i < samples; i += call.lanes) {
    const uint32_t s = uint32_t(call.request[2 * i]) | uint32_t(call.request[2 * i + 1]) << 8;
    above += s > threshold ? 1u : 0u;
  }
  above = rt::custom_sum(call, above);

  if (call.lane == 0) {
    uint64_t* frames = reinterpret_cast<uint64_t*>(call.state);  // state is 16-byte aligned
    const uint64_t seen = ++*frames;
    put_u32(call.reply, above);
    put_u32(call.reply + 4, samples);
    put_u32(call.reply + 8, uint32_t(seen));
    put_u32(call.reply + 12, uint32_t(seen >> 32));
  }
  return 16;
}
