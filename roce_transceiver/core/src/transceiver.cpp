// A Transceiver's life (transceiver.h): start and stop, the host's sends and completions,
// counters, regions and pages, and the loopback's calls behind the guard. Its construction:
// transceiver_setup.cpp.
#include "rt/host/transceiver.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <stdexcept>
#include <thread>

#include "call_guard.h"
#include "ring_layout.h"
#include "rt/cuda/engine_launch.h"

namespace rt::host {

using namespace ring_layout;

Transceiver::~Transceiver() {
  try {
    stop();
  } catch (...) {
    // stop() already reported; a destructor must not throw.
  }
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
  if (on_gpu_)
    executor_ =
        make_cuda_executor(std::move(descs), reinterpret_cast<EngineState*>(state_.device()),
                           wire_device_, reinterpret_cast<uint64_t*>(heartbeat_.host()),
                           cuda::LaunchOptions{cfg_.cuda_epoch_us, cfg_.cuda_epochs_in_flight,
                                               cfg_.cuda_warps, cfg_.custom_kernel_image});
  else
    executor_ = make_cpu_executor(std::move(descs), reinterpret_cast<EngineState*>(state_.host()),
                                  cfg_.cpu_core);
  nic_->start();  // the NIC first (the socket NIC opens its sockets): a failure stops here
  started_ = true;
  try {
    executor_->start();
  } catch (...) {
    started_ = false;  // nothing runs; running() says no, stop() frees the rest
    executor_.reset();
    try {
      nic_->stop();
    } catch (const std::exception&) {
      // the executor's failure is the one to report
    }
    throw;
  }
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
  std::string nic_error;
  try {  // the wire goes quiet first (the loopback's far end runs end)
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
  nic_->detach();
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

LoopbackNic& Transceiver::loopback(const char* what) const {
  auto* wire = dynamic_cast<LoopbackNic*>(nic_.get());
  if (!wire)
    throw std::logic_error(std::string(what) + ": the wire is the " + nic_->name() + " NIC (nic='" +
                           nic_->name() + "'); this call drives the loopback wire only");
  return *wire;
}

bool Transceiver::inject(const uint8_t* frame, size_t len, bool count_drop) {
  const CallGuard guard(*this, "inject()");
  return loopback("inject()").inject(frame, len, count_drop);
}

size_t Transceiver::preload(const std::vector<std::string>& frames) {
  require_open("preload()");
  LoopbackNic& wire = loopback("preload()");
  if (started_) throw std::logic_error("preload(): before start() only");
  return wire.preload(frames);
}

std::vector<std::vector<uint8_t>> Transceiver::collect(size_t max) {
  const CallGuard guard(*this, "collect()");
  return loopback("collect()").collect(max);
}

FarEndRun Transceiver::run_far_end(const FarEndParams& p) {
  const CallGuard guard(*this, "run_far_end()");
  LoopbackNic& wire = loopback("roundtrip()");
  if (!running()) throw std::logic_error("run_far_end(): start() the transceiver first");
  executor_->check();  // a loop that failed: its error, rather than a run with no replies
  return wire.run_far_end(p, [this] { return executor_->running(); });
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
      } else if ((c.record.flags & kCompletionSlice) && q.first_page &&
                 c.request.size() >= sizeof(SliceRecord)) {
        SliceRecord sr;
        std::memcpy(&sr, c.request.data(), sizeof sr);
        sr.page += q.first_page;
        std::memcpy(c.request.data(), &sr, sizeof sr);
      }
      out.push_back(std::move(c));
      ++q.comp_ci;
      tx_consume<Scope::kSystem>(r, q.comp_ci);
    }
  }
  return out;
}

bool Transceiver::wait_completions(uint64_t timeout_ns, uint64_t spin_ns) {
  const CallGuard guard(*this, "wait_completions()");
  const uint64_t start = now_ns();
  for (uint32_t looks = 1;; ++looks) {
    for (HostQueue& q : queues_) {
      const TxRing r = tx_ring(q.host_rings.host(), desc_views_.cp, desc_views_.cp_log2,
                               cfg_.completion_slot_bytes);
      if (tx_poll<Scope::kSystem>(r, q.comp_ci)) return true;
    }
    // stop() waits for the calls in progress: this one ends at its start, not at its timeout.
    if (closing_.load(std::memory_order_acquire)) return false;
    const uint64_t waited = now_ns() - start;
    if (waited >= timeout_ns) return false;
    if (waited >= spin_ns) {
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    } else if (looks % 64 == 0) {
      std::this_thread::yield();  // a machine with more threads than cores keeps going
    } else {
      spin_pause();
    }
  }
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
