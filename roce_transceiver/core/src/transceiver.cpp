#include "rt/host/transceiver.h"

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <stdexcept>
#include <thread>

#include "rt/cuda/engine_launch.h"
#include "rt/engine/batch.h"

namespace rt::host {
namespace {

constexpr uint32_t kLine = 64;  // every shared index on its own cache line
constexpr uint64_t kQpnMask = 0xFFFFFF;

uint32_t log2_exact(uint32_t v, const char* key) {
  if (v < 2 || v > (1u << 16) || (v & (v - 1)) != 0)
    throw std::invalid_argument(std::string(key) + "=" + std::to_string(v) +
                                ": must be a power of two from 2 to 65536");
  uint32_t n = 0;
  while ((1u << n) < v) ++n;
  return n;
}

size_t round_up(size_t n) { return (n + kLine - 1) / kLine * kLine; }

// Byte offsets of one ring inside a Buffer: descriptors, slots, index words.
using RingLayout = RingOffsets;

RingLayout lay_out(size_t at, uint32_t depth, uint32_t slot_bytes) {
  RingLayout l{};
  l.descs = at;
  l.slots = round_up(l.descs + size_t(depth) * 16);
  l.index_a = round_up(l.slots + size_t(depth) * slot_bytes);
  l.index_b = l.index_a + kLine;
  l.end = l.index_b + kLine;
  return l;
}

RxRing rx_ring(uint8_t* base, const RingLayout& l, uint32_t log2_depth, uint32_t slot_bytes) {
  return RxRing{base + l.slots, reinterpret_cast<RxDesc*>(base + l.descs),
                reinterpret_cast<uint32_t*>(base + l.index_a), log2_depth, slot_bytes};
}

TxRing tx_ring(uint8_t* base, const RingLayout& l, uint32_t log2_depth, uint32_t slot_bytes) {
  return TxRing{base + l.slots,
                reinterpret_cast<TxDesc*>(base + l.descs),
                reinterpret_cast<uint32_t*>(base + l.index_a),
                reinterpret_cast<uint32_t*>(base + l.index_b),
                log2_depth,
                slot_bytes};
}

}  // namespace

Transceiver::Transceiver(TransceiverConfig config) : cfg_(std::move(config)) {
  const TransceiverConfig& c = cfg_;
  on_gpu_ = c.executor == ExecutorKind::kCuda;
  if (c.far_end == FarEndPlace::kGpu && !on_gpu_)
    throw std::invalid_argument("far_end='gpu' needs executor='cuda'");
  if (c.nic == NicKind::kSocket && c.far_end != FarEndPlace::kCpu)
    throw std::invalid_argument(
        "nic='socket' with far_end='gpu': the socket NIC is a CPU thread, its rings sit in "
        "host memory (far_end='cpu')");
  if (c.frames_statistic && c.handler != HandlerKind::kFrames)
    throw std::invalid_argument("frames_statistic: only for handler 'frames'");
  // A user handler: the handler itself, or the frames stream's statistic.
  const bool custom = c.handler == HandlerKind::kCustom || c.frames_statistic;
  const char* custom_what = c.frames_statistic ? "frames_statistic" : "handler 'custom'";
  if (custom && !on_gpu_ && c.custom_library.empty())
    throw std::invalid_argument(std::string(custom_what) +
                                " on executor 'cpu' needs its compiled handler (custom_library): "
                                "Transceiver builds it");
  if (custom && on_gpu_ && c.custom_kernel_image.empty())
    throw std::invalid_argument(std::string(custom_what) +
                                " on executor 'cuda' needs the engine's kernels compiled with it "
                                "(custom_kernel_image): Transceiver builds them with NVRTC");
  wire_device_ = c.far_end == FarEndPlace::kGpu;
  std::string why;
  if (on_gpu_ && !cuda_usable(&why))
    throw std::runtime_error("executor='cuda' cannot run here: " + why);
  if (!on_gpu_ && c.cuda_device != 0)
    throw std::invalid_argument("cuda_device=" + std::to_string(c.cuda_device) +
                                ": the GPU of executor='cuda'; the cpu executor has none");
  if (on_gpu_ && (c.cuda_device < 0 || c.cuda_device >= cuda_device_count()))
    throw std::invalid_argument(
        "cuda_device=" + std::to_string(c.cuda_device) + ": " +
        std::to_string(cuda_device_count()) + " GPU(s) visible to this process (0 to " +
        std::to_string(cuda_device_count() - 1) + "; CUDA_VISIBLE_DEVICES picks and numbers them)");
  // Everything of ours on the GPU is made on our device (Buffer keeps its own).
  const DeviceScope on_device(c.cuda_device);
  if (c.qp.transport != Transport::RC && c.qp.transport != Transport::UC)
    throw std::invalid_argument("qp.transport: must be RC or UC");
  if (c.slot_bytes < 128 || c.slot_bytes % 64 || c.slot_bytes > 65536)
    throw std::invalid_argument("slot_bytes=" + std::to_string(c.slot_bytes) +
                                ": must be a multiple of 64 from 128 to 65536");
  if (c.completion_slot_bytes < 128 || c.completion_slot_bytes % 64)
    throw std::invalid_argument("completion_slot_bytes=" + std::to_string(c.completion_slot_bytes) +
                                ": must be a multiple of 64, at least 128");
  if (c.completion_batch < 1 || c.completion_batch > 65536)
    throw std::invalid_argument("completion_batch=" + std::to_string(c.completion_batch) +
                                ": must be 1 to 65536");
  if (c.batch < 1 || c.batch > 1024)
    throw std::invalid_argument("batch=" + std::to_string(c.batch) + ": must be 1 to 1024");
  if (c.queues < 1 || c.queues > kMaxQueues)
    throw std::invalid_argument("queues=" + std::to_string(c.queues) + ": must be 1 to " +
                                std::to_string(kMaxQueues));
  steering_ = Steering{c.queues, c.steer, c.qp.qpn};
  if (steering_.by == SteerBy::kQp && (uint64_t(c.qp.qpn) + c.queues - 1 > kQpnMask ||
                                       uint64_t(c.qp.peer_qpn) + c.queues - 1 > kQpnMask))
    throw std::invalid_argument("queues=" + std::to_string(c.queues) +
                                " steered by QP: queue i is QP qpn + i (peer peer_qpn + i), "
                                "past the 24-bit QP numbers from qpn=" +
                                std::to_string(c.qp.qpn) +
                                ", peer_qpn=" + std::to_string(c.qp.peer_qpn));
  // CPU_SET past the set's end would write out of bounds; queue q's thread takes cpu_core + q.
  if (c.cpu_core >= 0 && uint64_t(c.cpu_core) + c.queues > CPU_SETSIZE)
    throw std::invalid_argument("cpu_core=" + std::to_string(c.cpu_core) + ": must be below " +
                                std::to_string(CPU_SETSIZE - c.queues + 1) +
                                " (CPU_SETSIZE; queue q's thread takes core cpu_core + q)");
  if (c.regions.size() > kMaxRegions)
    throw std::invalid_argument("regions: at most " + std::to_string(kMaxRegions));
  if (c.handler == HandlerKind::kQec && c.qec_blob.empty())
    throw std::invalid_argument("handler 'qec' needs its table blob (qec_blob)");

  const uint32_t rx_log2 = log2_exact(c.rx_depth, "rx_depth");
  const uint32_t tx_log2 = log2_exact(c.tx_depth, "tx_depth");
  const uint32_t host_log2 = log2_exact(c.host_tx_depth, "host_tx_depth");
  const uint32_t comp_log2 = log2_exact(c.completion_depth, "completion_depth");

  const Placement wire_at = !on_gpu_       ? Placement::kHost
                            : wire_device_ ? Placement::kDevice
                                           : Placement::kPinned;
  const Placement host_facing = on_gpu_ ? Placement::kPinned : Placement::kHost;
  const Placement engine_private = on_gpu_ ? Placement::kDevice : Placement::kHost;

  const RingLayout rx = lay_out(0, c.rx_depth, c.slot_bytes);
  const RingLayout tx = lay_out(rx.end, c.tx_depth, c.slot_bytes);
  const RingLayout ht = lay_out(0, c.host_tx_depth, c.slot_bytes);
  const RingLayout cp = lay_out(ht.end, c.completion_depth, c.completion_slot_bytes);
  desc_views_ = Views{rx, tx, ht, cp, rx_log2, tx_log2, host_log2, comp_log2};
  counters_ = Buffer(host_facing, size_t(c.queues) * sizeof(Counters));
  state_ = Buffer(engine_private, size_t(c.queues) * sizeof(EngineState));
  if (on_gpu_) heartbeat_ = Buffer(Placement::kPinned, sizeof(uint64_t));
  if (wire_device_) {
    far_requests_ = Buffer(Placement::kDevice, kGpuFarEndMaxTemplateBytes);
    far_replies_ = Buffer(Placement::kDevice, kGpuFarEndMaxTemplateBytes);
    far_tables_ = Buffer(Placement::kDevice, 2 * size_t(kPatchBytes) * 256 * sizeof(uint32_t));
    far_times_ = Buffer(Placement::kDevice, size_t(kGpuFarEndMaxCount) * sizeof(uint64_t));
    far_results_ = Buffer(Placement::kDevice, kMaxQueues * sizeof(FarEndResult));
    far_descs_ = Buffer(Placement::kDevice, kMaxQueues * sizeof(FarEndDesc));
  }

  // What every queue's engine shares: the regions, the handler, the settings.
  EngineDesc d{};
  d.qp = c.qp;
  d.reply_spec = c.local;
  d.num_regions = uint32_t(c.regions.size());
  for (size_t i = 0; i < c.regions.size(); ++i) {
    const RegionConfig& r = c.regions[i];
    if (r.length == 0)
      throw std::invalid_argument("regions[" + std::to_string(i) + "].length: must be > 0");
    for (size_t j = 0; j < i; ++j)
      if (c.regions[j].rkey == r.rkey)
        throw std::invalid_argument("regions[" + std::to_string(i) +
                                    "].rkey=" + std::to_string(r.rkey) +
                                    ": already used by regions[" + std::to_string(j) + "]");
    regions_.push_back(std::make_shared<Buffer>(engine_private, r.length));
    d.regions[i] = MemRegion{r.va, r.rkey, r.length, regions_.back()->data()};
  }
  d.handler.kind = c.handler;
  if (c.handler == HandlerKind::kQec) {
    // Check the blob where the host can read it, then point the table at the
    // executor's copy.
    if (!qec_table_from_blob(c.qec_blob.data(), c.qec_blob.size(), &d.handler.qec))
      throw std::invalid_argument("qec_blob: not a valid decoder table blob (" +
                                  std::to_string(c.qec_blob.size()) + " bytes)");
    qec_ = Buffer(engine_private, c.qec_blob.size());
    qec_.write(0, c.qec_blob.data(), c.qec_blob.size());
    qec_table_relocate(&d.handler.qec, qec_.data());
  }
  // A user handler: its shared object stays loaded until the loop that calls it is gone.
  uint32_t custom_stride = 0;
  if (custom && !on_gpu_) {
    custom_library_ = std::make_unique<CustomLibrary>(c.custom_library);
    d.handler.custom.call = custom_library_->call();
  }
  if (custom) {
    // Each queue's state on its own 64-byte lines: the ABI promises 16-byte alignment, and
    // queues on different threads must not share a cache line.
    custom_stride = (c.custom_state_bytes + 63u) / 64u * 64u;
    if (custom_stride) {
      custom_state_ = Buffer(engine_private, size_t(custom_stride) * c.queues);
      d.handler.custom.state_bytes = c.custom_state_bytes;
    }
    if (!c.custom_params.empty()) {
      custom_params_ = Buffer(engine_private, c.custom_params.size());
      custom_params_.write(0, c.custom_params.data(), c.custom_params.size());
      d.handler.custom.params = custom_params_.data();
      d.handler.custom.params_bytes = uint32_t(c.custom_params.size());
    }
  }
  uint32_t pages_per_queue = 0;
  if (c.handler == HandlerKind::kFrames) {
    if (c.frames_region >= c.regions.size())
      throw std::invalid_argument("frames: region " + std::to_string(c.frames_region) +
                                  " is not configured");
    if (c.frames_pages == 0 || c.frames_pages > kMaxPages || c.frames_page_bytes == 0 ||
        uint64_t(c.frames_pages) * c.frames_page_bytes > c.regions[c.frames_region].length)
      throw std::invalid_argument("frames: " + std::to_string(c.frames_pages) + " pages of " +
                                  std::to_string(c.frames_page_bytes) +
                                  " bytes do not fit the region (at most 4096 pages)");
    if (c.frames_pages % c.queues)
      throw std::invalid_argument("frames: " + std::to_string(c.frames_pages) + " pages for " +
                                  std::to_string(c.queues) +
                                  " queues: each queue takes an equal share of the pages, so "
                                  "the pages must be a multiple of the queues");
    if (!c.record_completions ||
        completion_data_bytes(c.completion_slot_bytes) < sizeof(FrameRecord))
      throw std::invalid_argument(
          "frames: the host gets frames as completion records: completions on, "
          "completion_slot_bytes >= " +
          std::to_string(sizeof(CompletionRecord) + 2 * sizeof(FrameRecord)));
    page_free_ = Buffer(host_facing, size_t(c.frames_pages) * sizeof(uint32_t));
    const std::vector<uint32_t> ones(c.frames_pages, 1u);
    page_free_.write(0, ones.data(), ones.size() * sizeof(uint32_t));
    pages_per_queue = c.frames_pages / c.queues;
    d.frames =
        FramesDesc{c.frames_region,    c.frames_page_bytes, pages_per_queue, c.frames_metadata,
                   c.frames_check_crc, c.frames_statistic,  nullptr};
  }
  d.msg_buf_bytes = c.msg_buf_bytes;
  d.reply_scratch_bytes = c.slot_bytes;
  d.batch = c.batch;
  // Half the ring at most: the host drains one half while the loop fills the other.
  d.completion_batch = std::max(1u, std::min(c.completion_batch, c.completion_depth / 2));
  d.check_icrc = c.check_icrc;
  d.record_completions = c.record_completions;
  // The express path runs a SEND's handler before the request's ICRC verdict and drops the
  // reply of a bad frame (handler.h: handlers are pure). A user handler with state is not
  // pure: a corrupt frame would still change its state, so it takes the general path.
  d.express = c.express && !(c.handler == HandlerKind::kCustom && c.custom_state_bytes);

  // Each queue: its rings, scratch and counters, its QP, its share of the pages (a region of
  // their own, so that a sensor's page numbers are its queue's).
  queues_.reserve(c.queues);
  for (uint32_t q = 0; q < c.queues; ++q) {
    HostQueue& hq = queues_.emplace_back();
    hq.wire = Buffer(wire_at, tx.end);
    hq.host_rings = Buffer(host_facing, cp.end);
    hq.scratch = Buffer(engine_private, size_t(c.msg_buf_bytes) + c.slot_bytes);
    hq.desc = d;
    EngineDesc& qd = hq.desc;
    qd.qp.qpn = steering_.qpn(q);
    if (steering_.by == SteerBy::kQp) qd.qp.peer_qpn = c.qp.peer_qpn + q;
    if (c.handler == HandlerKind::kFrames) {
      hq.first_page = q * pages_per_queue;
      MemRegion& pages = qd.regions[c.frames_region];
      const uint64_t skip = uint64_t(hq.first_page) * c.frames_page_bytes;
      pages = MemRegion{pages.va + skip, pages.rkey,
                        uint32_t(pages_per_queue * c.frames_page_bytes), pages.base + skip};
      qd.frames.page_free =
          reinterpret_cast<uint32_t*>(on_gpu_ ? page_free_.device() : page_free_.host()) +
          hq.first_page;
    }
    if (custom) {
      qd.handler.custom.queue = uint16_t(q);
      if (custom_stride) qd.handler.custom.state = custom_state_.data() + size_t(q) * custom_stride;
    }
    qd.msg_buf = hq.scratch.data();
    qd.reply_scratch = hq.scratch.data() + c.msg_buf_bytes;
    uint8_t* wire = on_gpu_ ? hq.wire.device() : hq.wire.host();
    qd.rx = rx_ring(wire, rx, rx_log2, c.slot_bytes);
    qd.tx = tx_ring(wire, tx, tx_log2, c.slot_bytes);
    uint8_t* hr = on_gpu_ ? hq.host_rings.device() : hq.host_rings.host();
    qd.host_tx = rx_ring(hr, ht, host_log2, c.slot_bytes);
    qd.completions = tx_ring(hr, cp, comp_log2, c.completion_slot_bytes);
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
  if (cfg_.nic == NicKind::kSocket) {  // sockets first: a failure leaves nothing running
    SocketNicConfig nc = cfg_.socket;
    nc.addresses = cfg_.local;
    std::vector<NicQueue> rings;
    for (HostQueue& q : queues_)
      rings.push_back(NicQueue{rx_view(q, false), q.inject_prod, tx_view(q, false), q.collect_ci,
                               q.desc.counters, &q.ring_drops});
    // The NIC writes the counters where the host reads them (the descriptors' are the
    // executor's view, which is the same memory seen from the GPU).
    for (uint32_t q = 0; q < rings.size(); ++q)
      rings[q].counters = reinterpret_cast<Counters*>(counters_.host()) + q;
    nic_ = std::make_unique<SocketNic>(nc, steering_, std::move(rings));
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
  if (nic_) nic_->start();
}

// Counts a call in progress for stop(); refuses one that begins after stop() did.
class Transceiver::CallGuard {
 public:
  CallGuard(const Transceiver& t, const char* what) : t_(t) {
    t_.active_calls_.fetch_add(1, std::memory_order_acq_rel);
    if (t_.closing_.load(std::memory_order_acquire)) {
      t_.active_calls_.fetch_sub(1, std::memory_order_acq_rel);
      throw std::logic_error(std::string(what) + ": the transceiver is stopped");
    }
  }
  ~CallGuard() { t_.active_calls_.fetch_sub(1, std::memory_order_acq_rel); }
  CallGuard(const CallGuard&) = delete;
  CallGuard& operator=(const CallGuard&) = delete;

 private:
  const Transceiver& t_;
};

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
  store_release<Scope::kSystem>(&far_stop_, 1);  // a CPU far end ends its run
  std::string nic_error;
  if (nic_) {  // the wire goes quiet first
    try {
      nic_->stop();
    } catch (const std::exception& e) {
      nic_error = e.what();
    }
    final_nic_stats_ = nic_->stats();
    final_nic_info_ = nic_->info();
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
  // The engines are stopped (a GPU far end saw the same flag): what runs in
  // other threads now ends by itself.
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
  nic_.reset();
  if (!nic_error.empty()) throw std::runtime_error("the socket NIC failed: " + nic_error);
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

cuda::EpochStats Transceiver::epoch_stats() const {
  if (stopped_ || !executor_) return final_epoch_stats_;
  return executor_->stats();
}

SocketNicStats Transceiver::nic_stats() const {
  if (stopped_ || !nic_) return final_nic_stats_;
  return nic_->stats();
}

SocketNicInfo Transceiver::nic_info() const {
  if (stopped_ || !nic_) return final_nic_info_;
  return nic_->info();
}

void Transceiver::require_loopback(const char* what) const {
  if (cfg_.nic != NicKind::kLoopback)
    throw std::logic_error(std::string(what) +
                           ": the wire is the socket NIC (nic='socket'); this call drives the "
                           "loopback wire only");
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
  if (nic_ && !stopped_) {
    const std::string e = nic_->error();
    if (!e.empty()) throw std::runtime_error("the socket NIC failed: " + e);
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

bool Transceiver::inject(const uint8_t* frame, size_t len, bool count_drop) {
  const CallGuard guard(*this, "inject()");
  require_loopback("inject()");
  if (wire_device_)
    throw std::logic_error(
        "inject(): the far end is on the GPU (far_end='gpu'); use far_end='cpu'");
  if (len > cfg_.slot_bytes)
    throw std::invalid_argument(
        "inject: a " + std::to_string(len) +
        "-byte frame exceeds slot_bytes=" + std::to_string(cfg_.slot_bytes));
  HostQueue& q = queues_[steer_frame(steering_, frame, uint32_t(len))];
  const ProduceResult r =
      rx_produce<Scope::kSystem>(rx_view(q, false), q.inject_prod, frame, uint32_t(len), now_ns());
  if (r == ProduceResult::kOk) return true;
  if (count_drop) count_ring_drop(q);
  return false;
}

size_t Transceiver::preload(const std::vector<std::string>& frames) {
  require_open("preload()");
  require_loopback("preload()");
  if (started_) throw std::logic_error("preload(): before start() only");
  for (const std::string& f : frames)
    if (f.size() > cfg_.slot_bytes)
      throw std::invalid_argument(
          "preload: a " + std::to_string(f.size()) +
          "-byte frame exceeds slot_bytes=" + std::to_string(cfg_.slot_bytes));
  // Each ring's memory as its engine will find it: an image in host memory, filled by the
  // producer's own code, then copied in whole.
  std::vector<std::vector<uint8_t>> images;
  for (const HostQueue& q : queues_) {
    images.emplace_back(q.wire.size());
    q.wire.read(0, images.back().data(), images.back().size());
  }
  size_t n = 0;
  for (const std::string& f : frames) {
    const auto* bytes = reinterpret_cast<const uint8_t*>(f.data());
    const uint32_t qi = steer_frame(steering_, bytes, uint32_t(f.size()));
    HostQueue& q = queues_[qi];
    const RxRing ring =
        rx_ring(images[qi].data(), desc_views_.rx, desc_views_.rx_log2, cfg_.slot_bytes);
    if (rx_produce<Scope::kSystem>(ring, q.inject_prod, bytes, uint32_t(f.size()), now_ns()) !=
        ProduceResult::kOk)
      break;
    ++n;
  }
  for (uint32_t qi = 0; qi < queues_.size(); ++qi)
    queues_[qi].wire.write(0, images[qi].data(), images[qi].size());
  return n;
}

std::vector<std::vector<uint8_t>> Transceiver::collect(size_t max) {
  const CallGuard guard(*this, "collect()");
  require_loopback("collect()");
  if (wire_device_)
    throw std::logic_error(
        "collect(): the far end is on the GPU (far_end='gpu'); use far_end='cpu'");
  std::vector<std::vector<uint8_t>> out;
  for (HostQueue& q : queues_) {
    const TxRing r = tx_view(q, false);
    while (out.size() < max) {
      const TxDesc* d = tx_poll<Scope::kSystem>(r, q.collect_ci);
      if (!d) break;
      const uint8_t* slot = r.slot(q.collect_ci);
      out.emplace_back(slot, slot + d->len);
      ++q.collect_ci;
      tx_consume<Scope::kSystem>(r, q.collect_ci);
    }
  }
  return out;
}

namespace {

// A queue's share of a schedule of `count` requests dealt out in turn to `queues` queues.
uint32_t share_of(uint32_t count, uint32_t queues, uint32_t q) {
  return count / queues + (q < count % queues ? 1 : 0);
}

// The queues' results as one: counts added up, the first status that is not "done", the
// earliest start and latest reply (one clock: the host's, or the GPU's global timer).
FarEndResult add_up(const std::vector<FarEndResult>& rs) {
  FarEndResult all{};
  all.status = uint32_t(FarEndStatus::kDone);
  uint64_t start = ~uint64_t(0), last = 0;
  for (const FarEndResult& r : rs) {
    if (all.status == uint32_t(FarEndStatus::kDone)) all.status = r.status;
    all.sent += r.sent;
    all.received += r.received;
    all.wrong += r.wrong;
    all.bad_frames += r.bad_frames;
    all.ring_full += r.ring_full;
    all.late += r.late;
    all.dropped += r.dropped;
    all.matched += r.matched;
    all.slow_checks += r.slow_checks;
    all.send_ns += r.send_ns;
    all.check_ns += r.check_ns;
    all.max_lag_ns = std::max(all.max_lag_ns, r.max_lag_ns);
    start = std::min(start, r.start_ns);
    last = std::max(last, r.last_reply_ns);
  }
  all.start_ns = rs.empty() ? 0 : start;
  all.last_reply_ns = last;
  all.elapsed_ns = last > all.start_ns ? last - all.start_ns : 0;
  return all;
}

// A queue's round trips from its `times` (the first r.matched entries: round trips, and
// dropped requests in between).
void append_rtts(std::vector<uint64_t>& out, const uint64_t* times, const FarEndResult& r) {
  for (uint32_t i = 0; i < r.matched; ++i)
    if (times[i] != kFarEndDropped) out.push_back(times[i]);
}

}  // namespace

FarEndRun Transceiver::run_far_end(const FarEndParams& p) {
  const CallGuard guard(*this, "run_far_end()");
  const DeviceScope on_device(cfg_.cuda_device);  // a GPU far end runs beside the loop
  require_loopback("roundtrip()");
  if (!running()) throw std::logic_error("run_far_end(): start() the transceiver first");
  if (p.payload_len == 0 || p.payloads.empty() || p.payloads.size() % p.payload_len)
    throw std::invalid_argument(
        "far end payloads: need a whole number of payload_len-byte requests");
  const uint32_t num = uint32_t(p.payloads.size() / p.payload_len);
  const bool echo = p.expected.empty();
  if (!echo && p.expected.size() != size_t(num) * p.expected_len)
    throw std::invalid_argument("far end expected replies: need one per request payload");
  if (p.count == 0 || p.window == 0)
    throw std::invalid_argument("far end: count and window must be at least 1");
  if (p.queues == 0 || p.queues > queues_.size())
    throw std::invalid_argument("far end: queues=" + std::to_string(p.queues) + ": must be 1 to " +
                                std::to_string(queues_.size()) + " (queues.count)");
  if (p.count < p.queues)
    throw std::invalid_argument(
        "far end: count=" + std::to_string(p.count) +
        ": at least one request a queue (queues=" + std::to_string(p.queues) + ")");
  const bool seq = p.seq_in_payload && echo && p.payload_len >= 4;

  // Queue q's requests: the queue's QP (steered by QP), or a UDP source port the NIC's
  // steering takes to it (by port: every queue is the one QP).
  FrameSpec spec;
  std::memcpy(spec.src_mac, cfg_.local.dst_mac, 6);
  std::memcpy(spec.dst_mac, cfg_.local.src_mac, 6);
  spec.ip_version = cfg_.local.ip_version;
  std::memcpy(spec.src_ip, cfg_.local.dst_ip, 16);
  std::memcpy(spec.dst_ip, cfg_.local.src_ip, 16);
  spec.dst_port = kRoceV2Port;
  spec.vlan = cfg_.local.vlan;
  spec.vlan_tci = cfg_.local.vlan_tci;
  spec.opcode = make_opcode(cfg_.qp.transport, 0x04);  // SEND_ONLY
  spec.pkey = cfg_.qp.pkey;
  spec.ack_req = cfg_.qp.transport == Transport::RC;
  if (encoded_size(spec, p.payload_len) > cfg_.slot_bytes)
    throw std::invalid_argument(
        "far end: a " + std::to_string(p.payload_len) +
        "-byte request does not fit slot_bytes=" + std::to_string(cfg_.slot_bytes));
  const uint16_t base_port = cfg_.local.dst_port == kRoceV2Port ? 49152 : cfg_.local.dst_port;

  std::vector<TemplateSet> requests, replies;
  for (uint32_t q = 0; q < p.queues; ++q) {
    FrameSpec s = spec;
    s.dest_qp = queues_[q].desc.qp.qpn;
    s.src_port = steering_.by == SteerBy::kUdpSport
                     ? uint16_t(base_port - base_port % steering_.count + q)
                     : base_port;
    requests.push_back(encode_templates(s, p.payloads.data(), p.payload_len, num, seq, "request"));
    const EngineDesc& qd = queues_[q].desc;
    replies.push_back(encode_templates(reply_send_spec(qd),
                                       echo ? p.payloads.data() : p.expected.data(),
                                       echo ? p.payload_len : p.expected_len, num, seq, "reply"));
  }
  if (replies[0].len > cfg_.slot_bytes)
    throw std::invalid_argument(
        "far end: a " + std::to_string(replies[0].len) +
        "-byte reply does not fit slot_bytes=" + std::to_string(cfg_.slot_bytes));
  // The patch tables depend on the frames' layout and length only: one for every queue.
  const std::vector<uint32_t> request_deltas = icrc_deltas(requests[0]);
  const std::vector<uint32_t> reply_deltas = icrc_deltas(replies[0]);

  std::vector<FarEndDesc> descs(p.queues);
  std::vector<size_t> first_time(p.queues);  // where queue q's times start
  size_t times_total = 0;
  for (uint32_t q = 0; q < p.queues; ++q) {
    HostQueue& hq = queues_[q];
    FarEndDesc& d = descs[q];
    d.rx = rx_view(hq, true);
    d.tx = tx_view(hq, true);
    d.own_qpn = hq.desc.qp.peer_qpn;
    d.count = share_of(p.count, p.queues, q);
    d.window = p.window;
    // The schedule is dealt out in turn: queue q takes requests q, q + queues, ...
    d.interval_ns = p.interval_ns * p.queues;
    d.phase_ns = p.interval_ns * q;
    d.late_ns = p.late_ns ? p.late_ns : p.interval_ns;
    d.drop_ns = p.drop_ns;
    d.timeout_ns = uint64_t(p.timeout_s * 1e9);
    d.first_psn = hq.far_psn;
    d.rx_start = hq.inject_prod;
    d.tx_start = hq.collect_ci;
    first_time[q] = times_total;
    times_total += d.count;
  }

  FarEndRun run;
  run.queues.resize(p.queues);
  if (!wire_device_) {
    std::vector<uint64_t> times(times_total);
    std::vector<std::vector<Chunk16>> scratch(p.queues);
    for (uint32_t q = 0; q < p.queues; ++q) {
      FarEndDesc& d = descs[q];
      d.requests = requests[q].view(requests[q].frame(0), request_deltas.data());
      d.replies = replies[q].view(replies[q].frame(0), reply_deltas.data());
      d.times = times.data() + first_time[q];
      scratch[q].resize(2 * ((cfg_.slot_bytes + 15) / 16));
      d.frame = reinterpret_cast<uint8_t*>(scratch[q].data());
      d.expect = d.frame + (cfg_.slot_bytes + 15) / 16 * 16;
      d.result = &run.queues[q];
    }
    if (p.queues == 1) {
      far_end_run<Scope::kSystem>(descs[0], &far_stop_);
    } else {  // a thread a queue, as a NIC's queues are fed in parallel
      std::vector<std::thread> threads;
      for (uint32_t q = 0; q < p.queues; ++q)
        threads.emplace_back([&, q] { far_end_run<Scope::kSystem>(descs[q], &far_stop_); });
      for (std::thread& t : threads) t.join();
    }
    for (uint32_t q = 0; q < p.queues; ++q)
      append_rtts(run.rtt_ns, times.data() + first_time[q], run.queues[q]);
  } else {
    size_t request_bytes = 0, reply_bytes = 0;
    for (uint32_t q = 0; q < p.queues; ++q) {
      request_bytes += requests[q].size_bytes();
      reply_bytes += replies[q].size_bytes();
    }
    if (times_total > kGpuFarEndMaxCount || request_bytes > kGpuFarEndMaxTemplateBytes ||
        reply_bytes > kGpuFarEndMaxTemplateBytes)
      throw std::invalid_argument(
          "far end on the GPU: at most " + std::to_string(kGpuFarEndMaxCount) +
          " requests a run and " + std::to_string(kGpuFarEndMaxTemplateBytes) +
          " bytes of request (and of reply) frames over its queues; this run: " +
          std::to_string(times_total) + " requests, " + std::to_string(num) + " payloads x " +
          std::to_string(p.queues) + " queues = " + std::to_string(request_bytes) + " and " +
          std::to_string(reply_bytes) + " bytes");
    const size_t table_bytes = request_deltas.size() * sizeof(uint32_t);
    far_tables_.write(0, request_deltas.data(), table_bytes);
    far_tables_.write(table_bytes, reply_deltas.data(), table_bytes);
    const auto* tables = reinterpret_cast<const uint32_t*>(far_tables_.device());
    size_t request_at = 0, reply_at = 0;
    for (uint32_t q = 0; q < p.queues; ++q) {
      FarEndDesc& d = descs[q];
      far_requests_.write(request_at, requests[q].bytes.data(), requests[q].size_bytes());
      far_replies_.write(reply_at, replies[q].bytes.data(), replies[q].size_bytes());
      d.requests = requests[q].view(far_requests_.device() + request_at, tables);
      d.replies = replies[q].view(far_replies_.device() + reply_at, tables + kPatchBytes * 256);
      request_at += requests[q].size_bytes();
      reply_at += replies[q].size_bytes();
      d.times = reinterpret_cast<uint64_t*>(far_times_.device()) + first_time[q];
      d.frame = d.expect = nullptr;  // the kernel stages in its shared memory
      d.result = reinterpret_cast<FarEndResult*>(far_results_.device()) + q;
    }
    far_descs_.write(0, descs.data(), descs.size() * sizeof(FarEndDesc));
    const size_t scratch_bytes = 2 * ((size_t(cfg_.slot_bytes) + 15) / 16 * 16);
    executor_->run_far_end(reinterpret_cast<const FarEndDesc*>(far_descs_.device()), p.queues,
                           scratch_bytes, p.timeout_s);
    far_results_.read(0, run.queues.data(), p.queues * sizeof(FarEndResult));
    std::vector<uint64_t> times(times_total);
    far_times_.read(0, times.data(), times.size() * sizeof(uint64_t));
    for (uint32_t q = 0; q < p.queues; ++q)
      append_rtts(run.rtt_ns, times.data() + first_time[q], run.queues[q]);
  }
  for (uint32_t q = 0; q < p.queues; ++q) {
    HostQueue& hq = queues_[q];
    hq.inject_prod = run.queues[q].rx_end;
    hq.collect_ci = run.queues[q].tx_end;
    hq.far_psn = psn_add(hq.far_psn, run.queues[q].sent);
  }
  run.result = add_up(run.queues);
  return run;
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
