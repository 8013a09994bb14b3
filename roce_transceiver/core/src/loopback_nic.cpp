// The loopback wire (loopback_nic.h): the host on the far side of the queues' rings.
#include "rt/host/loopback_nic.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>

#include "rt/host/far_end_templates.h"
#include "rt/platform.h"
#include "rt/protocol/psn.h"
#include "rt/queues/rx_ring.h"
#include "rt/queues/tx_ring.h"

namespace rt::host {

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

// A ring view moved from the memory at `from` to a copy of it at `to`: preload fills an
// image of the rings in host memory with the producer's own code.
template <class T>
T* moved(T* p, const uint8_t* from, uint8_t* to) {
  return reinterpret_cast<T*>(to + (reinterpret_cast<const uint8_t*>(p) - from));
}
RxRing moved(const RxRing& r, const uint8_t* from, uint8_t* to) {
  return RxRing{moved(r.slots, from, to), moved(r.descs, from, to), moved(r.released, from, to),
                r.log2_depth, r.slot_bytes};
}

}  // namespace

// What queue q's engine sends (its replies), as its reply_send_spec() encodes them: our
// addresses, its QP's peer.
FrameSpec LoopbackNic::engine_sends(const NicQueue& q) const {
  EngineDesc d{};
  d.qp = cfg_.qp;
  d.qp.qpn = q.qpn;
  d.qp.peer_qpn = q.peer_qpn;
  d.reply_spec = cfg_.local;
  return reply_send_spec(d);
}

LoopbackNic::~LoopbackNic() = default;

void LoopbackNic::attach(std::vector<NicQueue> queues, const Steering& steering) {
  if (!queues_.empty()) throw std::logic_error("the loopback NIC: attached twice");
  steering_ = steering;
  for (NicQueue& q : queues) queues_.push_back(Queue{q, cfg_.qp.rx_psn & kPsnMask});
  if (!cfg_.far_end_on_gpu) return;
  const DeviceScope on_device(cfg_.cuda_device);
  requests_ = Buffer(Placement::kDevice, kGpuFarEndMaxTemplateBytes);
  replies_ = Buffer(Placement::kDevice, kGpuFarEndMaxTemplateBytes);
  acks_ = Buffer(Placement::kDevice, queues_.size() * kAckTemplateBytes);
  tables_ = Buffer(Placement::kDevice, 3 * size_t(kPatchBytes) * 256 * sizeof(uint32_t));
  times_ = Buffer(Placement::kDevice, size_t(kGpuFarEndMaxCount) * sizeof(uint64_t));
  results_ = Buffer(Placement::kDevice, queues_.size() * sizeof(FarEndResult));
  descs_ = Buffer(Placement::kDevice, queues_.size() * sizeof(FarEndDesc));
  gpu_ = std::make_unique<cuda::GpuFarEnd>();
}

void LoopbackNic::stop() {
  store_release<Scope::kSystem>(&stop_, 1);
  if (gpu_) gpu_->stop();
}

void LoopbackNic::detach() {
  const DeviceScope on_device(cfg_.cuda_device);
  queues_.clear();
  gpu_.reset();
  requests_ = Buffer();
  replies_ = Buffer();
  acks_ = Buffer();
  tables_ = Buffer();
  times_ = Buffer();
  results_ = Buffer();
  descs_ = Buffer();
}

void LoopbackNic::require_host_rings(const char* what) const {
  if (cfg_.far_end_on_gpu)
    throw std::logic_error(std::string(what) +
                           ": the far end is on the GPU (far_end='gpu'); use far_end='cpu'");
  if (queues_.empty()) throw std::logic_error(std::string(what) + ": the loopback has no rings");
}

bool LoopbackNic::inject(const uint8_t* frame, size_t len, bool count_drop) {
  require_host_rings("inject()");
  if (len > cfg_.slot_bytes)
    throw std::invalid_argument(
        "inject: a " + std::to_string(len) +
        "-byte frame exceeds slot_bytes=" + std::to_string(cfg_.slot_bytes));
  NicQueue& q = queues_[steer_frame(steering_, frame, uint32_t(len))].rings;
  const ProduceResult r =
      rx_produce<Scope::kSystem>(q.rx, q.rx_prod, frame, uint32_t(len), now_ns());
  if (r == ProduceResult::kOk) return true;
  if (count_drop)
    store_relaxed<Scope::kSystem>(&q.counters->v[uint32_t(Counter::kRingDrops)], ++*q.ring_drops);
  return false;
}

