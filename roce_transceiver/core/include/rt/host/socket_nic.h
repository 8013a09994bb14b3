// The software NIC: a CPU thread that joins the engine's wire rings to Linux.
//
// It is the far side of the rings, as a ConnectX is in GPUNetIO's Ethernet
// mode with a CPU-assisted doorbell: frames that arrive are produced into the
// rx ring, frames the engine submits to the tx ring are sent. With the cuda
// executor the rings sit in pinned host memory mapped into the GPU, so the
// kernel and this thread meet there; with the cpu executor in host memory.
//
// Two modes (docs/socket_nic.md):
// - packet: an AF_PACKET socket on a named interface carries whole Ethernet
//   frames both ways, so the engine checks the ICRC the peer computed. Needs
//   root or CAP_NET_RAW.
// - udp: a UDP socket on port 4791 for users without root. The kernel owns
//   the Ethernet, IP and UDP headers: received datagrams get those headers
//   rebuilt (IP ID 0, DF, TTL 64, as RoCE NICs send them) before the engine
//   checks the ICRC, and sent frames lose theirs; the socket sends with DF
//   from an unconnected socket, which makes Linux put ID 0, so the ICRC the
//   engine computed matches what goes out.
// Frames move in batches, never a syscall per packet. Packet mode receives from a
// ring it shares with the kernel (PACKET_MMAP, TPACKET_V3: blocks of frames the kernel
// fills and hands over whole, no syscall while traffic flows), or with recvmmsg where the
// ring cannot be set up or is not wanted (socket.rx_path); udp mode with recvmmsg; both
// send with sendmmsg.
// With several queues the NIC steers each frame to its queue's rx ring
// (queues/steering.h) and sends what every queue's tx ring holds.
// What is not ours (another ethertype, protocol, port or QP; our own frames
// seen again) is counted and dropped before the engine sees it, and so is
// what the kernel dropped because the socket's receive buffer was full
// (packet mode: PACKET_STATISTICS; udp mode: SO_RXQ_OVFL and SO_MEMINFO).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "rt/engine/counters.h"
#include "rt/host/nic_queue.h"
#include "rt/protocol/encode.h"
#include "rt/queues/rx_ring.h"
#include "rt/queues/steering.h"
#include "rt/queues/tx_ring.h"

namespace rt::host {

struct SocketNicConfig {
  std::string mode = "packet";  // "packet" | "udp"
  std::string interface;        // packet mode: the interface to bind
  std::string capture;          // pcap file of every frame in and out; empty: none
  uint32_t batch = 32;          // frames per recvmmsg / sendmmsg, per pass over the ring
  // packet mode's receive path: "auto" (the ring, else recvmmsg, saying why), "mmap" (the
  // ring or an error), "recvmmsg". udp mode takes "auto" or "recvmmsg".
  std::string rx_path = "auto";
  std::string rx_path_reason;  // why that path (config.py's rule for socket.rx_path), for info()
  // Our addresses (src_*) and the peer's (dst_*), as in our replies; udp mode
  // rebuilds received headers from them and sends to dst_ip.
  FrameSpec addresses;
};

struct SocketNicStats {
  uint64_t rx_frames = 0;  // handed to the engine
  uint64_t rx_bytes = 0;
  uint64_t tx_frames = 0;  // sent
  uint64_t tx_bytes = 0;
  uint64_t filtered = 0;        // not ours: dropped before the engine
  uint64_t too_long = 0;        // a part of filtered: longer than an rx slot (queues.slot_bytes)
  uint64_t rx_ring_full = 0;    // ours, dropped: the engine's rx ring was full
  uint64_t tx_errors = 0;       // frames the kernel refused to send
  uint64_t kernel_drops = 0;    // frames the kernel dropped before we read them (buffer full)
  uint64_t capture_errors = 0;  // frames the capture lost to a write error (pcap_file.h)
};

// What the NIC was given, and how its capture fares.
struct SocketNicInfo {
  uint64_t rx_buffer_bytes = 0;  // the socket's receive buffer as the kernel granted it
  uint64_t rx_buffer_asked = 0;  // what we asked for (the kernel doubles what it grants)
  std::string capture_error;     // the capture's first write error; empty while it is whole
  std::string rx_path;           // how frames are received: "mmap" or "recvmmsg"
  std::string rx_path_reason;    // why (the configuration's choice)
  std::string rx_fallback;       // rx_path "auto" that could not have the ring: why; else empty
  uint64_t rx_ring_bytes = 0;    // mmap: the ring (rx_ring_blocks x rx_ring_block_bytes)
  uint64_t rx_ring_block_bytes = 0;
  uint32_t rx_ring_blocks = 0;
  uint32_t rx_ring_block_timeout_ms = 0;  // a block the kernel has begun is ours after this
  uint64_t rx_ring_freezes = 0;  // times the kernel found no free block (its drops: kernel_drops)
};

class SocketNic {
 public:
  // Opens the sockets and the capture file; throws std::runtime_error naming
  // what failed (permission, interface, address in use...). Frames for a QP no
  // queue serves are filtered; the others go to the queue `steering` picks.
  SocketNic(const SocketNicConfig& config, const Steering& steering, std::vector<NicQueue> queues);
  ~SocketNic();
  SocketNic(const SocketNic&) = delete;
  SocketNic& operator=(const SocketNic&) = delete;

  void start();
  // Joins the thread and closes the capture. Idempotent; throws what the
  // thread failed with, if it did (a capture error is not a failure: info() has it).
  void stop();
  SocketNicStats stats() const;
  SocketNicInfo info() const;
  // What the thread failed with while running; empty while it is fine.
  std::string error() const;
  const SocketNicConfig& config() const { return cfg_; }

 private:
  struct Impl;
  SocketNicConfig cfg_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace rt::host
