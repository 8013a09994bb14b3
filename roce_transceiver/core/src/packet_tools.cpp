// The plain AF_PACKET sender and receiver of `bench stream` (rt/bench/packet_tools.h).
#include "rt/bench/packet_tools.h"

#include <arpa/inet.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "rt/platform.h"
#include "rt/protocol/icrc.h"

namespace rt::bench {
namespace {

class PacketSocket {
 public:
  explicit PacketSocket(const std::string& interface) {
    const int ifindex = int(if_nametoindex(interface.c_str()));
    if (ifindex == 0) throw std::runtime_error("interface '" + interface + "' not found");
    fd_ = socket(AF_PACKET, SOCK_RAW, htons(ETH_P_ALL));
    if (fd_ < 0)
      throw std::runtime_error(std::string("socket(AF_PACKET): ") + std::strerror(errno) +
                               " (needs root or CAP_NET_RAW)");
    sockaddr_ll sll{};
    sll.sll_family = AF_PACKET;
    sll.sll_protocol = htons(ETH_P_ALL);
    sll.sll_ifindex = ifindex;
    if (bind(fd_, reinterpret_cast<sockaddr*>(&sll), sizeof sll) != 0) {
      close(fd_);
      throw std::runtime_error("bind to '" + interface + "': " + std::strerror(errno));
    }
  }
  ~PacketSocket() { close(fd_); }
  PacketSocket(const PacketSocket&) = delete;
  PacketSocket& operator=(const PacketSocket&) = delete;
  int fd() const { return fd_; }

 private:
  int fd_ = -1;
};

bool roce(const uint8_t* f, uint32_t len) {
  if (len < 14 + 20 + 8) return false;
  const uint16_t type = uint16_t(f[12] << 8 | f[13]);
  uint32_t l4 = 0;
  if (type == 0x0800 && f[23] == 17)
    l4 = 14 + (f[14] & 0x0Fu) * 4;
  else if (type == 0x86DD && len >= 14 + 40 + 8 && f[20] == 17)
    l4 = 14 + 40;
  else
    return false;
  return l4 + 8 <= len && (f[l4 + 2] << 8 | f[l4 + 3]) == 4791;
}

}  // namespace

PacketCount packet_blast(const std::string& interface, const std::vector<std::string>& frames,
                         uint64_t repeat, uint32_t batch) {
  if (frames.empty() || batch == 0) throw std::invalid_argument("packet_blast: nothing to send");
  PacketSocket s(interface);
  std::vector<mmsghdr> msgs(batch);
  std::vector<iovec> iovs(batch);
  PacketCount c;
  c.first_ns = now_ns();
  const uint64_t total = uint64_t(frames.size()) * repeat;
  uint64_t next = 0;
  while (next < total) {
    uint32_t n = 0;
    for (; n < batch && next + n < total; ++n) {
      const std::string& f = frames[(next + n) % frames.size()];
      iovs[n] = {const_cast<char*>(f.data()), f.size()};
      msgs[n] = mmsghdr{};
      msgs[n].msg_hdr.msg_iov = &iovs[n];
      msgs[n].msg_hdr.msg_iovlen = 1;
    }
    const int r = sendmmsg(s.fd(), msgs.data(), n, 0);
    if (r < 0) {
      if (errno == EINTR || errno == ENOBUFS) continue;  // the queue is full: try again
      throw std::runtime_error(std::string("sendmmsg: ") + std::strerror(errno));
    }
    for (int i = 0; i < r; ++i) c.bytes += msgs[i].msg_len;
    c.frames += uint64_t(r);
    next += uint64_t(r);
  }
  c.last_ns = now_ns();
  return c;
}

PacketCount packet_sink(int fd, uint64_t expect, double timeout_s, uint32_t batch) {
  if (batch == 0) throw std::invalid_argument("packet_sink: batch must be > 0");
  const timeval tv{0, 100000};  // wake every 100 ms to check the deadline
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  const uint32_t room = 65536;
  std::vector<uint8_t> buf(size_t(batch) * room);
  std::vector<mmsghdr> msgs(batch);
  std::vector<iovec> iovs(batch);
  PacketCount c;
  const uint64_t patience = uint64_t(timeout_s * 1e9);
  uint64_t last = now_ns();
  while (c.frames < expect && now_ns() - last < patience) {
    for (uint32_t i = 0; i < batch; ++i) {
      iovs[i] = {buf.data() + size_t(i) * room, room};
      msgs[i] = mmsghdr{};
      msgs[i].msg_hdr.msg_iov = &iovs[i];
      msgs[i].msg_hdr.msg_iovlen = 1;
    }
    const int r = recvmmsg(fd, msgs.data(), batch, MSG_WAITFORONE, nullptr);
    if (r < 0) {
      // ENETDOWN: the link came up after the bind (a fresh veth); it is up now.
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR || errno == ENETDOWN) continue;
      throw std::runtime_error(std::string("recvmmsg: ") + std::strerror(errno));
    }
    const uint64_t t = now_ns();
    for (int i = 0; i < r; ++i) {
      if (!roce(buf.data() + size_t(i) * room, msgs[i].msg_len)) continue;
      if (c.frames == 0) c.first_ns = t;
      ++c.frames;
      c.bytes += msgs[i].msg_len;
      c.last_ns = t;
      last = t;
    }
  }
  return c;
}

PacketCount packet_reflect(int fd, uint64_t count, uint32_t dest_qp, double timeout_s) {
  const timeval tv{0, 100000};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  std::vector<uint8_t> f(65536);
  PacketCount c;
  const uint64_t patience = uint64_t(timeout_s * 1e9);
  uint64_t last = now_ns();
  while (c.frames < count && now_ns() - last < patience) {
    sockaddr_ll from{};
    socklen_t from_len = sizeof from;
    const ssize_t n =
        recvfrom(fd, f.data(), f.size(), 0, reinterpret_cast<sockaddr*>(&from), &from_len);
    if (n <= 0 || from.sll_pkttype == PACKET_OUTGOING) continue;
    const DecodeResult r = decode(ByteSpan(f.data(), uint32_t(n)));
    if (!r.ok()) continue;
    const FrameView& v = r.frame;
    uint8_t* p = f.data();
    for (int i = 0; i < 6; ++i) std::swap(p[i], p[6 + i]);
    const uint32_t addr = v.ip_version == 4 ? 12 : 8, alen = v.ip_version == 4 ? 4 : 16;
    for (uint32_t i = 0; i < alen; ++i) std::swap(p[v.l3 + addr + i], p[v.l3 + addr + alen + i]);
    std::swap(p[v.l4], p[v.l4 + 2]);
    std::swap(p[v.l4 + 1], p[v.l4 + 3]);
    p[v.bth + 5] = uint8_t(dest_qp >> 16);
    p[v.bth + 6] = uint8_t(dest_qp >> 8);
    p[v.bth + 7] = uint8_t(dest_qp);
    store_le32(p + v.icrc, icrc_compute(v));
    if (send(fd, p, size_t(n), 0) == n) {
      const uint64_t t = now_ns();
      if (c.frames == 0) c.first_ns = t;
      ++c.frames;
      c.bytes += uint64_t(n);
      c.last_ns = t;
      last = t;
    }
  }
  return c;
}

}  // namespace rt::bench
