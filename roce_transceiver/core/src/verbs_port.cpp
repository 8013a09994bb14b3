// The software ConnectX's thread: doorbell -> packets onto the wire, the wire's answers ->
// completions (rt/host/verbs_port.h).
#include "rt/host/verbs_port.h"

#include <stdexcept>
#include <vector>

#include "rt/platform.h"
#include "rt/verbs/descriptor.h"

namespace rt::host {

VerbsPort::VerbsPort(const VerbsPortConfig& cfg, std::shared_ptr<Wire> wire)
    : cfg_(cfg), wire_(std::move(wire)) {
  if (!wire_) throw std::invalid_argument("VerbsPort: no wire");
  // Everything the NIC thread and the device share is pinned host memory the GPU maps: the one
  // GPU-visible memory a CPU thread can store into (device memory would need GDRCopy). A
  // ConnectX writes device memory by PCIe peer-to-peer instead; here the serve loop's polls
  // of the signal word and its reads of a request cross PCIe.
  const Placement shared = cfg.gpu ? Placement::kPinned : Placement::kHost;
  sq_ = Buffer(shared, size_t(cfg.nic.sq_wqe_num) * verbs::kWqeBytes);
  cq_ = Buffer(shared, size_t(cfg.nic.cqe_num) * verbs::kCqeBytes);
  doorbell_ = Buffer(shared, verbs::kDoorbellPageBytes);
  local_ = Buffer(shared, cfg.local_bytes);
  const auto device = [&](const Buffer& b) {
    return uint64_t(reinterpret_cast<uintptr_t>(cfg.gpu ? b.device() : b.host()));
  };
  verbs::SoftConnectXMemory mem{sq_.host(),  cq_.host(),  doorbell_.host(),
                                device(sq_), device(cq_), device(doorbell_)};
  nic_ = std::make_unique<verbs::SoftConnectX>(cfg.nic, mem);
  // WQEs name the local region by the address the device uses for it.
  nic_->add_region(cfg.lkey, local_.host(), device(local_), cfg.local_bytes);
  if (cfg.regions.size() > verbs::kMaxRemoteRegions)
    throw std::invalid_argument("VerbsPort: regions: at most " +
                                std::to_string(verbs::kMaxRemoteRegions));
  regions_.reserve(cfg.regions.size());
  for (size_t i = 0; i < cfg.regions.size(); ++i) {
    const RemoteRegionConfig& r = cfg.regions[i];
    if (r.length == 0)
      throw std::invalid_argument("VerbsPort: regions[" + std::to_string(i) +
                                  "].length: must be > 0");
    regions_.emplace_back(shared, r.length);
    nic_->add_remote_region(r.rkey, regions_.back().host(), r.va, r.length);
  }
  const size_t bytes = verbs::descriptor_bytes();
  if (bytes) {
    descriptor_ = Buffer(cfg.gpu ? Placement::kDevice : Placement::kHost, bytes);
    std::vector<uint8_t> d(bytes);
    nic_->fill_descriptor(d.data(), d.size());
    descriptor_.write(0, d.data(), d.size());
  } else if (cfg.gpu) {
    throw std::runtime_error(
        "VerbsPort: this build has no GPUNetIO headers, so no device descriptor");
  }
}

VerbsPort::~VerbsPort() {
  try {
    stop();
  } catch (...) {  // a destructor reports nothing; stop() said it when called
  }
}

void VerbsPort::start() {
  if (thread_.joinable()) throw std::logic_error("VerbsPort: already started");
  stop_.store(false);
  thread_ = std::thread([this] { run(); });
}

void VerbsPort::stop() {
  stop_.store(true, std::memory_order_release);
  if (thread_.joinable()) thread_.join();
  std::lock_guard<std::mutex> lock(mutex_);
  if (!error_.empty()) throw std::runtime_error("VerbsPort: " + error_);
}

const Buffer& VerbsPort::region(size_t i) const {
  if (i >= regions_.size())
    throw std::out_of_range("VerbsPort: region " + std::to_string(i) + " of " +
                            std::to_string(regions_.size()));
  return regions_[i];
}

void VerbsPort::ring(uint64_t producer) {
  if (cfg_.nic.handler != verbs::NicHandler::kCpuProxy)
    throw std::logic_error("VerbsPort::ring: the producer count is the CPU proxy's doorbell");
  __atomic_store_n(reinterpret_cast<uint64_t*>(doorbell_.host()), producer, __ATOMIC_RELEASE);
}

void VerbsPort::run() {
  // The wire is lossless: a frame waits for room in the engine's rx ring (or the stop flag).
  const auto emit = [this](const uint8_t* frame, size_t len) {
    while (!wire_->send(frame, len)) {
      if (stop_.load(std::memory_order_acquire)) return;
      spin_pause();
    }
  };
  uint32_t idle_turns = 0;
  try {
    while (!stop_.load(std::memory_order_acquire)) {
      bool busy = false;
      std::vector<std::vector<uint8_t>> answers;
      wire_->receive(answers, 64);
      {
        std::lock_guard<std::mutex> lock(mutex_);
        const uint64_t now = now_ns();
        busy = nic_->poll(emit, now) > 0;
        for (const std::vector<uint8_t>& f : answers) nic_->on_frame(f.data(), f.size(), emit, now);
      }
      // A yield is a system call: spin a while first (a request or a doorbell is then seen at
      // once), and let other threads run now and then (fewer cores than spinning threads).
      if (!busy && answers.empty()) {
        if (++idle_turns % 1024 == 0)
          std::this_thread::yield();
        else
          spin_pause();
      }
    }
  } catch (const std::exception& e) {
    std::lock_guard<std::mutex> lock(mutex_);
    error_ = e.what();
  }
}

VerbsPortStats VerbsPort::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return {nic_->stats(),        nic_->consumed(), nic_->completed(),
          nic_->expected_psn(), nic_->in_error(), nic_->last_error()};
}

}  // namespace rt::host