size_t LoopbackNic::preload(const std::vector<std::string>& frames) {
  if (queues_.empty()) throw std::logic_error("preload(): the loopback has no rings");
  for (const std::string& f : frames)
    if (f.size() > cfg_.slot_bytes)
      throw std::invalid_argument(
          "preload: a " + std::to_string(f.size()) +
          "-byte frame exceeds slot_bytes=" + std::to_string(cfg_.slot_bytes));
  // Each ring's memory as its engine will find it: an image in host memory, filled by the
  // producer's own code, then copied in whole.
  std::vector<std::vector<uint8_t>> images;
  for (const Queue& q : queues_) {
    images.emplace_back(q.rings.memory->size());
    q.rings.memory->read(0, images.back().data(), images.back().size());
  }
  size_t n = 0;
  for (const std::string& f : frames) {
    const auto* bytes = reinterpret_cast<const uint8_t*>(f.data());
    const uint32_t qi = steer_frame(steering_, bytes, uint32_t(f.size()));
    NicQueue& q = queues_[qi].rings;
    const RxRing image = moved(q.rx, q.memory->data(), images[qi].data());
    if (rx_produce<Scope::kSystem>(image, q.rx_prod, bytes, uint32_t(f.size()), now_ns()) !=
        ProduceResult::kOk)
      break;
    ++n;
  }
  for (uint32_t qi = 0; qi < queues_.size(); ++qi)
    queues_[qi].rings.memory->write(0, images[qi].data(), images[qi].size());
  return n;
}

std::vector<std::vector<uint8_t>> LoopbackNic::collect(size_t max) {
  require_host_rings("collect()");
  std::vector<std::vector<uint8_t>> out;
  for (Queue& queue : queues_) {
    NicQueue& q = queue.rings;
    while (out.size() < max) {
      const TxDesc* d = tx_poll<Scope::kSystem>(q.tx, q.tx_ci);
      if (!d) break;
      const uint8_t* slot = q.tx.slot(q.tx_ci);
      out.emplace_back(slot, slot + d->len);
      ++q.tx_ci;
      tx_consume<Scope::kSystem>(q.tx, q.tx_ci);
    }
  }
  return out;
}

