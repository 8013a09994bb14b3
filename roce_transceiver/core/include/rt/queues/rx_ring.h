// Inbound ring (GPUNetIO Ethernet rx shape): packet slots plus descriptors
// with an owner/phase bit, filled by a producer (the NIC, or the host for
// messages to transmit) and consumed by the engine.
//
// Ownership. The producer owns its producer index (private) and writes slot
// then descriptor, the descriptor's status last with release. The engine owns
// its consumer index (private) and `released`, the count of slots it has given
// back. A slot is written again only after the engine released it: a full
// ring makes the producer drop (and count) the packet, never overwrite.
#pragma once

#include "rt/platform.h"

namespace rt {

struct RxDesc {
  uint32_t len;           // bytes in the slot; written by the producer
  uint32_t status;        // bit 0: phase (wrap parity + 1); published last, with release
  uint64_t timestamp_ns;  // producer's clock when the packet was placed
};
static_assert(sizeof(RxDesc) == 16, "descriptors are 16 bytes");

constexpr uint32_t kRxPhaseBit = 1u;

struct RxRing {
  uint8_t* slots;      // depth x slot_bytes
  RxDesc* descs;       // depth descriptors, zeroed at start
  uint32_t* released;  // written by the engine (release), read by the producer (acquire)
  uint32_t log2_depth;
  uint32_t slot_bytes;

  RT_HD uint32_t depth() const { return 1u << log2_depth; }
  RT_HD uint32_t mask() const { return depth() - 1; }
  RT_HD uint8_t* slot(uint32_t index) const { return slots + size_t(index & mask()) * slot_bytes; }
  // The phase a descriptor carries once the producer filled it for `index`:
  // 1 on the first pass, 0 on the second... so zeroed memory reads as empty.
  RT_HD uint32_t phase(uint32_t index) const { return ((index >> log2_depth) & 1u) ^ 1u; }
};

enum class ProduceResult : uint8_t { kOk, kFull, kTooLong };

// Producer, in two steps for a producer that builds the packet in place:
// the slot at its private index `prod`, or nullptr while the engine still owns
// it (the ring is full)...
template <Scope S>
RT_HD inline uint8_t* rx_reserve(const RxRing& r, uint32_t prod) {
  return prod - load_acquire<S>(r.released) < r.depth() ? r.slot(prod) : nullptr;
}

// ...then publish it: descriptor fields, the status (phase) last, with release.
template <Scope S>
RT_HD inline void rx_publish(const RxRing& r, uint32_t& prod, uint32_t len, uint64_t timestamp_ns) {
  RxDesc& d = r.descs[prod & r.mask()];
  d.len = len;
  d.timestamp_ns = timestamp_ns;
  store_release<S>(&d.status, r.phase(prod));
  ++prod;
}

// Or several at once: each slot's descriptor fields written (rx_describe), then the
// statuses of the n slots from `prod` on behind one fence (rx_publish_run).
RT_HD inline void rx_describe(const RxRing& r, uint32_t prod, uint32_t len, uint64_t timestamp_ns) {
  RxDesc& d = r.descs[prod & r.mask()];
  d.len = len;
  d.timestamp_ns = timestamp_ns;
}

template <Scope S>
RT_HD inline void rx_publish_run(const RxRing& r, uint32_t& prod, uint32_t n) {
  fence_release<S>();
  for (uint32_t i = 0; i < n; ++i, ++prod)
    store_relaxed<S>(&r.descs[prod & r.mask()].status, r.phase(prod));
}

// Producer: copy one packet in at its private index `prod`, advancing it.
template <Scope S>
RT_HD inline ProduceResult rx_produce(const RxRing& r, uint32_t& prod, const uint8_t* data,
                                      uint32_t len, uint64_t timestamp_ns) {
  if (len > r.slot_bytes) return ProduceResult::kTooLong;
  uint8_t* dst = rx_reserve<S>(r, prod);
  if (!dst) return ProduceResult::kFull;
  for (uint32_t i = 0; i < len; ++i) dst[i] = data[i];
  rx_publish<S>(r, prod, len, timestamp_ns);
  return ProduceResult::kOk;
}

// Engine: the descriptor at consumer index `ci` if the producer has filled it.
template <Scope S>
RT_HD inline const RxDesc* rx_poll(const RxRing& r, uint32_t ci) {
  const RxDesc& d = r.descs[ci & r.mask()];
  return (load_acquire<S>(&d.status) & kRxPhaseBit) == r.phase(ci) ? &d : nullptr;
}

// Engine: give every slot before `upto` back to the producer.
template <Scope S>
RT_HD inline void rx_release(const RxRing& r, uint32_t upto) {
  store_release<S>(r.released, upto);
}

}  // namespace rt
