// Verbs mode's loopback peer (rt/host/verbs_requester.h).
#include "rt/host/verbs_requester.h"

#include <chrono>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "rt/platform.h"
#include "rt/protocol/decode.h"
#include "rt/protocol/psn.h"
#include "rt/verbs/serve_loop.h"

namespace rt::host {
namespace {

constexpr uint8_t kRcWriteOnly = 0x0A, kRcFetchAdd = 0x14;

std::vector<uint8_t> encode_frame(const FrameSpec& s, const uint8_t* payload, uint32_t len) {
  std::vector<uint8_t> frame(encoded_size(s, len));
  const EncodeResult r = encode(s, ByteSpan{payload, len}, MutByteSpan{frame.data(), frame.size()});
  if (!r.ok())
    throw std::invalid_argument(std::string("Verbs requester: cannot encode a request (") +
                                (r.field ? r.field : "?") + ")");
  frame.resize(r.len);
  return frame;
}

constexpr uint8_t kRcAtomicAck = 0x12;

// What came back on the wire: our NIC's acknowledgements to the requester's QP (on a real
// interface, other traffic passes by too and is not ours to read). NAKs are counted; true
// when an ATOMIC ACKNOWLEDGE was among them.
bool read_acks(Wire& wire, uint32_t requester_qpn, uint32_t* naks) {
  std::vector<std::vector<uint8_t>> frames;
  wire.receive(frames, 16);
  bool atomic_ack = false;
  for (const std::vector<uint8_t>& f : frames) {
    const DecodeResult d = decode(ByteSpan{f.data(), f.size()});
    if (!d.ok() || !d.frame.op.has(kAeth) || d.frame.bth_hdr().dest_qp.get() != requester_qpn)
      continue;
    if ((d.frame.ext_hdr<Aeth>(kAeth).syndrome() & 0x60) == 0x60) ++*naks;
    atomic_ack = atomic_ack || d.frame.bth_hdr().opcode == kRcAtomicAck;
  }
  return atomic_ack;
}

}  // namespace

VerbsRequestRun run_verbs_requests(Wire& to_ours, Transceiver& peer, const VerbsRequestParams& p) {
  const FarEndParams& f = p.far;
  const uint32_t room = p.slot_bytes - verbs::kSlotHeaderBytes;
  if (f.payload_len > room)
    throw std::invalid_argument("Verbs requester: a " + std::to_string(f.payload_len) +
                                "-byte request does not fit a " + std::to_string(p.slot_bytes) +
                                "-byte slot (8 bytes are its header)");
  if (f.payloads.empty() || f.payloads.size() % f.payload_len)
    throw std::invalid_argument("Verbs requester: payloads must be a whole number of requests");
  const size_t num = f.payloads.size() / f.payload_len;
  const bool echo = f.expected.empty();
  const uint32_t reply_len = echo ? f.payload_len : f.expected_len;
  const uint64_t* signal =
      reinterpret_cast<const uint64_t*>(peer.region_data(p.peer_signal_region));
  const uint8_t* ring = peer.region_data(p.peer_ring_region);
  if (peer.config().executor != ExecutorKind::kCpu)
    throw std::invalid_argument("Verbs requester: the peer must run on the cpu executor");

  VerbsRequestRun out;
  FarEndResult& r = out.run.result;
  r = FarEndResult{};
  out.run.rtt_ns.reserve(f.count);
  out.landed_ns.reserve(f.count);
  uint32_t psn = p.first_psn;
  std::vector<uint8_t> request(verbs::kSlotHeaderBytes + f.payload_len);
  const auto inject = [&](const std::vector<uint8_t>& frame, uint64_t give_up) {
    while (!to_ours.send(frame.data(), frame.size())) {
      ++r.ring_full;
      if (now_ns() > give_up) return false;
      std::this_thread::yield();
    }
    return true;
  };
  const uint64_t start = now_ns();
  const uint64_t give_up = start + uint64_t(f.timeout_s * 1e9);
  r.status = uint32_t(FarEndStatus::kDone);
  for (uint32_t i = 0; i < f.count; ++i) {
    const uint64_t seq = p.first_request + i;
    const uint32_t slot = uint32_t(seq % p.slots);
    const uint8_t* payload = f.payloads.data() + size_t(i % num) * f.payload_len;
    verbs::slot_store_le32(request.data() + verbs::kSlotLenOffset, f.payload_len);
    verbs::slot_store_le32(request.data() + verbs::kSlotStatusOffset, 0);
    std::memcpy(request.data() + verbs::kSlotHeaderBytes, payload, f.payload_len);
    FrameSpec w = p.spec;
    w.opcode = kRcWriteOnly;
    w.psn = psn;
    // No acknowledgement of the WRITE of its own: the FETCH_ADD's ATOMIC ACKNOWLEDGE (RC
    // acknowledgements are cumulative) covers it, and each would be a packet more for our NIC.
    w.ack_req = false;
    w.va = p.ring_va + uint64_t(slot) * p.slot_bytes;
    w.rkey = p.ring_rkey;
    w.dma_len = uint32_t(request.size());
    FrameSpec a = p.spec;
    a.opcode = kRcFetchAdd;
    a.psn = psn_add(psn, 1);
    a.ack_req = true;
    a.va = p.signal_va;
    a.rkey = p.signal_rkey;
    a.swap_add = 1;
    const std::vector<uint8_t> write = encode_frame(w, request.data(), uint32_t(request.size()));
    const std::vector<uint8_t> add = encode_frame(a, nullptr, 0);
    psn = psn_add(psn, 2);

    const uint64_t t0 = now_ns();
    if (!inject(write, give_up) || !inject(add, give_up)) {
      r.status = uint32_t(FarEndStatus::kTimeout);
      break;
    }
    ++r.sent;
    bool timed_out = false;
    uint64_t landed = 0;
    for (uint32_t spins = 1; __atomic_load_n(signal, __ATOMIC_ACQUIRE) <= seq; ++spins) {
      if (!landed && read_acks(to_ours, p.peer_qpn, &r.bad_frames)) landed = now_ns();
      if (now_ns() > give_up) {
        timed_out = true;
        break;
      }
      // Spin, and now and then let the threads this waits for run (fewer cores than threads).
      if (spins % 1024 == 0)
        std::this_thread::yield();
      else
        spin_pause();
    }
    const uint64_t t1 = now_ns();
    if (timed_out) {
      r.status = uint32_t(FarEndStatus::kTimeout);
      break;
    }
    ++r.received;
    out.run.rtt_ns.push_back(t1 - t0);
    if (!landed && read_acks(to_ours, p.peer_qpn, &r.bad_frames)) landed = now_ns();
    out.landed_ns.push_back(landed ? landed - t0 : t1 - t0);
    const uint8_t* reply = ring + size_t(slot) * p.slot_bytes;
    const uint32_t got = verbs::slot_le32(reply + verbs::kSlotLenOffset);
    if (verbs::slot_le32(reply + verbs::kSlotStatusOffset) != verbs::kReplyOk) ++out.reply_errors;
    const uint8_t* want = echo ? payload : f.expected.data() + size_t(i % num) * f.expected_len;
    if (got != reply_len || std::memcmp(reply + verbs::kSlotHeaderBytes, want, reply_len) != 0)
      ++r.wrong;
  }
  r.elapsed_ns = now_ns() - start;
  out.next_psn = psn;
  return out;
}

}  // namespace rt::host
