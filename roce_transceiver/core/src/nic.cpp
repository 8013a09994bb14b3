// The NICs behind rt/host/nic.h, and the one place that picks one from the configuration.
#include "rt/host/nic.h"

#include <stdexcept>

#include "rt/host/doca_nic.h"
#include "rt/host/doca_probe.h"
#include "rt/host/transceiver.h"

namespace rt::host {
namespace {

NicFields socket_stats(const SocketNicStats& s) {
  return {{"nic_rx_frames", s.rx_frames},       {"nic_rx_bytes", s.rx_bytes},
          {"nic_tx_frames", s.tx_frames},       {"nic_tx_bytes", s.tx_bytes},
          {"nic_filtered", s.filtered},         {"nic_too_long", s.too_long},
          {"nic_rx_ring_full", s.rx_ring_full}, {"nic_tx_errors", s.tx_errors},
          {"nic_kernel_drops", s.kernel_drops}, {"nic_capture_errors", s.capture_errors}};
}

NicFields socket_info(const SocketNicInfo& i) {
  return {{"rx_buffer_bytes", i.rx_buffer_bytes},
          {"rx_buffer_asked", i.rx_buffer_asked},
          {"capture_error", i.capture_error},
          {"rx_path", i.rx_path},
          {"rx_path_reason", i.rx_path_reason},
          {"rx_fallback", i.rx_fallback},
          {"rx_ring_bytes", i.rx_ring_bytes},
          {"rx_ring_block_bytes", i.rx_ring_block_bytes},
          {"rx_ring_blocks", uint64_t(i.rx_ring_blocks)},
          {"rx_ring_block_timeout_ms", uint64_t(i.rx_ring_block_timeout_ms)},
          {"rx_ring_freezes", i.rx_ring_freezes}};
}

}  // namespace

void SocketWireNic::attach(std::vector<NicQueue> queues, const Steering& steering) {
  if (!queues_.empty()) throw std::logic_error("the socket NIC: attached twice");
  queues_ = std::move(queues);
  steering_ = steering;
}

void SocketWireNic::start() {
  if (queues_.empty()) throw std::logic_error("the socket NIC: start() before attach()");
  if (nic_ || stopped_) throw std::logic_error("the socket NIC: started twice");
  nic_ = std::make_unique<SocketNic>(cfg_, steering_, queues_);
  nic_->start();
}

void SocketWireNic::stop() {
  if (!nic_ || stopped_) return;
  stopped_ = true;
  std::string failed;
  try {
    nic_->stop();
  } catch (const std::exception& e) {
    failed = e.what();
  }
  final_stats_ = socket_stats(nic_->stats());
  final_info_ = socket_info(nic_->info());
  nic_.reset();
  if (!failed.empty()) throw std::runtime_error("the socket NIC failed: " + failed);
}

std::string SocketWireNic::error() const {
  const std::string e = nic_ && !stopped_ ? nic_->error() : std::string();
  return e.empty() ? e : "the socket NIC failed: " + e;
}

NicFields SocketWireNic::stats() const {
  if (stopped_) return final_stats_;
  return socket_stats(nic_ ? nic_->stats() : SocketNicStats{});
}

NicFields SocketWireNic::info() const {
  if (stopped_) return final_info_;
  return socket_info(nic_ ? nic_->info() : SocketNicInfo{});
}

DocaNic::DocaNic(const DocaNicConfig& c) {
  throw std::runtime_error(doca_refusal(probe_doca(c.sdk_path), c.device, !c.sdk_path_chosen));
}

std::unique_ptr<Nic> make_nic(const TransceiverConfig& c) {
  switch (c.nic) {
    case NicKind::kLoopback:
      return std::make_unique<LoopbackNic>(LoopbackConfig{
          c.local, c.qp, c.slot_bytes, c.far_end == FarEndPlace::kGpu, c.cuda_device,
          c.cuda_epoch_us, c.engine.rc_retransmit && c.qp.transport == Transport::RC});
    case NicKind::kSocket: {
      SocketNicConfig nc = c.socket;
      nc.addresses = c.local;
      return std::make_unique<SocketWireNic>(nc);
    }
    case NicKind::kDoca: return std::make_unique<DocaNic>(c.doca);
  }
  throw std::invalid_argument("nic: " + std::to_string(int(c.nic)) + " is no NIC of ours");
}

}  // namespace rt::host
