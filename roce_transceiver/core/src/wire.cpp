// Wires for software NICs (rt/host/wire.h).
#include "rt/host/wire.h"

#include <linux/if_packet.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "rt/host/transceiver.h"
#include "rt/protocol/decode.h"

namespace rt::host {
namespace {

// Frames from one thread to another: a ring of slots, each index with one writer (head: the
// producer, tail: the consumer). Full: push says so and the sender tries again (lossless).
class FrameQueue {
 public:
  bool push(const uint8_t* frame, size_t len) {
    const uint32_t head = head_.load(std::memory_order_relaxed);
    if (head - tail_.load(std::memory_order_acquire) == kSlots) return false;
    slots_[head % kSlots].assign(frame, frame + len);
    head_.store(head + 1, std::memory_order_release);
    return true;
  }
  void pop(std::vector<std::vector<uint8_t>>& out, size_t max) {
    uint32_t tail = tail_.load(std::memory_order_relaxed);
    const uint32_t head = head_.load(std::memory_order_acquire);
    for (size_t n = 0; tail != head && n < max; ++n, ++tail) out.push_back(slots_[tail % kSlots]);
    tail_.store(tail, std::memory_order_release);
  }

 private:
  static constexpr uint32_t kSlots = 256;
  std::array<std::vector<uint8_t>, kSlots> slots_;
  std::atomic<uint32_t> head_{0}, tail_{0};
};

struct SplitState {
  explicit SplitState(Transceiver& t) : peer(t) {}
  Transceiver& peer;
  FrameQueue to_port, to_requester;
};

// The port's end: its responses (ACKs, NAKs, ATOMIC ACKNOWLEDGEs, as the opcode row says) are
// the requester's; its requests go into the peer's engine.
class SplitPortEnd : public Wire {
 public:
  explicit SplitPortEnd(std::shared_ptr<SplitState> s) : s_(std::move(s)) {}
  bool send(const uint8_t* frame, size_t len) override {
    const DecodeResult r = decode(ByteSpan{frame, len});
    if (r.ok() && r.frame.op.is(kResponse)) return s_->to_requester.push(frame, len);
    return s_->peer.inject(frame, len, false);
  }
  void receive(std::vector<std::vector<uint8_t>>& out, size_t max) override {
    for (std::vector<uint8_t>& f : s_->peer.collect(max)) out.push_back(std::move(f));
    s_->to_port.pop(out, max);
  }

 private:
  std::shared_ptr<SplitState> s_;
};

class SplitRequesterEnd : public Wire {
 public:
  explicit SplitRequesterEnd(std::shared_ptr<SplitState> s) : s_(std::move(s)) {}
  bool send(const uint8_t* frame, size_t len) override { return s_->to_port.push(frame, len); }
  void receive(std::vector<std::vector<uint8_t>>& out, size_t max) override {
    s_->to_requester.pop(out, max);
  }

 private:
  std::shared_ptr<SplitState> s_;
};

}  // namespace

SplitLoopback split_loopback(Transceiver& peer) {
  auto state = std::make_shared<SplitState>(peer);
  return {std::make_shared<SplitPortEnd>(state), std::make_shared<SplitRequesterEnd>(state)};
}

bool LoopbackWire::send(const uint8_t* frame, size_t len) {
  return t_.inject(frame, len, false);  // lossless: a full ring is "try again", not a drop
}

void LoopbackWire::receive(std::vector<std::vector<uint8_t>>& out, size_t max) {
  for (std::vector<uint8_t>& f : t_.collect(max)) out.push_back(std::move(f));
}

PacketWire::PacketWire(int fd, const std::string& capture) try : fd_(fd), pcap_(capture) {
  if (fd < 0) throw std::invalid_argument("PacketWire: not a socket");
} catch (...) {
  if (fd >= 0) ::close(fd);  // ours from the call on, even when the capture cannot open
}

PacketWire::~PacketWire() { ::close(fd_); }

bool PacketWire::send(const uint8_t* frame, size_t len) {
  const ssize_t n = ::send(fd_, frame, len, MSG_DONTWAIT);
  if (n < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == ENOBUFS) return false;
    throw std::runtime_error(std::string("PacketWire: send: ") + std::strerror(errno));
  }
  pcap_.write(frame, uint32_t(len), wall_ns());
  return true;
}

void PacketWire::receive(std::vector<std::vector<uint8_t>>& out, size_t max) {
  uint8_t buf[65536];
  for (size_t i = 0; i < max; ++i) {
    sockaddr_ll from{};
    socklen_t from_len = sizeof from;
    const ssize_t n = ::recvfrom(fd_, buf, sizeof buf, MSG_DONTWAIT,
                                 reinterpret_cast<sockaddr*>(&from), &from_len);
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return;
      throw std::runtime_error(std::string("PacketWire: recv: ") + std::strerror(errno));
    }
    if (from.sll_pkttype == PACKET_OUTGOING) continue;  // our own send, looped back to us
    pcap_.write(buf, uint32_t(n), wall_ns());
    out.emplace_back(buf, buf + n);
  }
}

}  // namespace rt::host
