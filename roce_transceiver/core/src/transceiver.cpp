#include "rt/host/transceiver.h"

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <stdexcept>
#include <thread>

#include "call_guard.h"
#include "ring_layout.h"
#include "rt/cuda/engine_launch.h"
#include "rt/engine/batch.h"

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
  if (!nic_->host_driven() && c.far_end != FarEndPlace::kCpu)
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
                                " on executor 'cuda' needs the engine's kernels compiled with it "
                                "(custom_kernel_image): Transceiver builds them with NVRTC");
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
// engines' states, the GPU far end and its buffers (made before any kernel of ours runs).
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
  if (wire_device_) {
    far_requests_ = Buffer(Placement::kDevice, kGpuFarEndMaxTemplateBytes);
    far_replies_ = Buffer(Placement::kDevice, kGpuFarEndMaxTemplateBytes);
    far_tables_ = Buffer(Placement::kDevice, 2 * size_t(kPatchBytes) * 256 * sizeof(uint32_t));
    far_times_ = Buffer(Placement::kDevice, size_t(kGpuFarEndMaxCount) * sizeof(uint64_t));
    far_results_ = Buffer(Placement::kDevice, kMaxQueues * sizeof(FarEndResult));
    far_descs_ = Buffer(Placement::kDevice, kMaxQueues * sizeof(FarEndDesc));
    gpu_far_end_ = std::make_unique<cuda::GpuFarEnd>();
  }
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
    page_free_ = Buffer(at.host_facing, size_t(c.frames_pages) * sizeof(uint32_t));
    const std::vector<uint32_t> ones(c.frames_pages, 1u);
    page_free_.write(0, ones.data(), ones.size() * sizeof(uint32_t));
    pages_per_queue_ = c.frames_pages / c.queues;
    d.frames =
        FramesDesc{c.frames_region,    c.frames_page_bytes, pages_per_queue_, c.frames_metadata,
                   c.frames_check_crc, c.frames_statistic,  nullptr};
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
  const Views& v = desc_views_;
  // Each queue: its rings, scratch and counters, its QP, its share of the pages (a region of
  // their own, so that a sensor's page numbers are its queue's).
  queues_.reserve(c.queues);
  for (uint32_t q = 0; q < c.queues; ++q) {
    HostQueue& hq = queues_.emplace_back();
    hq.wire = Buffer(at.wire, v.tx.end);
    hq.host_rings = Buffer(at.host_facing, v.cp.end);
    hq.scratch = Buffer(at.engine_private, size_t(c.engine.msg_buf_bytes) + c.slot_bytes);
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
    uint8_t* wire = on_gpu_ ? hq.wire.device() : hq.wire.host();
    qd.rx = rx_ring(wire, v.rx, v.rx_log2, c.slot_bytes);
    qd.tx = tx_ring(wire, v.tx, v.tx_log2, c.slot_bytes);
    uint8_t* hr = on_gpu_ ? hq.host_rings.device() : hq.host_rings.host();
    qd.host_tx = rx_ring(hr, v.ht, v.ht_log2, c.slot_bytes);
    qd.completions = tx_ring(hr, v.cp, v.cp_log2, c.completion_slot_bytes);
    qd.counters = reinterpret_cast<Counters*>(on_gpu_ ? counters_.device() : counters_.host()) + q;
    hq.far_psn = c.qp.rx_psn & kPsnMask;
  }
}

Transceiver::~Transceiver() {
  try {
    stop();
  } catch (...) {
    // stop() already reported; a destructor must not throw.
  }
}

RxRing Transceiver::rx_view(const HostQueue& q, bool far) const {
  uint8_t* base = far && wire_device_ ? q.wire.device() : (wire_device_ ? nullptr : q.wire.host());
  return rx_ring(base, desc_views_.rx, desc_views_.rx_log2, cfg_.slot_bytes);
}

TxRing Transceiver::tx_view(const HostQueue& q, bool far) const {
  uint8_t* base = far && wire_device_ ? q.wire.device() : (wire_device_ ? nullptr : q.wire.host());
  return tx_ring(base, desc_views_.tx, desc_views_.tx_log2, cfg_.slot_bytes);
}

