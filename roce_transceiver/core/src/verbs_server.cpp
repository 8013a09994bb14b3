// Verbs mode's serving side: checks, then the loop on a kernel or a thread (verbs_server.h).
#include "rt/host/verbs_server.h"

#include <chrono>
#include <stdexcept>
#include <string>

#include "rt/cuda/verbs_launch.h"
#include "rt/handlers/qec.h"
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

VerbsServer::VerbsServer(VerbsPort& port, const VerbsServeConfig& cfg) : port_(port), cfg_(cfg) {
  const VerbsPortConfig& pc = port.config();
  require(cfg.handler == HandlerKind::kEcho || cfg.handler == HandlerKind::kQec ||
              cfg.handler == HandlerKind::kCustom,
          "the handler must answer every request (echo, qec or custom)");
  // A user's handler: a shared object for the CPU thread, the serve kernels it is linked into
  // for the GPU (custom_handler.py).
  if (cfg.handler == HandlerKind::kCustom)
    require(port.config().gpu ? !cfg.custom_kernel_image.empty() : !cfg.custom_library.empty(),
            port.config().gpu ? "handler custom on the GPU: no custom_kernel_image (the serve "
                                "kernels with the handler linked in)"
                              : "handler custom on a CPU thread: no custom_library (the "
                                "handler's shared object)");
  require(cfg.slots >= 1 && cfg.slots <= verbs::kMaxServeSlots,
          "slots must be 1.." + std::to_string(verbs::kMaxServeSlots));
  require(cfg.slot_bytes > verbs::kSlotHeaderBytes && cfg.slot_bytes <= verbs::kMaxServeSlotBytes &&
              cfg.slot_bytes % verbs::kServeSlotAlign == 0,
          "slot_bytes must be a multiple of 16 in 16.." +
              std::to_string(verbs::kMaxServeSlotBytes) + " (8 bytes are the slot header)");
  const size_t ring = size_t(cfg.slots) * cfg.slot_bytes;
  const auto region_bytes = [&](uint32_t i) {
    return i < port.num_regions() ? port.region(i).size() : 0;
  };
  require(region_bytes(cfg.request_region) >= ring,
          "the port's region " + std::to_string(cfg.request_region) +
              " holds less than slots x slot_bytes (" + std::to_string(ring) + " bytes)");
  require(region_bytes(cfg.signal_region) >= 8, "the port's region " +
                                                    std::to_string(cfg.signal_region) +
                                                    " cannot hold the 8-byte signal word");
  require(pc.local_bytes >= ring + 8ull * cfg.slots,
          "the port's local region needs slots x (slot_bytes + 8) bytes for replies");
  require(pc.nic.sq_wqe_num >= 2 * cfg.slots, "the port's send ring needs 2 WQEs per slot");
  require(pc.nic.cqe_num >= pc.nic.sq_wqe_num, "the port's CQ must be as large as its send ring");

  const bool gpu = pc.gpu;
  desc_.handler.kind = cfg.handler;
  if (cfg.handler == HandlerKind::kQec) {
    // Checked where the host reads it, then pointed at the copy the loop reads.
    require(qec_table_from_blob(cfg.qec_blob.data(), cfg.qec_blob.size(), &desc_.handler.qec),
            "qec_blob: not a valid decoder table blob (" + std::to_string(cfg.qec_blob.size()) +
                " bytes)");
    qec_table_ = Buffer(gpu ? Placement::kDevice : Placement::kHost, cfg.qec_blob.size());
    qec_table_.write(0, cfg.qec_blob.data(), cfg.qec_blob.size());
    qec_table_relocate(&desc_.handler.qec, qec_table_.data());
  }
  if (cfg.handler == HandlerKind::kCustom) {
    CustomDesc& cd = desc_.handler.custom;
    if (!gpu) {
      custom_library_ = std::make_unique<CustomLibrary>(cfg.custom_library);
      cd.call = custom_library_->call();
    }
    const Placement where = gpu ? Placement::kDevice : Placement::kHost;
    if (cfg.custom_state_bytes) {
      custom_state_ = Buffer(where, cfg.custom_state_bytes);
      cd.state = custom_state_.data();
      cd.state_bytes = cfg.custom_state_bytes;
    }
    if (!cfg.custom_params.empty()) {
      custom_params_ = Buffer(where, cfg.custom_params.size());
      custom_params_.write(0, cfg.custom_params.data(), cfg.custom_params.size());
      cd.params = custom_params_.data();
      cd.params_bytes = uint32_t(cfg.custom_params.size());
    }
  }
  const auto at = [](const Buffer& b) { return b.device() ? b.device() : b.host(); };
  desc_.requests = at(port.region(cfg.request_region));
  desc_.signal = reinterpret_cast<const uint64_t*>(at(port.region(cfg.signal_region)));
  desc_.slots = cfg.slots;
  desc_.slot_bytes = cfg.slot_bytes;
  desc_.staging = at(port.local());
  desc_.staging_addr = address(port.local());
  desc_.lkey = pc.lkey;
  desc_.peer_ring = cfg.peer_ring;
  desc_.peer_ring_rkey = cfg.peer_ring_rkey;
  desc_.peer_signal = cfg.peer_signal;
  desc_.peer_signal_rkey = cfg.peer_signal_rkey;
  desc_.max_requests = cfg.max_requests;
  desc_.completion_timeout_ns = uint64_t(cfg.completion_timeout_s * 1e9);
  if (gpu)
    kernel_ =
        std::make_unique<cuda::ServeKernel>(port.descriptor(), desc_, pc.nic.handler, cfg.epoch_us,
                                            cfg.epochs_in_flight, cfg.custom_kernel_image);
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

uint64_t VerbsServer::epochs() const { return kernel_ ? kernel_->epochs() : 0; }

}  // namespace rt::host
