// A Transceiver's construction (transceiver.h), in its steps: what only the core can check,
// where each kind of memory lives, the rings' layout, the engines' descriptor, the queues,
// and the NIC meeting their rings. Its life and calls: transceiver.cpp.
#include <sched.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

#include "ring_layout.h"
#include "rt/host/transceiver.h"

namespace rt::host {

using namespace ring_layout;

Transceiver::Transceiver(TransceiverConfig config, std::shared_ptr<Nic> nic)
    : cfg_(std::move(config)), nic_(std::move(nic)) {
  on_gpu_ = cfg_.executor == ExecutorKind::kCuda;
  wire_device_ = cfg_.far_end == FarEndPlace::kGpu;
  if (!nic_) nic_ = make_nic(cfg_);
  check_settings();
  // Everything of ours on the GPU is made on our device (Buffer keeps its own).
  const DeviceScope on_device(cfg_.cuda_device);
  const Placements at = placements();
  lay_out_rings(at);
  make_queues(engine_desc(at), at);
  // The NIC meets the rings now: the loopback's far end on the GPU loads its kernel before
  // any of ours runs.
  std::vector<NicQueue> rings;
  for (HostQueue& q : queues_) rings.push_back(nic_queue(q));
  nic_->attach(std::move(rings), steering_);
}

bool Transceiver::uses_custom() const {
  // A user handler: the handler itself, or the frames stream's statistic.
  return cfg_.handler == HandlerKind::kCustom || cfg_.frames_statistic;
}

// What only the core can tell before anything is allocated: whether the GPU is there, that
// Python built what it computes (the compiled handler, the QEC blob), and the bounds of the
// engine's fixed arrays. Every key's own range, and the rules across keys, are SCHEMA's and
// config.py's, checked once there with the key's file and line (docs/ARCHITECTURE.md,
// "Configuration").
void Transceiver::check_settings() {
  const TransceiverConfig& c = cfg_;
  if (c.far_end == FarEndPlace::kGpu && !on_gpu_)
    throw std::invalid_argument("far_end='gpu' needs executor='cuda'");
  if (!dynamic_cast<const LoopbackNic*>(nic_.get()) && c.far_end != FarEndPlace::kCpu)
    throw std::invalid_argument("nic='" + nic_->name() + "' with far_end='gpu': the " +
                                nic_->name() +
                                " NIC is a CPU thread, its rings sit in host memory "
                                "(far_end='cpu')");
  if (c.frames_statistic && c.handler != HandlerKind::kFrames)
    throw std::invalid_argument("frames_statistic: only for handler 'frames'");
  const bool custom = uses_custom();
  const char* custom_what = c.frames_statistic ? "frames_statistic" : "handler 'custom'";
  if (custom && !on_gpu_ && c.custom_library.empty())
    throw std::invalid_argument(std::string(custom_what) +
                                " on executor 'cpu' needs its compiled handler (custom_library): "
                                "Transceiver builds it");
  if (custom && on_gpu_ && c.custom_kernel_image.empty())
    throw std::invalid_argument(std::string(custom_what) +
                                " on executor 'cuda' needs the engine's kernels with it linked in "
                                "(custom_kernel_image): Transceiver links them (nvJitLink)");
  if (c.handler == HandlerKind::kQec && c.qec_blob.empty())
    throw std::invalid_argument("handler 'qec' needs its table blob (qec_blob)");
  std::string why;
  if (on_gpu_ && !cuda_usable(&why))
    throw std::runtime_error("executor='cuda' cannot run here: " + why);
  if (on_gpu_ && (c.cuda_device < 0 || c.cuda_device >= cuda_device_count()))
    throw std::invalid_argument(
        "cuda.device=" + std::to_string(c.cuda_device) + ": " +
        std::to_string(cuda_device_count()) + " GPU(s) visible to this process (0 to " +
        std::to_string(cuda_device_count() - 1) + "; CUDA_VISIBLE_DEVICES picks and numbers them)");
  // The fixed arrays (the queues' far-end slots, the descriptor's regions): past them is
  // memory that is not theirs. SCHEMA refuses these first (its bounds are these, read from
  // _core.LIMITS); here they guard the arrays against a caller of _core that skipped it.
  if (c.queues < 1 || c.queues > kMaxQueues || c.regions.size() > kMaxRegions)
    throw std::invalid_argument(
        "queues.count=" + std::to_string(c.queues) + ", " + std::to_string(c.regions.size()) +
        " regions: past the core's arrays (1 to " + std::to_string(kMaxQueues) + " queues, " +
        std::to_string(kMaxRegions) + " regions)");
  // CPU_SET past the set's end would write out of bounds; queue q's thread takes cpu_core + q.
  // The set's size is the C library's, known here only.
  if (c.cpu_core >= 0 && uint64_t(c.cpu_core) + c.queues > CPU_SETSIZE)
    throw std::invalid_argument("cpu_core=" + std::to_string(c.cpu_core) + ": must be below " +
                                std::to_string(CPU_SETSIZE - c.queues + 1) +
                                " (CPU_SETSIZE; queue q's thread takes core cpu_core + q)");
  steering_ = Steering{c.queues, c.steer, c.qp.qpn};
}

// Where each kind of memory lives for this executor and far end (the table in
// docs/ARCHITECTURE.md, "Memory").
Transceiver::Placements Transceiver::placements() const {
  return Placements{!on_gpu_       ? Placement::kHost
                    : wire_device_ ? Placement::kDevice
                                   : Placement::kPinned,
                    on_gpu_ ? Placement::kPinned : Placement::kHost,
                    on_gpu_ ? Placement::kDevice : Placement::kHost};
}

// The rings' layout in a queue's memory, and what the queues share: their counters, the
// engines' states.
void Transceiver::lay_out_rings(const Placements& at) {
  const TransceiverConfig& c = cfg_;
  const uint32_t rx_log2 = log2_exact(c.rx_depth, "rx_depth");
  const uint32_t tx_log2 = log2_exact(c.tx_depth, "tx_depth");
  const uint32_t host_log2 = log2_exact(c.host_tx_depth, "host_tx_depth");
  const uint32_t comp_log2 = log2_exact(c.completion_depth, "completion_depth");

  const RingLayout rx = lay_out(0, c.rx_depth, c.slot_bytes);
  const RingLayout tx = lay_out(rx.end, c.tx_depth, c.slot_bytes);
  const RingLayout ht = lay_out(0, c.host_tx_depth, c.slot_bytes);
  const RingLayout cp = lay_out(ht.end, c.completion_depth, c.completion_slot_bytes);
  desc_views_ = Views{rx, tx, ht, cp, rx_log2, tx_log2, host_log2, comp_log2};
  counters_ = Buffer(at.host_facing, size_t(c.queues) * sizeof(Counters));
  state_ = Buffer(at.engine_private, size_t(c.queues) * sizeof(EngineState));
  if (on_gpu_) heartbeat_ = Buffer(Placement::kPinned, sizeof(uint64_t));
}

// What every queue's engine shares: the regions, the handler, the settings.
EngineDesc Transceiver::engine_desc(const Placements& at) {
  const TransceiverConfig& c = cfg_;
  EngineDesc d{};
  d.qp = c.qp;
  d.reply_spec = c.local;
  d.num_regions = uint32_t(c.regions.size());
  for (size_t i = 0; i < c.regions.size(); ++i) {
    const RegionConfig& r = c.regions[i];
    regions_.push_back(std::make_shared<Buffer>(at.engine_private, r.length));
    d.regions[i] = MemRegion{r.va, r.rkey, r.length, regions_.back()->data()};
  }
  d.handler.kind = c.handler;
  if (c.handler == HandlerKind::kQec) {
    // Check the blob where the host can read it, then point the table at the
    // executor's copy.
    if (!qec_table_from_blob(c.qec_blob.data(), c.qec_blob.size(), &d.handler.qec))
      throw std::invalid_argument("qec_blob: not a valid decoder table blob (" +
                                  std::to_string(c.qec_blob.size()) + " bytes)");
    qec_ = Buffer(at.engine_private, c.qec_blob.size());
    qec_.write(0, c.qec_blob.data(), c.qec_blob.size());
    qec_table_relocate(&d.handler.qec, qec_.data());
  }
  const bool custom = uses_custom();
  // A user handler: its shared object stays loaded until the loop that calls it is gone.
  if (custom && !on_gpu_) {
    custom_library_ = std::make_unique<CustomLibrary>(c.custom_library);
    d.handler.custom.call = custom_library_->call();
  }
  if (custom) {
    // Each queue's state on its own 64-byte lines: the ABI promises 16-byte alignment, and
    // queues on different threads must not share a cache line.
    custom_stride_ = (c.custom_state_bytes + 63u) / 64u * 64u;
    if (custom_stride_) {
      custom_state_ = Buffer(at.engine_private, size_t(custom_stride_) * c.queues);
      d.handler.custom.state_bytes = c.custom_state_bytes;
    }
    if (!c.custom_params.empty()) {
      custom_params_ = Buffer(at.engine_private, c.custom_params.size());
      custom_params_.write(0, c.custom_params.data(), c.custom_params.size());
      d.handler.custom.params = custom_params_.data();
      d.handler.custom.params_bytes = uint32_t(c.custom_params.size());
    }
  }
  if (c.engine.rc_retransmit && c.qp.transport == Transport::RC) {
    const uint32_t w = c.engine.rc_window;
    if (w == 0 || w > kMaxRcWindow || (w & (w - 1)))
      throw std::invalid_argument("qp.window " + std::to_string(w) + ": a power of two, 1 to " +
                                  std::to_string(kMaxRcWindow));
    if (c.engine.rc_retry > 7 || c.engine.rc_rnr_retry > 7 || c.engine.rc_rnr_timer > 31)
      throw std::invalid_argument(
          "qp.retry_count and qp.rnr_retry are 0 to 7, qp.rnr_timer 0 to 31 (IBA table 45)");
  }
  if (c.handler == HandlerKind::kFrames) {
    // The pages' region is the one config.py appended; a page table past the engine's
    // (the immediate's 12 bits) or pages past the region would be memory not theirs.
    if (c.frames_region >= c.regions.size() || c.frames_pages == 0 || c.frames_pages > kMaxPages ||
        c.frames_pages % c.queues ||
        uint64_t(c.frames_pages) * c.frames_page_bytes > c.regions[c.frames_region].length)
      throw std::invalid_argument("frames: " + std::to_string(c.frames_pages) + " pages of " +
                                  std::to_string(c.frames_page_bytes) + " bytes for " +
                                  std::to_string(c.queues) +
                                  " queues do not fit regions[frames_region] (at most " +
                                  std::to_string(kMaxPages) + " pages, a share a queue)");
    if (!c.engine.record_completions ||
        completion_data_bytes(c.completion_slot_bytes) < sizeof(FrameRecord))
      throw std::invalid_argument(
          "frames: the host gets frames as completion records: completions on, "
          "queues.completion_slot_bytes >= " +
          std::to_string(sizeof(CompletionRecord) + 2 * sizeof(FrameRecord)));
    if (c.frames_page_bits != 8 && c.frames_page_bits != 12)
      throw std::invalid_argument("frames_page_bits " + std::to_string(c.frames_page_bits) +
                                  ": 8 or 12 (hsb.page_bits)");
    if (c.frames_pages > (1u << c.frames_page_bits))
      throw std::invalid_argument(
          "frames.pages=" + std::to_string(c.frames_pages) + ": the end-of-frame immediate names " +
          std::to_string(1u << c.frames_page_bits) + " pages at most with hsb.page_bits " +
          std::to_string(c.frames_page_bits));
    // The schema's rule (config.py, frames.slice_bytes), kept here for callers of the core.
    if (c.frames_slice_bytes &&
        (c.frames_slice_bytes % 64 || c.frames_slice_bytes < kMinSliceBytes ||
         c.frames_slice_bytes > c.frames_page_bytes))
      throw std::invalid_argument("frames.slice_bytes=" + std::to_string(c.frames_slice_bytes) +
                                  ": 0 (no slices), or a multiple of 64 from " +
                                  std::to_string(kMinSliceBytes) + " to frames.page_bytes (" +
                                  std::to_string(c.frames_page_bytes) + ")");
    page_free_ = Buffer(at.host_facing, size_t(c.frames_pages) * sizeof(uint32_t));
    const std::vector<uint32_t> ones(c.frames_pages, 1u);
    page_free_.write(0, ones.data(), ones.size() * sizeof(uint32_t));
    pages_per_queue_ = c.frames_pages / c.queues;
    d.frames =
        FramesDesc{c.frames_region,     c.frames_page_bytes, pages_per_queue_,   c.frames_metadata,
                   c.frames_check_crc,  c.frames_statistic,  c.frames_page_bits, nullptr,
                   c.frames_slice_bytes};
  }
  static_cast<EngineSettings&>(d) = c.engine;
  d.reply_scratch_bytes = c.slot_bytes;
  // Half the ring at most: the host drains one half while the loop fills the other.
  d.completion_batch = std::max(1u, std::min(d.completion_batch, c.completion_depth / 2));
  // The express path runs a SEND's handler before the request's ICRC verdict and drops the
  // reply of a bad frame (handler.h: handlers are pure). A user handler with state is not
  // pure: a corrupt frame would still change its state, so it takes the general path.
  d.express = d.express && !(c.handler == HandlerKind::kCustom && c.custom_state_bytes);

  return d;
}

void Transceiver::make_queues(const EngineDesc& d, const Placements& at) {
  const TransceiverConfig& c = cfg_;
  const bool custom = uses_custom();
  const bool reliable = c.engine.rc_retransmit && c.qp.transport == Transport::RC;
  const Views& v = desc_views_;
  // Each queue: its rings, scratch and counters, its QP, its share of the pages (a region of
  // their own, so that a sensor's page numbers are its queue's).
  queues_.reserve(c.queues);
  for (uint32_t q = 0; q < c.queues; ++q) {
    HostQueue& hq = queues_.emplace_back();
    hq.wire = Buffer(at.wire, v.tx.end);
    hq.host_rings = Buffer(at.host_facing, v.cp.end);
    // The message assembly buffer, the reply scratch, and, with qp.retransmit, the
    // requester's replay store (a tx slot a PSN of the window, then their lengths).
    const size_t assembly = size_t(c.engine.msg_buf_bytes) + c.slot_bytes;
    const size_t replay_at = (assembly + 63) & ~size_t(63);
    const size_t replay_bytes =
        reliable ? size_t(c.engine.rc_window) * (c.slot_bytes + sizeof(uint32_t)) +
                       sizeof(AckPrediction) + 16
                 : 0;
    hq.scratch = Buffer(at.engine_private, replay_at + replay_bytes);
    hq.desc = d;
    EngineDesc& qd = hq.desc;
    qd.qp.qpn = steering_.qpn(q);
    if (steering_.by == SteerBy::kQp) qd.qp.peer_qpn = c.qp.peer_qpn + q;
    if (c.handler == HandlerKind::kFrames) {
      hq.first_page = q * pages_per_queue_;
      MemRegion& pages = qd.regions[c.frames_region];
      const uint64_t skip = uint64_t(hq.first_page) * c.frames_page_bytes;
      pages = MemRegion{pages.va + skip, pages.rkey,
                        uint32_t(pages_per_queue_ * c.frames_page_bytes), pages.base + skip};
      qd.frames.page_free =
          reinterpret_cast<uint32_t*>(on_gpu_ ? page_free_.device() : page_free_.host()) +
          hq.first_page;
    }
    if (custom) {
      qd.handler.custom.queue = uint16_t(q);
      if (custom_stride_)
        qd.handler.custom.state = custom_state_.data() + size_t(q) * custom_stride_;
    }
    qd.msg_buf = hq.scratch.data();
    qd.reply_scratch = hq.scratch.data() + c.engine.msg_buf_bytes;
    if (reliable) {
      qd.replay = hq.scratch.data() + replay_at;
      qd.replay_len =
          reinterpret_cast<uint32_t*>(qd.replay + size_t(c.engine.rc_window) * c.slot_bytes);
      const size_t ack_at =
          (replay_at + size_t(c.engine.rc_window) * (c.slot_bytes + sizeof(uint32_t)) + 15) &
          ~size_t(15);
      qd.peer_ack = reinterpret_cast<AckPrediction*>(hq.scratch.data() + ack_at);
    }
    uint8_t* wire = on_gpu_ ? hq.wire.device() : hq.wire.host();
    qd.rx = rx_ring(wire, v.rx, v.rx_log2, c.slot_bytes);
    qd.tx = tx_ring(wire, v.tx, v.tx_log2, c.slot_bytes);
    uint8_t* hr = on_gpu_ ? hq.host_rings.device() : hq.host_rings.host();
    qd.host_tx = rx_ring(hr, v.ht, v.ht_log2, c.slot_bytes);
    qd.completions = tx_ring(hr, v.cp, v.cp_log2, c.completion_slot_bytes);
    qd.counters = reinterpret_cast<Counters*>(on_gpu_ ? counters_.device() : counters_.host()) + q;
  }
}

// Queue q's rings from the NIC's side: where the host reaches them, or (far_end gpu) the
// device addresses of the loopback's far end. The NIC publishes the queue's ring drops
// where the host reads the counters (the descriptors' are the executor's view).
NicQueue Transceiver::nic_queue(HostQueue& q) {
  const Views& v = desc_views_;
  uint8_t* base = wire_device_ ? q.wire.device() : q.wire.host();
  const auto index = uint32_t(&q - queues_.data());
  NicQueue n;
  n.rx = rx_ring(base, v.rx, v.rx_log2, cfg_.slot_bytes);
  n.tx = tx_ring(base, v.tx, v.tx_log2, cfg_.slot_bytes);
  n.counters = reinterpret_cast<Counters*>(counters_.host()) + index;
  n.ring_drops = &q.ring_drops;
  n.qpn = q.desc.qp.qpn;
  n.peer_qpn = q.desc.qp.peer_qpn;
  n.memory = &q.wire;
  return n;
}

}  // namespace rt::host