void Transceiver::start() {
  require_open("start()");
  const DeviceScope on_device(cfg_.cuda_device);  // the executor's streams and kernels
  if (started_) throw std::logic_error("start(): already started (a Transceiver starts once)");
  std::vector<EngineDesc> descs;
  for (uint32_t q = 0; q < queues_.size(); ++q) {
    EngineState st;
    engine_init(queues_[q].desc, &st);
    state_.write(q * sizeof st, &st, sizeof st);
    descs.push_back(queues_[q].desc);
  }
  {  // the NIC first (the socket NIC opens its sockets): a failure leaves nothing running
    std::vector<NicQueue> rings;
    for (HostQueue& q : queues_)
      rings.push_back(NicQueue{rx_view(q, false), q.inject_prod, tx_view(q, false), q.collect_ci,
                               q.desc.counters, &q.ring_drops});
    // The NIC writes the counters where the host reads them (the descriptors' are the
    // executor's view, which is the same memory seen from the GPU).
    for (uint32_t q = 0; q < rings.size(); ++q)
      rings[q].counters = reinterpret_cast<Counters*>(counters_.host()) + q;
    // A wire the host drives (the loopback) needs no rings of its own: its rings may be in
    // device memory, with no host view to give (far_end: gpu).
    if (!nic_->host_driven()) nic_->attach(std::move(rings), steering_);
  }
  if (on_gpu_)
    executor_ =
        make_cuda_executor(std::move(descs), reinterpret_cast<EngineState*>(state_.device()),
                           wire_device_, reinterpret_cast<uint64_t*>(heartbeat_.host()),
                           cuda::LaunchOptions{cfg_.cuda_epoch_us, cfg_.cuda_epochs_in_flight,
                                               cfg_.cuda_warps, cfg_.custom_kernel_image});
  else
    executor_ = make_cpu_executor(std::move(descs), reinterpret_cast<EngineState*>(state_.host()),
                                  cfg_.cpu_core);
  started_ = true;
  try {
    executor_->start();
  } catch (...) {
    started_ = false;  // nothing runs; running() says no, stop() frees the rest
    executor_.reset();
    throw;
  }
  nic_->start();
}

