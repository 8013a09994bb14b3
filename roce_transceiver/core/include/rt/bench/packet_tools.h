// Plain AF_PACKET programs for `bench stream`: what the socket NIC is held
// against. A sender that replays frames as fast as sendmmsg takes them, and a
// receiver that only counts RoCEv2 frames with recvmmsg batches, the way the
// socket NIC receives, without an engine behind it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace rt::bench {

struct PacketCount {
  uint64_t frames = 0;
  uint64_t bytes = 0;
  uint64_t first_ns = 0;  // steady clock at the first and last counted frame
  uint64_t last_ns = 0;
};

// Send `frames` in order, `repeat` times, on `interface`, `batch` at a time.
// Returns what was sent. Throws std::runtime_error naming the failure.
PacketCount packet_blast(const std::string& interface, const std::vector<std::string>& frames,
                         uint64_t repeat, uint32_t batch);

// Count UDP 4791 frames arriving on `fd` (an AF_PACKET socket the caller
// opened and bound, so it is listening before any sender starts) until
// `expect` have come or `timeout_s` has passed since the last one.
PacketCount packet_sink(int fd, uint64_t expect, double timeout_s, uint32_t batch);

// The echo any program could do with a raw socket: each RoCEv2 frame sent
// back with its Ethernet, IP and UDP ends swapped, the BTH addressed to
// `dest_qp`, the ICRC recomputed; nothing else checked. Stops after `count`
// frames or `timeout_s` without one. `fd` as for packet_sink. Returns what it
// reflected.
PacketCount packet_reflect(int fd, uint64_t count, uint32_t dest_qp, double timeout_s);

}  // namespace rt::bench
