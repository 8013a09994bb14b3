// A repetition-code decoder as a user handler: majority vote (docs/handlers.md,
// "Your own handler"). Runs on the cpu executor (configs/custom_handler.yaml);
// `roce-transceiver check-handler` compiles it for the GPU.
//
//   params   the code distance d, odd: 1 byte (1 .. 255; params: [5]), or 4
//            bytes, uint32 little-endian (params: {distance: 5}; at most
//            65535); 3 when absent
//   request  ceil(d / 8) bytes: the d copies' readings, bit i = copy i
//   reply    ceil(d / 8) bytes: the correction, bit i set = flip copy i
//            (the copies that disagree with the majority)
//
// The lanes split the reply's bytes; each counts all the readings itself
// (d bits: cheaper than a reduction), so every lane returns the same length.
#include "rt/handlers/custom.h"

RT_HD int majority_vote(const rt::CustomCall& call) {
  uint32_t d = call.params_bytes >= 1 ? call.params[0] : 3;
  if (call.params_bytes >= 4) {
    d = 0;
    for (int i = 3; i >= 0; --i) d = d << 8 | call.params[i];
  }
  // At most 65535 copies: keeps (d + 7) / 8 from wrapping and the work bounded.
  if (d % 2 == 0 || d > 0xffff) return rt::kHandlerError;
  const uint32_t bytes = (d + 7) / 8;
  if (call.request_len < bytes || call.reply_capacity < bytes) return rt::kHandlerError;

  uint32_t ones = 0;
  for (uint32_t i = 0; i < d; ++i) ones += (call.request[i / 8] >> (i % 8)) & 1u;
  const uint8_t majority = ones > d / 2 ? 0xff : 0x00;

  for (uint32_t b = call.lane; b < bytes; b += call.lanes) {
    const uint32_t valid = d - 8 * b >= 8 ? 8 : d - 8 * b;  // copies in this byte
    const uint8_t mask = uint8_t((1u << valid) - 1u);
    call.reply[b] = uint8_t((call.request[b] ^ majority) & mask);
  }
  return int(bytes);
}