FarEndRun LoopbackNic::run_far_end(const FarEndParams& p,
                                   const std::function<bool()>& engine_running) {
  const DeviceScope on_device(cfg_.cuda_device);  // a GPU far end runs beside the loop
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

  std::vector<TemplateSet> requests, replies, acks;
  for (uint32_t q = 0; q < p.queues; ++q) {
    FrameSpec s = spec;
    s.dest_qp = queues_[q].rings.qpn;
    s.src_port = steering_.by == SteerBy::kUdpSport
                     ? uint16_t(base_port - base_port % steering_.count + q)
                     : base_port;
    requests.push_back(encode_templates(s, p.payloads.data(), p.payload_len, num, seq, "request"));
    replies.push_back(encode_templates(engine_sends(queues_[q].rings),
                                       echo ? p.payloads.data() : p.expected.data(),
                                       echo ? p.payload_len : p.expected_len, num, seq, "reply"));
    // The engine's requester waits for an ACK of each reply (qp.retransmit).
    if (cfg_.ack_replies)
      acks.push_back(encode_templates(aeth_spec(s, s.dest_qp, kAethAck, 0, 0), p.payloads.data(), 0,
                                      1, false, "acknowledgement"));
  }
  if (replies[0].len > cfg_.slot_bytes)
    throw std::invalid_argument(
        "far end: a " + std::to_string(replies[0].len) +
        "-byte reply does not fit slot_bytes=" + std::to_string(cfg_.slot_bytes));
  // The patch tables depend on the frames' layout and length only: one for every queue.
  const std::vector<uint32_t> request_deltas = icrc_deltas(requests[0]);
  const std::vector<uint32_t> reply_deltas = icrc_deltas(replies[0]);
  const std::vector<uint32_t> ack_deltas =
      acks.empty() ? std::vector<uint32_t>() : icrc_deltas(acks[0]);

  std::vector<FarEndDesc> descs(p.queues);
  std::vector<size_t> first_time(p.queues);  // where queue q's times start
  size_t times_total = 0;
  for (uint32_t q = 0; q < p.queues; ++q) {
    const Queue& hq = queues_[q];
    FarEndDesc& d = descs[q];
    d.rx = hq.rings.rx;
    d.tx = hq.rings.tx;
    d.own_qpn = hq.rings.peer_qpn;
    d.count = share_of(p.count, p.queues, q);
    d.window = p.window;
    // The schedule is dealt out in turn: queue q takes requests q, q + queues, ...
    d.interval_ns = p.interval_ns * p.queues;
    d.phase_ns = p.interval_ns * q;
    d.late_ns = p.late_ns ? p.late_ns : p.interval_ns;
    d.drop_ns = p.drop_ns;
    d.timeout_ns = uint64_t(p.timeout_s * 1e9);
    d.first_psn = hq.far_psn;
    d.rx_start = hq.rings.rx_prod;
    d.tx_start = hq.rings.tx_ci;
    first_time[q] = times_total;
    times_total += d.count;
  }

  FarEndRun run;
  run.queues.resize(p.queues);
  if (!cfg_.far_end_on_gpu) {
    std::vector<uint64_t> times(times_total);
    std::vector<std::vector<Chunk16>> scratch(p.queues);
    for (uint32_t q = 0; q < p.queues; ++q) {
      FarEndDesc& d = descs[q];
      d.requests = requests[q].view(requests[q].frame(0), request_deltas.data());
      d.replies = replies[q].view(replies[q].frame(0), reply_deltas.data());
      if (!acks.empty()) d.acks = acks[q].view(acks[q].frame(0), ack_deltas.data());
      d.times = times.data() + first_time[q];
      scratch[q].resize(2 * ((cfg_.slot_bytes + 15) / 16));
      d.frame = reinterpret_cast<uint8_t*>(scratch[q].data());
      d.expect = d.frame + (cfg_.slot_bytes + 15) / 16 * 16;
      d.result = &run.queues[q];
    }
    if (p.queues == 1) {
      far_end_run<Scope::kSystem>(descs[0], &stop_);
    } else {  // a thread a queue, as a NIC's queues are fed in parallel
      std::vector<std::thread> threads;
      for (uint32_t q = 0; q < p.queues; ++q)
        threads.emplace_back([&, q] { far_end_run<Scope::kSystem>(descs[q], &stop_); });
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
    tables_.write(0, request_deltas.data(), table_bytes);
    tables_.write(table_bytes, reply_deltas.data(), table_bytes);
    if (!acks.empty()) tables_.write(2 * table_bytes, ack_deltas.data(), table_bytes);
    const auto* tables = reinterpret_cast<const uint32_t*>(tables_.device());
    size_t request_at = 0, reply_at = 0;
    for (uint32_t q = 0; q < p.queues; ++q) {
      FarEndDesc& d = descs[q];
      requests_.write(request_at, requests[q].bytes.data(), requests[q].size_bytes());
      replies_.write(reply_at, replies[q].bytes.data(), replies[q].size_bytes());
      d.requests = requests[q].view(requests_.device() + request_at, tables);
      d.replies = replies[q].view(replies_.device() + reply_at, tables + kPatchBytes * 256);
      if (!acks.empty()) {
        acks_.write(q * kAckTemplateBytes, acks[q].bytes.data(), acks[q].size_bytes());
        d.acks =
            acks[q].view(acks_.device() + q * kAckTemplateBytes, tables + 2 * kPatchBytes * 256);
      }
      request_at += requests[q].size_bytes();
      reply_at += replies[q].size_bytes();
      d.times = reinterpret_cast<uint64_t*>(times_.device()) + first_time[q];
      d.frame = d.expect = nullptr;  // the kernel stages in its shared memory
      d.result = reinterpret_cast<FarEndResult*>(results_.device()) + q;
    }
    descs_.write(0, descs.data(), descs.size() * sizeof(FarEndDesc));
    const size_t scratch_bytes = 2 * ((size_t(cfg_.slot_bytes) + 15) / 16 * 16);
    // In the engine's epochs, so that the far end does not hold up a kernel load either; and
    // it ends when the engine does (stopped, or failed).
    gpu_->run(reinterpret_cast<const FarEndDesc*>(descs_.device()), p.queues, scratch_bytes,
              p.timeout_s, uint64_t(cfg_.epoch_us) * 1000, engine_running);
    results_.read(0, run.queues.data(), p.queues * sizeof(FarEndResult));
    std::vector<uint64_t> times(times_total);
    times_.read(0, times.data(), times.size() * sizeof(uint64_t));
    for (uint32_t q = 0; q < p.queues; ++q)
      append_rtts(run.rtt_ns, times.data() + first_time[q], run.queues[q]);
  }
  for (uint32_t q = 0; q < p.queues; ++q) {
    Queue& hq = queues_[q];
    hq.rings.rx_prod = run.queues[q].rx_end;
    hq.rings.tx_ci = run.queues[q].tx_end;
    hq.far_psn = psn_add(hq.far_psn, run.queues[q].sent);
  }
  run.result = add_up(run.queues);
  return run;
}

}  // namespace rt::host
