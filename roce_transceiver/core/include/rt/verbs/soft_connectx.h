// The software ConnectX: a CPU-side NIC behind GPUNetIO's verbs device API, in CPU-proxy
// mode. The device writes mlx5 WQEs into a send ring and stores the producer index in a
// doorbell word; this class reads the WQEs the doorbell covers, carries each out as RC
// RoCEv2 packets built by the protocol core, takes the peer's ACKs, NAKs and atomic
// acknowledgements, and writes one CQE per WQE, in order, with the owner bit the device's
// poller expects (docs/verbs_mode.md).
//
// It is single-threaded: one thread calls poll() and on_frame(). Memory it reads or writes
// for the device (rings, doorbell, CQEs, local buffers) is given to it; it owns none.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "rt/protocol/encode.h"
#include "rt/verbs/work_request.h"

namespace rt::verbs {

struct SoftConnectXConfig {
  uint32_t qpn = 0x100;
  uint32_t peer_qpn = 0x200;
  uint32_t sq_psn = 0;        // first PSN we send
  uint32_t mtu = 1024;        // payload bytes per packet
  uint32_t sq_wqe_num = 256;  // a power of two, at most 32768
  uint32_t cqe_num = 256;     // a power of two, at least sq_wqe_num
  FrameSpec addressing;       // MACs, IPs, UDP source port, VLAN, P_Key of our packets
  uint64_t retransmit_ns = 2'000'000;
  uint32_t retries = 7;  // then the WQE completes with "retry exceeded"
};

// The memory the device and the NIC share. `*_device` are the addresses the device uses
// for the same bytes (equal to the host pointers for host memory read by the CPU alone).
struct SoftConnectXMemory {
  uint8_t* sq = nullptr;               // sq_wqe_num x 64 bytes
  uint8_t* cq = nullptr;               // cqe_num x 64 bytes
  const uint64_t* doorbell = nullptr;  // the producer index the device stores (native order)
  uint64_t sq_device = 0, cq_device = 0, doorbell_device = 0;
};

struct SoftConnectXStats {
  uint64_t wqes = 0;         // WQEs read
  uint64_t completions = 0;  // CQEs written
  uint64_t errors = 0;       // of them, error CQEs
  uint64_t packets = 0;      // packets sent, retransmissions included
  uint64_t retransmits = 0;
  uint64_t acks = 0;  // ACKs and atomic acknowledgements taken
  uint64_t naks = 0;
  uint64_t stale_waits = 0;  // polls that found a WQE the doorbell covers not yet written
  uint64_t ignored = 0;      // frames not for this QP, or not responses
};

class SoftConnectX {
 public:
  using Emit = std::function<void(const uint8_t*, size_t)>;

  SoftConnectX(const SoftConnectXConfig& cfg, const SoftConnectXMemory& mem);

  // A memory region the WQEs name by key: `addr` in a WQE is `iova`-based (NCCL's are
  // zero-based offsets; host buffers use their address as iova). Local keys only.
  void add_region(uint32_t key, uint8_t* base, uint64_t iova, uint64_t length);

  // The device descriptor (struct doca_gpu_dev_verbs_qp) for this QP, CPU proxy: `out` has
  // descriptor_bytes(); throws in a build without GPUNetIO's headers (descriptor.h).
  void fill_descriptor(uint8_t* out, size_t out_bytes) const;

  // WQEs the doorbell covers become packets (handed to `emit`); unacknowledged packets past
  // their deadline are sent again. Returns the WQEs read.
  size_t poll(const Emit& emit, uint64_t now_ns);

  // A frame from the peer: ACKs complete WQEs, NAKs fail or resend them. False: not ours.
  bool on_frame(const uint8_t* frame, size_t len, const Emit& emit, uint64_t now_ns);

  const SoftConnectXStats& stats() const { return stats_; }
  uint64_t consumed() const { return consumed_; }
  uint64_t completed() const { return completed_; }
  bool in_error() const { return error_; }
  const std::string& last_error() const { return last_error_; }

 private:
  struct InFlight {
    uint64_t index = 0;  // 64-bit WQE index
    WorkRequest wr;
    uint32_t first_psn = 0, last_psn = 0;
    bool remote = false;  // waits for the peer's acknowledgement
    bool done = false;
    uint8_t syndrome = 0;  // non-zero: completes in error
    uint32_t byte_cnt = 0;
    std::vector<std::vector<uint8_t>> frames;
    uint64_t sent_ns = 0;
    uint32_t tries = 0;
  };

  uint8_t* resolve(uint32_t key, uint64_t addr, uint64_t len);
  void start(InFlight& w, const Emit& emit, uint64_t now_ns);
  void packetize(InFlight& w, const uint8_t* data, uint32_t len);
  void send(InFlight& w, const Emit& emit, uint64_t now_ns);
  void fail(InFlight& w, uint8_t syndrome, const std::string& why);
  void complete_through(uint32_t psn);
  void drain();
  void write_cqe(const InFlight& w);

  SoftConnectXConfig cfg_;
  SoftConnectXMemory mem_;
  struct Region {
    uint8_t* base;
    uint64_t iova, length;
  };
  std::map<uint32_t, Region> regions_;
  std::deque<InFlight> inflight_;
  uint64_t consumed_ = 0;   // WQEs read
  uint64_t completed_ = 0;  // CQEs written
  uint32_t next_psn_ = 0;
  bool error_ = false;
  std::string last_error_;
  SoftConnectXStats stats_;
};

}  // namespace rt::verbs
