// Verbs mode's serving side: checks, then the loop on a kernel or a thread (verbs_server.h).
#include "rt/host/verbs_server.h"

#include <chrono>
#include <stdexcept>
#include <string>

#include "rt/cuda/verbs_launch.h"
#include "rt/host/host_queue_pair.h"

namespace rt::host {
namespace {

void require(bool ok, const std::string& what) {
  if (!ok) throw std::invalid_argument("Verbs mode: " + what);
}

uint64_t address(const Buffer& b) {
  return uint64_t(reinterpret_cast<uintptr_t>(b.device() ? b.device() : b.host()));
}

}  // namespace

const char* serve_state_name(uint64_t state) {
  switch (state) {
    case verbs::kServeRunning: return "running";
    case verbs::kServeStopped: return "stopped";
    case verbs::kServeNoCompletion: return "no completion in time";
    case verbs::kServeCqError: return "completion error";
    case verbs::kServeDone: return "done";
  }
  return "unknown";
}

VerbsServer::VerbsServer(VerbsPort& port, Transceiver& ours, const VerbsServeConfig& cfg)
    : port_(port), cfg_(cfg) {
  const VerbsPortConfig& pc = port.config();
  const bool gpu = ours.config().executor == "cuda";
  require(gpu == pc.gpu, std::string("the port's memory is ") + (pc.gpu ? "" : "not ") +
                             "GPU-mapped but the executor is " + ours.config().executor);
  const HandlerKind kind = ours.handler_desc().kind;
  require(kind == HandlerKind::kEcho || kind == HandlerKind::kQec,
          "the handler must answer every request (echo or qec)");
  require(cfg.slots >= 1 && cfg.slots <= verbs::kMaxServeSlots,
          "slots must be 1.." + std::to_string(verbs::kMaxServeSlots));
  require(cfg.slot_bytes > verbs::kSlotHeaderBytes && cfg.slot_bytes % 8 == 0,
          "slot_bytes must be a multiple of 8 above the 8-byte slot header");
  const size_t ring = size_t(cfg.slots) * cfg.slot_bytes;
  require(ours.region_bytes(cfg.request_region) >= ring,
          "region " + std::to_string(cfg.request_region) + " holds less than slots x slot_bytes (" +
              std::to_string(ring) + " bytes)");
  require(ours.region_bytes(cfg.signal_region) >= 8,
          "region " + std::to_string(cfg.signal_region) + " cannot hold the 8-byte signal word");
  require(pc.local_bytes >= ring + 8ull * cfg.slots,
          "the port's local region needs slots x (slot_bytes + 8) bytes for replies");
  require(pc.nic.sq_wqe_num >= 2 * cfg.slots, "the port's send ring needs 2 WQEs per slot");
  require(pc.nic.cqe_num >= pc.nic.sq_wqe_num, "the port's CQ must be as large as its send ring");

  desc_.requests = ours.region_data(cfg.request_region);
  desc_.signal = reinterpret_cast<const uint64_t*>(ours.region_data(cfg.signal_region));
  desc_.slots = cfg.slots;
  desc_.slot_bytes = cfg.slot_bytes;
  desc_.handler = ours.handler_desc();
  desc_.staging = port.local().device() ? port.local().device() : port.local().host();
  desc_.staging_addr = address(port.local());
  desc_.lkey = pc.lkey;
  desc_.peer_ring = cfg.peer_ring;
  desc_.peer_ring_rkey = cfg.peer_ring_rkey;
  desc_.peer_signal = cfg.peer_signal;
  desc_.peer_signal_rkey = cfg.peer_signal_rkey;
  desc_.max_requests = cfg.max_requests;
  desc_.completion_timeout_ns = uint64_t(cfg.completion_timeout_s * 1e9);
  if (gpu) kernel_ = std::make_unique<cuda::ServeKernel>(port.descriptor(), desc_);
}

VerbsServer::~VerbsServer() {
  try {
    stop();
  } catch (...) {  // a destructor reports nothing; stop() says it when called
  }
}

void VerbsServer::start() {
  if (started_) throw std::logic_error("VerbsServer: already started (a server starts once)");
  started_ = true;
  if (kernel_) {
    kernel_->launch();
    return;
  }
  thread_ = std::thread([this] {
    HostQueuePair qp(port_);
    verbs::serve_loop(desc_, qp, &cpu_shared_, &cpu_stop_);
  });
}

void VerbsServer::stop() {
  if (!started_ || stopped_) return;
  if (kernel_) {
    kernel_->request_stop();
    if (!kernel_->wait(cfg_.stop_timeout_s))
      throw std::runtime_error("Verbs mode: the serve kernel did not end within " +
                               std::to_string(cfg_.stop_timeout_s) + " s of the stop request");
  } else {
    __atomic_store_n(&cpu_stop_, 1u, __ATOMIC_RELEASE);
    if (thread_.joinable()) thread_.join();  // the loop checks the flag whenever it is idle
  }
  stopped_ = true;
}

verbs::ServeShared VerbsServer::stats() const {
  const verbs::ServeShared& s = kernel_ ? kernel_->shared() : cpu_shared_;
  verbs::ServeShared out;
  out.served = __atomic_load_n(&s.served, __ATOMIC_RELAXED);
  out.completed = __atomic_load_n(&s.completed, __ATOMIC_RELAXED);
  out.handler_errors = __atomic_load_n(&s.handler_errors, __ATOMIC_RELAXED);
  out.state = __atomic_load_n(&s.state, __ATOMIC_RELAXED);
  out.cq_status = __atomic_load_n(&s.cq_status, __ATOMIC_RELAXED);
  return out;
}

}  // namespace rt::host
