// The software ConnectX: a CPU-side NIC behind GPUNetIO's verbs device API, both halves of an RC
// queue pair, as a ConnectX is (docs/verbs_mode.md).
//
// Requester: the device writes mlx5 WQEs into a send ring and rings a doorbell the way its NIC
// handler does (CPU proxy: a producer count; GPU_SM_DB: the doorbell record and the UAR word;
// GPU_SM_BF: the whole WQE into the BlueFlame window); this class reads the WQEs the doorbell
// covers, carries each out as RC RoCEv2 packets built by the protocol core, takes the peer's
// ACKs, NAKs and atomic acknowledgements, and writes one CQE per WQE, in order, with the owner
// bit the device's poller expects.
//
// Responder: the peer's RDMA WRITEs (First/Middle/Last/Only, with immediate) are placed into
// remote-access regions and its FETCH_ADD / COMPARE_SWAP run on their words at system scope,
// after the checks of rt/protocol/rc_responder.h (PSN, message order, rkey and bounds, the
// replay of a duplicate atomic), answered with ACK, NAK or ATOMIC ACKNOWLEDGE. The regions are
// memory the device polls (pinned host memory mapped for the GPU, in VerbsPort).
//
// It is single-threaded: one thread calls poll() and on_frame(). Memory it reads or writes
// for the device (rings, doorbell page, CQEs, regions) is given to it; it owns none.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "rt/protocol/encode.h"
#include "rt/protocol/rc_requester.h"
#include "rt/protocol/rc_responder.h"
#include "rt/verbs/work_request.h"

namespace rt::verbs {

constexpr uint32_t kMaxRemoteRegions = 8;

struct SoftConnectXConfig {
  uint32_t qpn = 0x100;
  uint32_t peer_qpn = 0x200;
  uint32_t sq_psn = 0;        // first PSN we send
  uint32_t rq_psn = 0;        // first PSN we expect from the peer (the responder half)
  uint32_t mtu = 1024;        // payload bytes per packet
  uint32_t sq_wqe_num = 256;  // a power of two, at most 32768
  uint32_t cqe_num = 256;     // a power of two, at least sq_wqe_num
  FrameSpec addressing;       // MACs, IPs, UDP source port, VLAN, P_Key of our packets
  uint64_t retransmit_ns = 2'000'000;
  uint32_t retries = 7;  // then the WQE completes with "retry exceeded"
  NicHandler handler = NicHandler::kCpuProxy;
};

// The memory the device and the NIC share. `*_device` are the addresses the device uses
// for the same bytes (equal to the host pointers for host memory read by the CPU alone).
struct SoftConnectXMemory {
  uint8_t* sq = nullptr;        // sq_wqe_num x 64 bytes
  uint8_t* cq = nullptr;        // cqe_num x 64 bytes
  uint8_t* doorbell = nullptr;  // the doorbell page: kDoorbellPageBytes, 64-byte aligned
  uint64_t sq_device = 0, cq_device = 0, doorbell_device = 0;
};

struct SoftConnectXStats {
  // requester
  uint64_t wqes = 0;         // WQEs read
  uint64_t bf_wqes = 0;      // of them, read from the BlueFlame window (not the send ring)
  uint64_t completions = 0;  // CQEs written
  uint64_t errors = 0;       // of them, error CQEs
  uint64_t packets = 0;      // packets sent, retransmissions included
  uint64_t retransmits = 0;
  uint64_t acks = 0;  // ACKs and atomic acknowledgements taken
  uint64_t naks = 0;
  uint64_t stale_waits = 0;    // polls that found a WQE the doorbell covers not yet written
  uint64_t foreign_rings = 0;  // doorbells naming another QP (ignored)
  uint64_t ignored = 0;        // frames not for this QP
  // responder
  uint64_t requests = 0;         // request packets executed (placed, or atomics run)
  uint64_t bytes_placed = 0;     // WRITE payload bytes in our regions
  uint64_t atomics = 0;          // FETCH_ADD / COMPARE_SWAP executed
  uint64_t write_imms = 0;       // WRITEs with immediate completed (last_imm: the latest)
  uint64_t duplicates = 0;       // re-acknowledged, not executed (atomics: replayed)
  uint64_t psn_gaps = 0;         // requests ahead of the PSN expected
  uint64_t out_of_range = 0;     // rkey or bounds refused (NAK remote access / invalid request)
  uint64_t sequence_errors = 0;  // First/Middle/Last out of order (NAK invalid request)
  uint64_t unsupported = 0;      // SEND (no receive queue), READ (NAK invalid request)
  uint64_t acks_sent = 0;        // ACKs and ATOMIC ACKNOWLEDGEs
  uint64_t naks_sent = 0;
  uint32_t last_imm = 0;
};

class SoftConnectX {
 public:
  using Emit = std::function<void(const uint8_t*, size_t)>;

