#include "rt/host/transceiver.h"

#include <pthread.h>
#include <sched.h>

#include <chrono>
#include <cstring>
#include <future>
#include <stdexcept>
#include <thread>

#include "rt/cuda/engine_launch.h"
#include "rt/engine/batch.h"

namespace rt::host {
namespace {

constexpr uint32_t kLine = 64;  // every shared index on its own cache line

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

// 0, or the errno of the failure: a loop that is not where the configuration put it shows
// only as slow latency, so the caller reports it rather than running on.
int pin_to_core(int core) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(core, &set);  // core < CPU_SETSIZE: the constructor checked
  return pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

}  // namespace

Transceiver::Transceiver(TransceiverConfig config) : cfg_(std::move(config)) {
  const TransceiverConfig& c = cfg_;
  if (c.executor != "cpu" && c.executor != "cuda")
    throw std::invalid_argument("executor='" + c.executor + "': must be 'cpu' or 'cuda'");
  if (c.far_end != "cpu" && c.far_end != "gpu")
    throw std::invalid_argument("far_end='" + c.far_end + "': must be 'cpu' or 'gpu'");
  on_gpu_ = c.executor == "cuda";
  if (c.far_end == "gpu" && !on_gpu_)
    throw std::invalid_argument("far_end='gpu' needs executor='cuda'");
  if (c.nic != "loopback" && c.nic != "socket")
    throw std::invalid_argument("nic='" + c.nic + "': must be 'loopback' or 'socket'");
  if (c.nic == "socket" && c.far_end != "cpu")
    throw std::invalid_argument(
        "nic='socket' with far_end='gpu': the socket NIC is a CPU thread, its rings sit in "
        "host memory (far_end='cpu')");
  wire_device_ = c.far_end == "gpu";
  std::string why;
  if (on_gpu_ && !cuda_usable(&why))
    throw std::runtime_error("executor='cuda' cannot run here: " + why);
  if (c.qp.transport != Transport::RC && c.qp.transport != Transport::UC)
    throw std::invalid_argument("qp.transport: must be RC or UC");
  if (c.slot_bytes < 128 || c.slot_bytes % 64 || c.slot_bytes > 65536)
    throw std::invalid_argument("slot_bytes=" + std::to_string(c.slot_bytes) +
                                ": must be a multiple of 64 from 128 to 65536");
  if (c.completion_slot_bytes < 128 || c.completion_slot_bytes % 64)
    throw std::invalid_argument("completion_slot_bytes=" + std::to_string(c.completion_slot_bytes) +
                                ": must be a multiple of 64, at least 128");
  if (c.batch < 1 || c.batch > 1024)
    throw std::invalid_argument("batch=" + std::to_string(c.batch) + ": must be 1 to 1024");
  if (c.cpu_core >= CPU_SETSIZE)  // CPU_SET past the set's end would write out of bounds
    throw std::invalid_argument("cpu_core=" + std::to_string(c.cpu_core) + ": must be below " +
                                std::to_string(CPU_SETSIZE) + " (CPU_SETSIZE)");
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
  wire_ = Buffer(wire_at, tx.end);
  const RingLayout ht = lay_out(0, c.host_tx_depth, c.slot_bytes);
  const RingLayout cp = lay_out(ht.end, c.completion_depth, c.completion_slot_bytes);
  host_rings_ = Buffer(host_facing, cp.end);
  counters_ = Buffer(host_facing, sizeof(Counters));
  state_ = Buffer(engine_private, sizeof(EngineState));
  scratch_ = Buffer(engine_private, size_t(c.msg_buf_bytes) + c.slot_bytes);
  if (on_gpu_) heartbeat_ = Buffer(Placement::kPinned, sizeof(uint64_t));
  if (wire_device_) {
    far_payloads_ = Buffer(Placement::kDevice, kGpuFarEndMaxPayloadBytes);
    far_expected_ = Buffer(Placement::kDevice, kGpuFarEndMaxPayloadBytes);
    far_times_ = Buffer(Placement::kDevice, size_t(kGpuFarEndMaxCount) * sizeof(uint64_t));
    far_result_ = Buffer(Placement::kDevice, sizeof(FarEndResult));
  }

  EngineDesc& d = desc_;
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
  if (c.handler == HandlerKind::kFrames) {
    if (c.frames_region >= c.regions.size())
      throw std::invalid_argument("frames: region " + std::to_string(c.frames_region) +
                                  " is not configured");
    if (c.frames_pages == 0 || c.frames_pages > kMaxPages || c.frames_page_bytes == 0 ||
        uint64_t(c.frames_pages) * c.frames_page_bytes > c.regions[c.frames_region].length)
      throw std::invalid_argument("frames: " + std::to_string(c.frames_pages) + " pages of " +
                                  std::to_string(c.frames_page_bytes) +
                                  " bytes do not fit the region (at most 4096 pages)");
    if (!c.record_completions ||
        completion_data_bytes(c.completion_slot_bytes) < sizeof(FrameRecord))
      throw std::invalid_argument(
          "frames: the host gets frames as completion records: completions on, "
          "completion_slot_bytes >= " +
          std::to_string(sizeof(CompletionRecord) + 2 * sizeof(FrameRecord)));
    page_free_ = Buffer(host_facing, size_t(c.frames_pages) * sizeof(uint32_t));
    const std::vector<uint32_t> ones(c.frames_pages, 1u);
    page_free_.write(0, ones.data(), ones.size() * sizeof(uint32_t));
    d.frames =
        FramesDesc{c.frames_region,
                   c.frames_page_bytes,
                   c.frames_pages,
                   c.frames_metadata,
                   c.frames_check_crc,
                   reinterpret_cast<uint32_t*>(on_gpu_ ? page_free_.device() : page_free_.host())};
  }
  d.msg_buf = scratch_.data();
  d.msg_buf_bytes = c.msg_buf_bytes;
  d.reply_scratch = scratch_.data() + c.msg_buf_bytes;
  d.reply_scratch_bytes = c.slot_bytes;
  d.batch = c.batch;
  d.check_icrc = c.check_icrc;
  d.record_completions = c.record_completions;
  d.express = c.express;
  uint8_t* wire = on_gpu_ ? wire_.device() : wire_.host();
  d.rx = rx_ring(wire, rx, rx_log2, c.slot_bytes);
  d.tx = tx_ring(wire, tx, tx_log2, c.slot_bytes);
  uint8_t* hr = on_gpu_ ? host_rings_.device() : host_rings_.host();
  d.host_tx = rx_ring(hr, ht, host_log2, c.slot_bytes);
  d.completions = tx_ring(hr, cp, comp_log2, c.completion_slot_bytes);
  d.counters = reinterpret_cast<Counters*>(on_gpu_ ? counters_.device() : counters_.host());
  desc_views_.rx = rx;
  desc_views_.tx = tx;
  desc_views_.ht = ht;
  desc_views_.cp = cp;
  desc_views_.rx_log2 = rx_log2;
  desc_views_.tx_log2 = tx_log2;
  desc_views_.ht_log2 = host_log2;
  desc_views_.cp_log2 = comp_log2;
  far_psn_ = c.qp.rx_psn & kPsnMask;
}

Transceiver::~Transceiver() {
  try {
    stop();
  } catch (...) {
    // stop() already reported; a destructor must not throw.
  }
}

RxRing Transceiver::rx_view(bool far) const {
  uint8_t* base = far && wire_device_ ? wire_.device() : (wire_device_ ? nullptr : wire_.host());
  return rx_ring(base, desc_views_.rx, desc_views_.rx_log2, cfg_.slot_bytes);
}

TxRing Transceiver::tx_view(bool far) const {
  uint8_t* base = far && wire_device_ ? wire_.device() : (wire_device_ ? nullptr : wire_.host());
  return tx_ring(base, desc_views_.tx, desc_views_.tx_log2, cfg_.slot_bytes);
}

void Transceiver::start() {
  require_open("start()");
  if (started_) throw std::logic_error("start(): already started (a Transceiver starts once)");
  EngineState st;
  engine_init(desc_, &st);
  state_.write(0, &st, sizeof st);
  if (cfg_.nic == "socket") {  // sockets first: a failure leaves nothing running
    SocketNicConfig nc = cfg_.socket;
    nc.qpn = cfg_.qp.qpn;
    nc.addresses = cfg_.local;
    nic_ =
        std::make_unique<SocketNic>(nc, rx_view(false), inject_prod_, tx_view(false), collect_ci_,
                                    reinterpret_cast<Counters*>(counters_.host()), &ring_drops_);
  }
  started_ = true;
  if (on_gpu_) {
    kernel_ = std::make_unique<cuda::EngineKernel>();
    kernel_->start(
        desc_, reinterpret_cast<EngineState*>(state_.device()), wire_device_,
        reinterpret_cast<uint64_t*>(heartbeat_.host()),
        cuda::LaunchOptions{cfg_.cuda_epoch_us, cfg_.cuda_epochs_in_flight, cfg_.cuda_warps});
  } else {
    stop_.store(false);
    std::promise<int> pinned;
    std::future<int> pin_result = pinned.get_future();
    thread_ = std::thread([this, p = std::move(pinned)]() mutable {
      const int err = cfg_.cpu_core >= 0 ? pin_to_core(cfg_.cpu_core) : 0;
      p.set_value(err);
      if (err == 0) cpu_loop();
    });
    if (const int err = pin_result.get(); err != 0) {
      thread_.join();    // it ran no step; stop() frees the rest (the NIC was never started)
      started_ = false;  // running() says no
      throw std::runtime_error("cpu_core=" + std::to_string(cfg_.cpu_core) +
                               ": cannot pin the cpu executor's thread there "
                               "(pthread_setaffinity_np: " +
                               std::strerror(err) +
                               "); the process may run on the cores of its affinity mask "
                               "(taskset -p)");
    }
  }
  if (nic_) nic_->start();
}

void Transceiver::cpu_loop() {
  EngineState& st = *reinterpret_cast<EngineState*>(state_.host());
  // The same batch step as the GPU's crew of warps, with a crew of one: frames
  // classified, committed in order, placed (engine/batch.h).
  Batch& batch = cpu_batch_;
  batch_init(batch, batch_depth(desc_, 0, false), nullptr, st.rx_ci);
  // Idle: spin, and now and then let other threads run. With more spinning threads than cores
  // (two engines, a NIC thread and a peer on a 2-core machine) a pure spin holds the core for
  // a whole time slice (milliseconds) while the thread it waits for cannot run.
  uint32_t idle = 0;
  while (!stop_.load(std::memory_order_acquire)) {
    if (crew_step<Scope::kSystem>(SoloCrew{}, desc_, st, batch) != 0) {
      idle = 0;
    } else if (++idle % 1024 == 0) {
      std::this_thread::yield();
    } else {
      spin_pause();
    }
  }
  publish<Scope::kSystem>(st.tally, desc_.counters);  // stats() after stop() are exact
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
  if (started_) {
    if (kernel_) {
      kernel_->stop(cfg_.stop_timeout_s);  // throws, keeping every buffer, if it will not stop
    } else {
      stop_.store(true, std::memory_order_release);
      if (thread_.joinable()) thread_.join();
      final_epoch_stats_.batch_depth = cpu_batch_.depth;  // the thread's, now it is done
      final_epoch_stats_.batches = cpu_batch_.batches;
      final_epoch_stats_.batch_frames = cpu_batch_.batch_frames;
    }
  }
  // The engine is stopped (a GPU far end saw the same flag): what runs in
  // other threads now ends by itself.
  wait_for_calls(cfg_.stop_timeout_s);
  stopped_ = true;
  final_counters_ = read_counters();
  if (kernel_) final_epoch_stats_ = kernel_->epoch_stats();
  // Free now rather than when Python collects the object: freeing pinned or
  // device memory later could wait on another transceiver's running kernel.
  // Regions are the exception: a frame the host still holds keeps its region
  // (host memory, or device memory freed with cudaFreeAsync on the memory
  // stream, which waits for no kernel) until the frame goes.
  kernel_.reset();
  regions_.clear();
  wire_ = Buffer();
  host_rings_ = Buffer();
  counters_ = Buffer();
  state_ = Buffer();
  scratch_ = Buffer();
  qec_ = Buffer();
  page_free_ = Buffer();
  heartbeat_ = Buffer();
  far_payloads_ = Buffer();
  far_expected_ = Buffer();
  far_times_ = Buffer();
  far_result_ = Buffer();
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
  if (stopped_ || !kernel_) return final_epoch_stats_;
  return kernel_->epoch_stats();
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
  if (cfg_.nic != "loopback")
    throw std::logic_error(std::string(what) + ": the wire is the socket NIC (nic='" + cfg_.nic +
                           "'); this call drives the loopback wire only");
}

void Transceiver::require_open(const char* what) const {
  if (stopped_) throw std::logic_error(std::string(what) + ": the transceiver is stopped");
}

bool Transceiver::running() const {
  if (!started_ || stopped_) return false;
  return kernel_ ? kernel_->running() : true;
}

void Transceiver::check() const {
  if (kernel_) kernel_->check();
  if (nic_ && !stopped_) {
    const std::string e = nic_->error();
    if (!e.empty()) throw std::runtime_error("the socket NIC failed: " + e);
  }
}

std::vector<uint64_t> Transceiver::counters() const {
  return stopped_ ? final_counters_ : read_counters();
}

std::vector<uint64_t> Transceiver::read_counters() const {
  std::vector<uint64_t> out(kNumCounters);
  const Counters* c = reinterpret_cast<const Counters*>(counters_.host());
  for (uint32_t i = 0; i < kNumCounters; ++i) out[i] = load_relaxed<Scope::kSystem>(&c->v[i]);
  return out;
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
  const RxRing r =
      rx_ring(host_rings_.host(), desc_views_.ht, desc_views_.ht_log2, cfg_.slot_bytes);
  return rx_produce<Scope::kSystem>(r, host_prod_, data, uint32_t(len), now_ns()) ==
         ProduceResult::kOk;
}

std::vector<Completion> Transceiver::poll_completions(size_t max) {
  const CallGuard guard(*this, "poll_completions()");
  const TxRing r =
      tx_ring(host_rings_.host(), desc_views_.cp, desc_views_.cp_log2, cfg_.completion_slot_bytes);
  const uint32_t half = completion_data_bytes(cfg_.completion_slot_bytes);
  std::vector<Completion> out;
  while (out.size() < max && tx_poll<Scope::kSystem>(r, comp_ci_)) {
    const uint8_t* slot = r.slot(comp_ci_);
    Completion c;
    std::memcpy(&c.record, slot, sizeof c.record);
    const uint32_t req = c.record.request_len < half ? c.record.request_len : half;
    const uint32_t rep = c.record.reply_len > 0
                             ? (uint32_t(c.record.reply_len) < half ? c.record.reply_len : half)
                             : 0;
    c.request.assign(slot + sizeof c.record, slot + sizeof c.record + req);
    c.reply.assign(slot + sizeof c.record + half, slot + sizeof c.record + half + rep);
    out.push_back(std::move(c));
    ++comp_ci_;
    tx_consume<Scope::kSystem>(r, comp_ci_);
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
  const ProduceResult r =
      rx_produce<Scope::kSystem>(rx_view(false), inject_prod_, frame, uint32_t(len), now_ns());
  if (r == ProduceResult::kOk) return true;
  if (!count_drop) return false;
  Counters* c = reinterpret_cast<Counters*>(counters_.host());
  store_relaxed<Scope::kSystem>(&c->v[uint32_t(Counter::kRingDrops)], ++ring_drops_);
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
  // The ring's memory as the engine will find it: an image in host memory, filled by the
  // producer's own code, then copied in whole.
  std::vector<uint8_t> image(wire_.size());
  wire_.read(0, image.data(), image.size());
  const RxRing ring = rx_ring(image.data(), desc_views_.rx, desc_views_.rx_log2, cfg_.slot_bytes);
  size_t n = 0;
  for (const std::string& f : frames) {
    if (rx_produce<Scope::kSystem>(ring, inject_prod_, reinterpret_cast<const uint8_t*>(f.data()),
                                   uint32_t(f.size()), now_ns()) != ProduceResult::kOk)
      break;
    ++n;
  }
  wire_.write(0, image.data(), image.size());
  return n;
}

std::vector<std::vector<uint8_t>> Transceiver::collect(size_t max) {
  const CallGuard guard(*this, "collect()");
  require_loopback("collect()");
  if (wire_device_)
    throw std::logic_error(
        "collect(): the far end is on the GPU (far_end='gpu'); use far_end='cpu'");
  const TxRing r = tx_view(false);
  std::vector<std::vector<uint8_t>> out;
  while (out.size() < max) {
    const TxDesc* d = tx_poll<Scope::kSystem>(r, collect_ci_);
    if (!d) break;
    const uint8_t* slot = r.slot(collect_ci_);
    out.emplace_back(slot, slot + d->len);
    ++collect_ci_;
    tx_consume<Scope::kSystem>(r, collect_ci_);
  }
  return out;
}

FarEndRun Transceiver::run_far_end(const FarEndParams& p) {
  const CallGuard guard(*this, "run_far_end()");
  require_loopback("roundtrip()");
  if (!running()) throw std::logic_error("run_far_end(): start() the transceiver first");
  if (p.payload_len == 0 || p.payloads.empty() || p.payloads.size() % p.payload_len)
    throw std::invalid_argument(
        "far end payloads: need a whole number of payload_len-byte requests");
  const uint32_t num = uint32_t(p.payloads.size() / p.payload_len);
  if (!p.expected.empty() && p.expected.size() != size_t(num) * p.expected_len)
    throw std::invalid_argument("far end expected replies: need one per request payload");
  if (p.count == 0 || p.window == 0)
    throw std::invalid_argument("far end: count and window must be at least 1");

  FrameSpec spec;
  std::memcpy(spec.src_mac, cfg_.local.dst_mac, 6);
  std::memcpy(spec.dst_mac, cfg_.local.src_mac, 6);
  spec.ip_version = cfg_.local.ip_version;
  std::memcpy(spec.src_ip, cfg_.local.dst_ip, 16);
  std::memcpy(spec.dst_ip, cfg_.local.src_ip, 16);
  spec.src_port = cfg_.local.dst_port == kRoceV2Port ? 49152 : cfg_.local.dst_port;
  spec.dst_port = kRoceV2Port;
  spec.vlan = cfg_.local.vlan;
  spec.vlan_tci = cfg_.local.vlan_tci;
  spec.opcode = make_opcode(cfg_.qp.transport, 0x04);  // SEND_ONLY
  spec.dest_qp = cfg_.qp.qpn;
  spec.pkey = cfg_.qp.pkey;
  spec.ack_req = cfg_.qp.transport == Transport::RC;
  if (encoded_size(spec, p.payload_len) > cfg_.slot_bytes)
    throw std::invalid_argument(
        "far end: a " + std::to_string(p.payload_len) +
        "-byte request does not fit slot_bytes=" + std::to_string(cfg_.slot_bytes));

  FarEndDesc d{};
  d.spec = spec;
  d.own_qpn = cfg_.qp.peer_qpn;
  d.payload_len = p.payload_len;
  d.num_payloads = num;
  d.expected_len = p.expected_len;
  d.count = p.count;
  d.window = p.window;
  d.interval_ns = p.interval_ns;
  d.timeout_ns = uint64_t(p.timeout_s * 1e9);
  d.first_psn = far_psn_;
  d.rx_start = inject_prod_;
  d.tx_start = collect_ci_;
  d.seq_in_payload = p.seq_in_payload && p.expected.empty() ? 1 : 0;

  FarEndRun run;
  if (!wire_device_) {
    std::vector<uint8_t> frame(cfg_.slot_bytes);
    std::vector<uint64_t> times(p.count);
    FarEndResult result{};
    d.rx = rx_view(true);
    d.tx = tx_view(true);
    d.payloads = p.payloads.data();
    d.expected = p.expected.empty() ? nullptr : p.expected.data();
    d.times = times.data();
    d.frame = frame.data();
    d.result = &result;
    far_end_run<Scope::kSystem>(d, &far_stop_);
    run.result = result;
    run.rtt_ns.assign(times.begin(), times.begin() + result.received);
  } else {
    if (p.count > kGpuFarEndMaxCount || p.payloads.size() > kGpuFarEndMaxPayloadBytes ||
        p.expected.size() > kGpuFarEndMaxPayloadBytes)
      throw std::invalid_argument("far end on the GPU: at most " +
                                  std::to_string(kGpuFarEndMaxCount) + " requests and " +
                                  std::to_string(kGpuFarEndMaxPayloadBytes) +
                                  " bytes of payloads (or expected replies) per run");
    far_payloads_.write(0, p.payloads.data(), p.payloads.size());
    if (!p.expected.empty()) far_expected_.write(0, p.expected.data(), p.expected.size());
    d.rx = rx_view(true);
    d.tx = tx_view(true);
    d.payloads = far_payloads_.device();
    d.expected = p.expected.empty() ? nullptr : far_expected_.device();
    d.times = reinterpret_cast<uint64_t*>(far_times_.device());
    d.frame = nullptr;  // the kernel stages replies in its shared memory
    d.result = reinterpret_cast<FarEndResult*>(far_result_.device());
    kernel_->check();
    kernel_->run_far_end(d, p.timeout_s);
    far_result_.read(0, &run.result, sizeof run.result);
    run.rtt_ns.resize(run.result.received);
    far_times_.read(0, run.rtt_ns.data(), run.rtt_ns.size() * sizeof(uint64_t));
  }
  inject_prod_ = run.result.rx_end;
  collect_ci_ = run.result.tx_end;
  far_psn_ = psn_add(far_psn_, run.result.sent);
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
