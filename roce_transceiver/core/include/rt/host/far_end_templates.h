// The loopback far end's templates (engine/far_end.h), built by the host before a run:
// each request frame and the reply it must get, encoded once with zeros where the PSN
// and the request number go, and the tables that patch their ICRCs.
#pragma once

#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "rt/engine/far_end.h"
#include "rt/queues/copy_wide.h"

namespace rt::host {

// Frames of one length, 16 bytes apart rounded up, in 16-byte aligned memory.
struct TemplateSet {
  std::vector<Chunk16> bytes;
  uint32_t count = 0;
  uint32_t len = 0;
  uint32_t stride = 0;
  uint32_t payload_at = 0;
  uint32_t payload_len = 0;
  uint32_t psn_at = 0;
  uint32_t seq_at = kNoSeq;
  const uint8_t* frame(uint32_t i) const {
    return reinterpret_cast<const uint8_t*>(bytes.data()) + size_t(i) * stride;
  }
  size_t size_bytes() const { return size_t(count) * stride; }
  // The device view, its frames at `at` (a copy of bytes), its table at `delta`.
  FrameTemplates view(const uint8_t* at, const uint32_t* delta) const {
    return FrameTemplates{
        at, count, len, stride, payload_at, payload_len, FramePatch{psn_at, seq_at, delta}};
  }
};

// `num` frames of `spec` with PSN 0, payload i the i-th `payload_len` bytes of `payloads`,
// the request number's 4 bytes at the payload's start zeroed when `seq`.
inline TemplateSet encode_templates(const FrameSpec& spec, const uint8_t* payloads,
                                    uint32_t payload_len, uint32_t num, bool seq,
                                    const char* what) {
  FrameSpec s = spec;
  s.psn = 0;
  TemplateSet t;
  t.count = num;
  t.len = encoded_size(s, payload_len);
  t.stride = (t.len + 15) / 16 * 16;
  t.payload_at = payload_offset(s);
  t.payload_len = payload_len;
  t.psn_at = t.payload_at - opcode_info(s.opcode).ext_bytes() - uint32_t(sizeof(Bth)) + 9;
  t.seq_at = seq ? t.payload_at : kNoSeq;
  t.bytes.assign(t.size_bytes() / 16, Chunk16{0, 0});
  std::vector<uint8_t> payload(payload_len);
  for (uint32_t i = 0; i < num; ++i) {
    std::memcpy(payload.data(), payloads + size_t(i) * payload_len, payload_len);
    if (seq) std::memset(payload.data(), 0, 4);
    auto* out = reinterpret_cast<uint8_t*>(t.bytes.data()) + size_t(i) * t.stride;
    const EncodeResult e =
        encode(s, ByteSpan(payload.data(), payload_len), MutByteSpan(out, t.stride));
    if (!e.ok() || e.len != t.len)
      throw std::invalid_argument(std::string("far end: the ") + what + " " + std::to_string(i) +
                                  " does not encode (" + (e.field ? e.field : "?") + ")");
  }
  return t;
}

// The table far_end.h's patch_delta() reads for frames like t's: for each patch byte and
// value, what writing it into a template does to the ICRC (linear in the byte, so eight
// frames a byte, the rest by XOR).
inline std::vector<uint32_t> icrc_deltas(const TemplateSet& t) {
  std::vector<uint32_t> table(size_t(kPatchBytes) * 256, 0);
  const uint32_t positions[kPatchBytes] = {t.psn_at,     t.psn_at + 1, t.psn_at + 2, t.seq_at,
                                           t.seq_at + 1, t.seq_at + 2, t.seq_at + 3};
  const uint32_t base = icrc_compute(decode(ByteSpan(t.frame(0), t.len)).frame);
  std::vector<uint8_t> f(t.frame(0), t.frame(0) + t.len);
  for (uint32_t k = 0; k < kPatchBytes; ++k) {
    if (t.seq_at == kNoSeq && k >= 3) break;
    uint32_t bit_delta[8];
    for (uint32_t b = 0; b < 8; ++b) {
      const uint8_t was = f[positions[k]];
      f[positions[k]] = uint8_t(1u << b);
      const DecodeResult r = decode(ByteSpan(f.data(), t.len));
      if (!r.ok()) throw std::logic_error("far end: a patched template does not decode");
      bit_delta[b] = icrc_compute(r.frame) ^ base;
      f[positions[k]] = was;
    }
    for (uint32_t v = 0; v < 256; ++v)
      for (uint32_t b = 0; b < 8; ++b)
        if (v & (1u << b)) table[k * 256 + v] ^= bit_delta[b];
  }
  return table;
}

}  // namespace rt::host