  SoftConnectX(const SoftConnectXConfig& cfg, const SoftConnectXMemory& mem);

  // A memory region the WQEs name by key: `addr` in a WQE is `iova`-based (NCCL's are
  // zero-based offsets; host buffers use their address as iova). Local keys.
  void add_region(uint32_t key, uint8_t* base, uint64_t iova, uint64_t length);
  // A region the peer may WRITE into and run atomics on, by `rkey` at `va` (the responder's).
  void add_remote_region(uint32_t rkey, uint8_t* base, uint64_t va, uint32_t length);

  // The device descriptor (struct doca_gpu_dev_verbs_qp) for this QP and its NIC handler: `out`
  // has descriptor_bytes(); throws in a build without GPUNetIO's headers (descriptor.h).
  void fill_descriptor(uint8_t* out, size_t out_bytes) const;

  // WQEs the doorbell covers become packets (handed to `emit`); unacknowledged packets past
  // their deadline are sent again. Returns the WQEs read.
  size_t poll(const Emit& emit, uint64_t now_ns);

  // A frame from the peer: ACKs complete WQEs, NAKs fail or resend them; requests are executed
  // and answered. False: not ours.
  bool on_frame(const uint8_t* frame, size_t len, const Emit& emit, uint64_t now_ns);

  const SoftConnectXStats& stats() const { return stats_; }
  uint64_t consumed() const { return consumed_; }
  uint64_t completed() const { return completed_; }
  uint32_t expected_psn() const { return expected_psn_; }
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

  // requester
  uint64_t produced();
  void catch_blueflame();
  bool fetch_wqe(uint64_t index, uint8_t* bb);
  uint8_t* resolve(uint32_t key, uint64_t addr, uint64_t len);
  void start(InFlight& w, const Emit& emit, uint64_t now_ns);
  void packetize(InFlight& w, const uint8_t* data, uint32_t len);
  void send(InFlight& w, const Emit& emit, uint64_t now_ns);
  void fail(InFlight& w, uint8_t syndrome, const std::string& why);
  void take_response(const FrameView& f, const Emit& emit, uint64_t now_ns);
  void complete_through(uint32_t psn);
  void drain();
  void write_cqe(const InFlight& w);
  // responder
  void respond(const FrameView& f, const Emit& emit);
  bool accept_psn(uint32_t psn, const Emit& emit);
  void answer(const FrameSpec& spec, const Emit& emit, bool nak);

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
  // BlueFlame writes caught in the window, by WQE index (a slot per send-ring entry): the ring
  // over the window's first 8 bytes that follows each one (submit_bf) must not lose it.
  std::vector<uint8_t> bf_caught_;
  std::vector<uint64_t> bf_index_;  // UINT64_MAX: nothing caught in that slot
  uint64_t last_ring_ = 0;          // the doorbell word at the last look
  // responder state (IBA 9.7.5): the next PSN, messages completed, the WRITE in progress.
  MemRegion remote_[kMaxRemoteRegions] = {};
  uint32_t num_remote_ = 0;
  uint32_t expected_psn_ = 0;
  uint32_t msn_ = 0;
  uint16_t in_message_ = 0;
  bool nak_sent_ = false;
  WriteProgress write_{};
  AtomicReplay atomic_{};
  SoftConnectXStats stats_;
};

}  // namespace rt::verbs
