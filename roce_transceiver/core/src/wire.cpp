// Wires for software NICs (rt/host/wire.h).
#include "rt/host/wire.h"

#include <linux/if_packet.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "rt/host/transceiver.h"

namespace rt::host {

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
