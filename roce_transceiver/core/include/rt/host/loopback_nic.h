// The loopback wire: the host is the far side of every queue's rings. It puts frames on the
// rx rings (inject, and preload before start), takes what the engines sent from the tx rings
// (collect), and runs the far end that times round trips: a thread of ours a queue
// (far_end: cpu), or a block of the GPU a queue beside the engine's kernel (far_end: gpu,
// the rings then in device memory, where the host cannot reach them one frame at a time).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "rt/cuda/far_end_launch.h"
#include "rt/engine/far_end.h"
#include "rt/engine/state.h"
#include "rt/host/memory.h"
#include "rt/host/nic.h"
#include "rt/protocol/encode.h"
#include "rt/queues/steering.h"

namespace rt::host {

struct FarEndParams {
  std::vector<uint8_t> payloads;  // num x payload_len
  uint32_t payload_len = 32;
  std::vector<uint8_t> expected;  // num x expected_len, or empty: echo
  uint32_t expected_len = 0;
  uint32_t count = 1000;     // requests, over all queues
  uint32_t window = 1;       // requests in flight at most, per queue
  uint64_t interval_ns = 0;  // between the due times of the whole schedule (0: no schedule)
  uint64_t late_ns = 0;      // sent later than this after its due time: late (0: interval)
  uint64_t drop_ns = 0;      // not sent this long after its due time: dropped (0: never)
  uint32_t queues = 1;       // queues 0 .. queues-1 each get a far end and every queues-th
                             // request of the schedule
  double timeout_s = 10.0;
  bool seq_in_payload = true;
};

// Limits of one run of a GPU far end (its buffers are sized once, up front): requests
// over all queues, and bytes of request (or reply) templates over all queues.
constexpr uint32_t kGpuFarEndMaxCount = 1u << 20;
constexpr size_t kGpuFarEndMaxTemplateBytes = size_t(8) << 20;
// An ACK's frame (headers, AETH, ICRC, rounded to 16 bytes) fits this with room to spare.
constexpr size_t kAckTemplateBytes = 256;

struct FarEndRun {
  FarEndResult result;               // the queues' added up (status: the first not done)
  std::vector<FarEndResult> queues;  // each queue's
  std::vector<uint64_t> rtt_ns;      // one per reply received, queue by queue, in order
};

// What the loopback needs of the configuration: the far end is the transceiver's peer.
struct LoopbackConfig {
  FrameSpec local;  // our addresses (src_*) and the peer's (dst_*), as in our replies
  QpConfig qp;      // the far end's requests: transport, pkey, first PSN (rx_psn)
  uint32_t slot_bytes = 0;
  bool far_end_on_gpu = false;  // far_end: gpu (the rings in device memory)
  int cuda_device = 0;          // where the GPU far end runs
  uint32_t epoch_us = 0;        // the engine's epochs (cuda.epoch_us), which the GPU's runs in
  bool ack_replies = false;     // the engine's RC requester is on: the far end ACKs its replies
};

class LoopbackNic final : public Nic {
 public:
  explicit LoopbackNic(LoopbackConfig config) : cfg_(config) {}
  ~LoopbackNic() override;
  std::string name() const override { return "loopback"; }
  // far_end gpu: the far end's kernel and buffers are made here, before the engine starts
  // (a kernel loaded, or device memory allocated, while a persistent kernel runs can wait
  // for it).
  void attach(std::vector<NicQueue> queues, const Steering& steering) override;
  // A far end's run in progress ends (the CPU's reads a flag, the GPU's is asked; no CUDA
  // call), and every later one at once.
  void stop() override;
  void detach() override;

  // A frame onto the rx ring of the queue steering picks (far_end cpu). false: that ring is
  // full; counted as a ring drop unless the caller will try again (a lossless far end that
  // waits for room).
  bool inject(const uint8_t* frame, size_t len, bool count_drop = true);
  // Before the engines start: frames onto the queues' rx rings at once (steered), wherever
  // the rings lie (one image a queue, copied in), as a NIC would have written them; for
  // ingest benchmarks. How many fit: frames up to the first one whose queue is full.
  size_t preload(const std::vector<std::string>& frames);
  // What the engines sent, queue after queue (far_end cpu).
  std::vector<std::vector<uint8_t>> collect(size_t max);
  // Requests out to queues 0 .. p.queues-1, replies back, timed at the far end.
  // `engine_running`, asked while a GPU run waits: once the engine stops, no reply comes.
  FarEndRun run_far_end(const FarEndParams& p, const std::function<bool()>& engine_running);

 private:
  struct Queue {
    NicQueue rings;
    uint32_t far_psn = 0;  // the PSN of the far end's next request
  };
  void require_host_rings(const char* what) const;
  FrameSpec engine_sends(const NicQueue& q) const;

  LoopbackConfig cfg_;
  Steering steering_{};
  std::vector<Queue> queues_;
  uint32_t stop_ = 0;  // the CPU far end's stop flag (release / acquire)
  // far_end gpu: made at attach(), before the engine starts (its kernel loaded then).
  std::unique_ptr<cuda::GpuFarEnd> gpu_;
  Buffer requests_, replies_, acks_, tables_, times_, results_, descs_;
};

}  // namespace rt::host
