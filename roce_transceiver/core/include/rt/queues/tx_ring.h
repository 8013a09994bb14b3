// Outbound ring (GPUNetIO Ethernet tx shape): the engine reserves a slot,
// prepares the packet in it, and submits by writing the producer index (the
// doorbell). The consumer (the NIC, or the host reading completions) drains
// and publishes its consumer index. Also used for engine -> host completions.
//
// Ownership. `producer` is written only by the engine (release) and read by
// the consumer (acquire); `consumer` the other way round.
#pragma once

#include "rt/platform.h"

namespace rt {

struct TxDesc {
  uint32_t len;           // bytes in the slot
  uint32_t flags;         // meaning set by the ring's user
  uint64_t timestamp_ns;  // engine's clock at submit (express replies: the request's arrival)
};
static_assert(sizeof(TxDesc) == 16, "descriptors are 16 bytes");

struct TxRing {
  uint8_t* slots;
  TxDesc* descs;
  uint32_t* producer;  // the doorbell: written by the engine
  uint32_t* consumer;  // written by the consumer
  uint32_t log2_depth;
  uint32_t slot_bytes;

  RT_HD uint32_t depth() const { return 1u << log2_depth; }
  RT_HD uint32_t mask() const { return depth() - 1; }
  RT_HD uint8_t* slot(uint32_t index) const { return slots + size_t(index & mask()) * slot_bytes; }
};

// Engine: the slot for private producer index `pi`, or nullptr when the
// consumer has not drained enough (the caller counts the drop). `seen` is the
// producer's last reading of the consumer index: it is read again only when
// the ring looks full, so a reserve usually costs no trip across the bus.
template <Scope S>
RT_HD inline uint8_t* tx_reserve(const TxRing& r, uint32_t pi, uint32_t& seen) {
  if (pi - seen >= r.depth()) {
    seen = load_acquire<S>(r.consumer);
    if (pi - seen >= r.depth()) return nullptr;
  }
  return r.slot(pi);
}

// Engine: the descriptor of the slot at `pi` (prepared in place), without the
// doorbell: one doorbell (tx_doorbell, or the next tx_submit) then publishes
// several slots (a reply and its RC ACK; the host's completion records).
RT_HD inline void tx_prepare(const TxRing& r, uint32_t& pi, uint32_t len, uint32_t flags,
                             uint64_t timestamp_ns) {
  TxDesc& d = r.descs[pi & r.mask()];
  d.len = len;
  d.flags = flags;
  d.timestamp_ns = timestamp_ns;
  ++pi;
}

// Engine: every slot before `pi` is the consumer's (their descriptors written first).
template <Scope S>
RT_HD inline void tx_doorbell(const TxRing& r, uint32_t pi) {
  store_release<S>(r.producer, pi);
}

// Engine: publish the slot at `pi` (prepared in place) and ring the doorbell.
template <Scope S>
RT_HD inline void tx_submit(const TxRing& r, uint32_t& pi, uint32_t len, uint32_t flags,
                            uint64_t timestamp_ns) {
  tx_prepare(r, pi, len, flags, timestamp_ns);
  tx_doorbell<S>(r, pi);
}

// Consumer: the descriptor at private index `ci`, or nullptr when nothing new.
template <Scope S>
RT_HD inline const TxDesc* tx_poll(const TxRing& r, uint32_t ci) {
  return load_acquire<S>(r.producer) != ci ? &r.descs[ci & r.mask()] : nullptr;
}

// Consumer: everything before `upto` is drained.
template <Scope S>
RT_HD inline void tx_consume(const TxRing& r, uint32_t upto) {
  store_release<S>(r.consumer, upto);
}

}  // namespace rt