void Transceiver::wait_for_calls(double timeout_s) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (active_calls_.load(std::memory_order_acquire) != 0) {
    if (std::chrono::steady_clock::now() > deadline)
      throw std::runtime_error(
          "stop(): a call in another thread (roundtrip, send, inject...) "
          "did not return within " +
          std::to_string(timeout_s) + " s; nothing was freed");
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

void Transceiver::stop() {
  if (stopped_) return;
  const DeviceScope on_device(cfg_.cuda_device);  // the executor's streams go with it
  closing_.store(true, std::memory_order_release);
  // A far end's run ends: the CPU's reads this flag, the GPU's is asked (no CUDA call here).
  store_release<Scope::kSystem>(&far_stop_, 1);
  if (gpu_far_end_) gpu_far_end_->stop();
  std::string nic_error;
  try {  // the wire goes quiet first
    nic_->stop();
  } catch (const std::exception& e) {
    nic_error = e.what();
  }
  // Throws, keeping every buffer, if a loop will not stop. A user handler that never returns
  // is the likeliest reason then: the loop only reads its stop flag between calls.
  if (started_ && executor_) {
    try {
      executor_->stop(cfg_.stop_timeout_s);
    } catch (const std::runtime_error& e) {
      if (cfg_.handler != HandlerKind::kCustom && !cfg_.frames_statistic) throw;
      throw std::runtime_error(std::string(e.what()) +
                               "; the loop runs a user handler (custom.entry): one that never "
                               "returns keeps the loop from its stop flag");
    }
  }
  // The engines are stopped and the far ends asked to end: what runs in other
  // threads now ends by itself.
  wait_for_calls(cfg_.stop_timeout_s);
  for (uint32_t q = 0; q < queue_count(); ++q) final_counters_.push_back(read_counters(q));
  stopped_ = true;
  if (executor_) final_epoch_stats_ = executor_->stats();
  // Free now rather than when Python collects the object: freeing pinned or
  // device memory later could wait on another transceiver's running kernel.
  // Regions are the exception: a frame the host still holds keeps its region
  // (host memory, or device memory freed with cudaFreeAsync on the memory
  // stream, which waits for no kernel) until the frame goes.
  executor_.reset();
  regions_.clear();
  for (HostQueue& q : queues_) {
    q.wire = Buffer();
    q.host_rings = Buffer();
    q.scratch = Buffer();
  }
  counters_ = Buffer();
  state_ = Buffer();
  qec_ = Buffer();
  page_free_ = Buffer();
  heartbeat_ = Buffer();
  far_requests_ = Buffer();
  far_replies_ = Buffer();
  far_tables_ = Buffer();
  far_times_ = Buffer();
  far_results_ = Buffer();
  far_descs_ = Buffer();
  gpu_far_end_.reset();
  if (!nic_error.empty()) throw std::runtime_error(nic_error);
}

void Transceiver::release_page(uint32_t page) {
  const CallGuard guard(*this, "release_page()");
  if (cfg_.handler != HandlerKind::kFrames || page >= cfg_.frames_pages)
    throw std::invalid_argument("release_page(" + std::to_string(page) +
                                "): not a page of the frames handler");
  store_release<Scope::kSystem>(reinterpret_cast<uint32_t*>(page_free_.host()) + page, 1u);
}

PageMemory Transceiver::page_memory(uint32_t page, size_t bytes) const {
  const CallGuard guard(*this, "page_memory()");
  if (cfg_.handler != HandlerKind::kFrames || page >= cfg_.frames_pages)
    throw std::invalid_argument("page_memory(" + std::to_string(page) +
                                "): not a page of the frames handler");
  if (bytes > cfg_.frames_page_bytes)
    throw std::invalid_argument("page_memory(" + std::to_string(page) + ", " +
                                std::to_string(bytes) + "): more than a page (" +
                                std::to_string(cfg_.frames_page_bytes) + " bytes)");
  return PageMemory{regions_[cfg_.frames_region], size_t(page) * cfg_.frames_page_bytes, bytes};
}

std::vector<uint8_t> PageMemory::read() const {
  std::vector<uint8_t> out(bytes);
  region->read(offset, out.data(), bytes);
  return out;
}

ExecutorStats Transceiver::epoch_stats() const {
  if (stopped_ || !executor_) return final_epoch_stats_;
  return executor_->stats();
}

void Transceiver::require_loopback(const char* what) const {
  if (!nic_->host_driven())
    throw std::logic_error(std::string(what) + ": the wire is the " + nic_->name() + " NIC (nic='" +
                           nic_->name() + "'); this call drives the loopback wire only");
}

void Transceiver::require_open(const char* what) const {
  if (stopped_) throw std::logic_error(std::string(what) + ": the transceiver is stopped");
}

bool Transceiver::running() const {
  if (!started_ || stopped_) return false;
  return executor_ && executor_->running();
}

void Transceiver::check() const {
  if (executor_ && !stopped_) executor_->check();
  if (!stopped_) {
    const std::string e = nic_->error();
    if (!e.empty()) throw std::runtime_error(e);
  }
}

std::vector<uint64_t> Transceiver::counters() const {
  std::vector<uint64_t> out(kNumCounters, 0);
  for (uint32_t q = 0; q < queue_count(); ++q) {
    const std::vector<uint64_t> one = queue_counters(q);
    for (uint32_t i = 0; i < kNumCounters; ++i) out[i] += one[i];
  }
  return out;
}

std::vector<uint64_t> Transceiver::queue_counters(uint32_t queue) const {
  if (queue >= queue_count())
    throw std::out_of_range("queue " + std::to_string(queue) + ": only " +
                            std::to_string(queue_count()) + " configured");
  return stopped_ ? final_counters_[queue] : read_counters(queue);
}

std::vector<uint64_t> Transceiver::read_counters(uint32_t queue) const {
  std::vector<uint64_t> out(kNumCounters);
  const Counters& c = reinterpret_cast<const Counters*>(counters_.host())[queue];
  for (uint32_t i = 0; i < kNumCounters; ++i) out[i] = load_relaxed<Scope::kSystem>(&c.v[i]);
  return out;
}

void Transceiver::count_ring_drop(HostQueue& q) {
  Counters* c = reinterpret_cast<Counters*>(counters_.host()) + (&q - queues_.data());
  store_relaxed<Scope::kSystem>(&c->v[uint32_t(Counter::kRingDrops)], ++q.ring_drops);
}

bool Transceiver::send(const uint8_t* data, size_t len) {
  const CallGuard guard(*this, "send()");
  FrameSpec spec = cfg_.local;
  spec.opcode = make_opcode(cfg_.qp.transport, 0x04);
  // The largest payload whose padded length and ICRC still fit a slot.
  const size_t room = (cfg_.slot_bytes - payload_offset(spec) - kIcrcBytes) & ~size_t(3);
  if (len > room)
    throw std::invalid_argument("send: " + std::to_string(len) + " bytes do not fit a " +
                                std::to_string(cfg_.slot_bytes) + "-byte slot (at most " +
                                std::to_string(room) + ")");
  HostQueue& q = queues_[0];
  const RxRing r =
      rx_ring(q.host_rings.host(), desc_views_.ht, desc_views_.ht_log2, cfg_.slot_bytes);
  return rx_produce<Scope::kSystem>(r, q.host_prod, data, uint32_t(len), now_ns()) ==
         ProduceResult::kOk;
}

std::vector<Completion> Transceiver::poll_completions(size_t max) {
  const CallGuard guard(*this, "poll_completions()");
  const uint32_t half = completion_data_bytes(cfg_.completion_slot_bytes);
  std::vector<Completion> out;
  for (uint32_t qi = 0; qi < queues_.size(); ++qi) {
    HostQueue& q = queues_[qi];
    const TxRing r = tx_ring(q.host_rings.host(), desc_views_.cp, desc_views_.cp_log2,
                             cfg_.completion_slot_bytes);
    while (out.size() < max && tx_poll<Scope::kSystem>(r, q.comp_ci)) {
      const uint8_t* slot = r.slot(q.comp_ci);
      Completion c;
      c.queue = qi;
      std::memcpy(&c.record, slot, sizeof c.record);
      const uint32_t req = c.record.request_len < half ? c.record.request_len : half;
      const uint32_t rep = c.record.reply_len > 0
                               ? (uint32_t(c.record.reply_len) < half ? c.record.reply_len : half)
                               : 0;
      c.request.assign(slot + sizeof c.record, slot + sizeof c.record + req);
      c.reply.assign(slot + sizeof c.record + half, slot + sizeof c.record + half + rep);
      if ((c.record.flags & kCompletionFrame) && q.first_page &&
          c.request.size() >= sizeof(FrameRecord)) {
        // The queue's page numbers are its share's; the host's are the transceiver's.
        FrameRecord fr;
        std::memcpy(&fr, c.request.data(), sizeof fr);
        fr.page += q.first_page;
        std::memcpy(c.request.data(), &fr, sizeof fr);
      }
      out.push_back(std::move(c));
      ++q.comp_ci;
      tx_consume<Scope::kSystem>(r, q.comp_ci);
    }
  }
  return out;
}

uint8_t* Transceiver::region_data(size_t index) const {
  const CallGuard guard(*this, "region_data()");
  if (index >= regions_.size())
    throw std::out_of_range("region " + std::to_string(index) + ": only " +
                            std::to_string(regions_.size()) + " configured");
  return regions_[index]->data();
}

size_t Transceiver::region_bytes(size_t index) const {
  return index < regions_.size() ? regions_[index]->size() : 0;
}

std::vector<uint8_t> Transceiver::read_region(size_t index, size_t offset, size_t len) const {
  const CallGuard guard(*this, "read_region()");
  if (index >= regions_.size())
    throw std::out_of_range("region " + std::to_string(index) + ": only " +
                            std::to_string(regions_.size()) + " configured");
  std::vector<uint8_t> out(len);
  regions_[index]->read(offset, out.data(), len);
  return out;
}

}  // namespace rt::host
