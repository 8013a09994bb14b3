// How a queue's rings sit in its memory (transceiver.cpp lays them out; the loopback wire
// fills an image of them): descriptors, slots, index words, each index on its own line.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

#include "rt/host/transceiver.h"
#include "rt/queues/rx_ring.h"
#include "rt/queues/tx_ring.h"

namespace rt::host::ring_layout {

constexpr uint32_t kLine = 64;  // every shared index on its own cache line

inline uint32_t log2_exact(uint32_t v, const char* key) {
  if (v < 2 || v > (1u << 16) || (v & (v - 1)) != 0)
    throw std::invalid_argument(std::string(key) + "=" + std::to_string(v) +
                                ": must be a power of two from 2 to 65536");
  uint32_t n = 0;
  while ((1u << n) < v) ++n;
  return n;
}

inline size_t round_up(size_t n) { return (n + kLine - 1) / kLine * kLine; }

// Byte offsets of one ring inside a Buffer: descriptors, slots, index words.
using RingLayout = RingOffsets;

inline RingLayout lay_out(size_t at, uint32_t depth, uint32_t slot_bytes) {
  RingLayout l{};
  l.descs = at;
  l.slots = round_up(l.descs + size_t(depth) * 16);
  l.index_a = round_up(l.slots + size_t(depth) * slot_bytes);
  l.index_b = l.index_a + kLine;
  l.end = l.index_b + kLine;
  return l;
}

inline RxRing rx_ring(uint8_t* base, const RingLayout& l, uint32_t log2_depth,
                      uint32_t slot_bytes) {
  return RxRing{base + l.slots, reinterpret_cast<RxDesc*>(base + l.descs),
                reinterpret_cast<uint32_t*>(base + l.index_a), log2_depth, slot_bytes};
}

inline TxRing tx_ring(uint8_t* base, const RingLayout& l, uint32_t log2_depth,
                      uint32_t slot_bytes) {
  return TxRing{base + l.slots,
                reinterpret_cast<TxDesc*>(base + l.descs),
                reinterpret_cast<uint32_t*>(base + l.index_a),
                reinterpret_cast<uint32_t*>(base + l.index_b),
                log2_depth,
                slot_bytes};
}

}  // namespace rt::host::ring_layout
