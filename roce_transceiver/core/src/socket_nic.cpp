// The software NIC's thread (rt/host/socket_nic.h).
#include "rt/host/socket_nic.h"

#include <arpa/inet.h>
#include <linux/if_packet.h>
#include <linux/sock_diag.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <vector>

#include "rt/host/pcap_file.h"
#include "rt/protocol/decode.h"

namespace rt::host {
namespace {

constexpr uint32_t kHeaderRoom = 14 + 4 + 40 + 8;  // Ethernet, 802.1Q, IPv6, UDP
constexpr uint32_t kIdleSpins = 2048;              // empty passes before the thread sleeps
constexpr int kIdleWaitMs = 1;                     // at most, when idle (tx is polled then)
// A deep receive buffer rides out bursts while the engine catches up; root may exceed
// net.core.rmem_max (SO_RCVBUFFORCE), others get at most that. What still overflows is counted.
constexpr int kRxBufferBytes = 64 << 20;

std::string errno_text(const char* what) { return std::string(what) + ": " + std::strerror(errno); }

// A file descriptor closed on scope exit.
struct Fd {
  int fd = -1;
  Fd() = default;
  explicit Fd(int f) : fd(f) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  Fd(Fd&& o) noexcept : fd(o.fd) { o.fd = -1; }
  Fd& operator=(Fd&& o) noexcept {
    std::swap(fd, o.fd);
    return *this;
  }
  ~Fd() {
    if (fd >= 0) close(fd);
  }
};

uint16_t ipv4_checksum(const uint8_t* h) {
  uint32_t sum = 0;
  for (int i = 0; i < 20; i += 2) sum += uint32_t(h[i]) << 8 | h[i + 1];
  while (sum >> 16) sum = (sum & 0xFFFF) + (sum >> 16);
  return uint16_t(~sum);
}

void put16(uint8_t* p, uint32_t v) {
  p[0] = uint8_t(v >> 8);
  p[1] = uint8_t(v);
}

}  // namespace

struct SocketNic::Impl {
  RxRing rx;
  TxRing tx;
  uint32_t prod;
  uint32_t ci;
  Counters* counters;
  uint64_t* ring_drops;
  bool udp = false;
  int family = AF_INET;
  Fd rx_fd, tx_fd;  // the same socket in packet mode (tx_fd unused)
  int ifindex = 0;
  PcapFile pcap;
  std::atomic<bool> stop{false};
  std::thread thread;
  std::mutex error_mu;
  std::string error;
  // Counters: written by the thread only, read by stats().
  std::atomic<uint64_t> rx_frames{0}, rx_bytes{0}, tx_frames{0}, tx_bytes{0}, filtered{0},
      rx_ring_full{0}, tx_errors{0}, kernel_drops{0}, too_long{0};
  uint64_t rx_buffer_bytes = 0;  // granted (getsockopt after the ask)
  // udp mode: the socket's running drop count (sk_drops, 32 bits) as last read.
  uint32_t drops_seen = 0;
  // Batch buffers.
  std::vector<uint8_t> buf;
  std::vector<mmsghdr> msgs;
  std::vector<iovec> iovs;
  std::vector<sockaddr_storage> addrs;
  std::vector<uint8_t> ctrl;  // udp mode: a cmsg per datagram for SO_RXQ_OVFL

  // udp mode: a reading of the socket's running drop count. Readings come out of order (a
  // queued datagram carries the count from when it was queued, SO_MEMINFO the count now), so
  // one behind the last adds nothing; the difference is taken mod 2^32, as the count wraps.
  void saw_drops(uint32_t running) {
    const uint32_t d = running - drops_seen;
    if (d == 0 || d >= 0x80000000u) return;
    drops_seen = running;
    kernel_drops.fetch_add(d, std::memory_order_relaxed);
  }
  // The kernel's drops since the last reading (a syscall: not on every pass).
  void read_kernel_drops() {
    if (udp) {
      uint32_t mem[SK_MEMINFO_VARS] = {};
      socklen_t n = sizeof mem;
      if (getsockopt(rx_fd.fd, SOL_SOCKET, SO_MEMINFO, mem, &n) == 0 &&
          n > SK_MEMINFO_DROPS * sizeof(uint32_t))
        saw_drops(mem[SK_MEMINFO_DROPS]);
      return;
    }
    tpacket_stats ps{};  // reading it resets it: each reading is new drops
    socklen_t ps_len = sizeof ps;
    if (getsockopt(rx_fd.fd, SOL_PACKET, PACKET_STATISTICS, &ps, &ps_len) == 0 && ps.tp_drops)
      kernel_drops.fetch_add(ps.tp_drops, std::memory_order_relaxed);
  }

  explicit Impl(const std::string& capture) : pcap(capture) {}
};

namespace {

// Packet mode: one AF_PACKET socket bound to the interface.
Fd open_packet(const SocketNicConfig& c, int* ifindex) {
  if (c.interface.empty())
    throw std::runtime_error("socket NIC, packet mode: no interface given (socket.interface)");
  *ifindex = int(if_nametoindex(c.interface.c_str()));
  if (*ifindex == 0)
    throw std::runtime_error("socket NIC: interface '" + c.interface + "' not found");
  Fd fd(socket(AF_PACKET, SOCK_RAW, htons(ETH_P_ALL)));
  if (fd.fd < 0) {
    if (errno == EPERM || errno == EACCES)
      throw std::runtime_error(
          "socket NIC, packet mode: socket(AF_PACKET) needs root or CAP_NET_RAW (" +
          std::string(std::strerror(errno)) + "); socket.mode 'udp' works without");
    throw std::runtime_error(errno_text("socket NIC: socket(AF_PACKET)"));
  }
  sockaddr_ll sll{};
  sll.sll_family = AF_PACKET;
  sll.sll_protocol = htons(ETH_P_ALL);
  sll.sll_ifindex = *ifindex;
  if (bind(fd.fd, reinterpret_cast<sockaddr*>(&sll), sizeof sll) != 0)
    throw std::runtime_error(errno_text(("socket NIC: bind to '" + c.interface + "'").c_str()));
#ifdef PACKET_IGNORE_OUTGOING
  const int one = 1;  // our own frames are not looped back to us (Linux 4.20+)
  setsockopt(fd.fd, SOL_PACKET, PACKET_IGNORE_OUTGOING, &one, sizeof one);
#endif
  return fd;
}

// Asks for kRxBufferBytes of receive buffer; returns what the kernel granted.
uint64_t ask_rx_buffer(int fd) {
  const int bytes = kRxBufferBytes;
  if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &bytes, sizeof bytes) != 0)
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof bytes);
  int granted = 0;
  socklen_t n = sizeof granted;
  return getsockopt(fd, SOL_SOCKET, SO_RCVBUF, &granted, &n) == 0 && granted > 0 ? uint64_t(granted)
                                                                                 : 0;
}

socklen_t sockaddr_for(int family, const uint8_t* ip, uint16_t port, sockaddr_storage* out) {
  std::memset(out, 0, sizeof *out);
  if (family == AF_INET) {
    auto* a = reinterpret_cast<sockaddr_in*>(out);
    a->sin_family = AF_INET;
    a->sin_port = htons(port);
    std::memcpy(&a->sin_addr, ip, 4);
    return sizeof(sockaddr_in);
  }
  auto* a = reinterpret_cast<sockaddr_in6*>(out);
  a->sin6_family = AF_INET6;
  a->sin6_port = htons(port);
  std::memcpy(&a->sin6_addr, ip, 16);
  return sizeof(sockaddr_in6);
}

std::string ip_text(int family, const uint8_t* ip, uint16_t port) {
  char text[INET6_ADDRSTRLEN] = {};
  inet_ntop(family, ip, text, sizeof text);
  return std::string(family == AF_INET6 ? "[" : "") + text + (family == AF_INET6 ? "]:" : ":") +
         std::to_string(port);
}

// UDP mode: a socket bound to our address and `port`; DF set, so an
// unconnected socket's datagrams carry IP ID 0.
Fd open_udp(int family, const uint8_t* ip, uint16_t port) {
  Fd fd(socket(family, SOCK_DGRAM, 0));
  if (fd.fd < 0) throw std::runtime_error(errno_text("socket NIC: socket(UDP)"));
  // No SO_REUSEADDR: a second socket on our port would take part of our
  // traffic without a word; binding fails instead, and says so.
  if (family == AF_INET) {
    const int df = IP_PMTUDISC_DO, ttl = 64;
    setsockopt(fd.fd, IPPROTO_IP, IP_MTU_DISCOVER, &df, sizeof df);
    setsockopt(fd.fd, IPPROTO_IP, IP_TTL, &ttl, sizeof ttl);
  } else {
    const int df = IPV6_PMTUDISC_DO, hops = 64;
    setsockopt(fd.fd, IPPROTO_IPV6, IPV6_MTU_DISCOVER, &df, sizeof df);
    setsockopt(fd.fd, IPPROTO_IPV6, IPV6_UNICAST_HOPS, &hops, sizeof hops);
  }
  sockaddr_storage a;
  const socklen_t n = sockaddr_for(family, ip, port, &a);
  if (bind(fd.fd, reinterpret_cast<sockaddr*>(&a), n) != 0)
    throw std::runtime_error(
        errno_text(("socket NIC, udp mode: bind to " + ip_text(family, ip, port)).c_str()));
  return fd;
}

// Is this Ethernet frame RoCEv2 for our QP? (packet mode)
bool ours(const uint8_t* f, uint32_t len, uint32_t qpn) {
  const DecodeResult r = decode(ByteSpan(f, len));
  return r.ok() && r.frame.bth_hdr().dest_qp.get() == qpn;
}

// udp mode: the Ethernet, IP and UDP headers of a datagram of `n` bytes from
// `from`, as a RoCE NIC would have sent them (IP ID 0, DF, TTL 64). Returns
// the header length.
uint32_t rebuild_headers(const SocketNicConfig& c, int family, const sockaddr_storage& from,
                         uint32_t n, uint8_t* out) {
  const FrameSpec& a = c.addresses;
  std::memcpy(out, a.src_mac, 6);  // to us, from the peer
  std::memcpy(out + 6, a.dst_mac, 6);
  uint8_t* ip = out + 14;
  if (family == AF_INET) {
    const auto& s = reinterpret_cast<const sockaddr_in&>(from);
    put16(out + 12, kEtherTypeIpv4);
    std::memset(ip, 0, 20);
    ip[0] = 0x45;
    put16(ip + 2, 20 + 8 + n);
    put16(ip + 6, kIpv4DontFragment);
    ip[8] = 64;
    ip[9] = kIpProtoUdp;
    std::memcpy(ip + 12, &s.sin_addr, 4);
    std::memcpy(ip + 16, a.src_ip, 4);
    put16(ip + 10, ipv4_checksum(ip));
    uint8_t* udp = ip + 20;
    put16(udp, ntohs(s.sin_port));
    put16(udp + 2, kRoceV2Port);
    put16(udp + 4, 8 + n);
    put16(udp + 6, 0);
    return 14 + 20 + 8;
  }
  const auto& s = reinterpret_cast<const sockaddr_in6&>(from);
  put16(out + 12, kEtherTypeIpv6);
  std::memset(ip, 0, 40);
  ip[0] = 0x60;
  put16(ip + 4, 8 + n);
  ip[6] = kIpProtoUdp;
  ip[7] = 64;
  std::memcpy(ip + 8, &s.sin6_addr, 16);
  std::memcpy(ip + 24, a.src_ip, 16);
  uint8_t* udp = ip + 40;
  put16(udp, ntohs(s.sin6_port));
  put16(udp + 2, kRoceV2Port);
  put16(udp + 4, 8 + n);
  put16(udp + 6, 0);
  return 14 + 40 + 8;
}

}  // namespace

SocketNic::SocketNic(const SocketNicConfig& config, RxRing rx, uint32_t rx_prod, TxRing tx,
                     uint32_t tx_ci, Counters* counters, uint64_t* ring_drops)
    : cfg_(config) {
  if (cfg_.mode != "packet" && cfg_.mode != "udp")
    throw std::invalid_argument("socket NIC: mode '" + cfg_.mode + "': must be packet or udp");
  if (cfg_.batch == 0 || cfg_.batch > 1024)
    throw std::invalid_argument("socket NIC: batch must be 1 to 1024");
  impl_ = std::make_unique<Impl>(cfg_.capture);
  Impl& m = *impl_;
  m.rx = rx;
  m.tx = tx;
  m.prod = rx_prod;
  m.ci = tx_ci;
  m.counters = counters;
  m.ring_drops = ring_drops;
  m.udp = cfg_.mode == "udp";
  m.family = cfg_.addresses.ip_version == 6 ? AF_INET6 : AF_INET;
  if (m.udp) {
    m.rx_fd = open_udp(m.family, cfg_.addresses.src_ip, kRoceV2Port);
    // Each datagram then carries the socket's running drop count (a cmsg): the kernel's
    // drops are counted as traffic goes on, without a syscall.
    const int one = 1;
    if (setsockopt(m.rx_fd.fd, SOL_SOCKET, SO_RXQ_OVFL, &one, sizeof one) != 0)
      throw std::runtime_error(errno_text("socket NIC, udp mode: setsockopt(SO_RXQ_OVFL)"));
    if (cfg_.addresses.src_port !=
        kRoceV2Port)  // replies leave from the source port the ICRC covers
      m.tx_fd = open_udp(m.family, cfg_.addresses.src_ip, cfg_.addresses.src_port);
  } else {
    m.rx_fd = open_packet(cfg_, &m.ifindex);
  }
  m.rx_buffer_bytes = ask_rx_buffer(m.rx_fd.fd);
  const uint32_t b = cfg_.batch;
  m.buf.resize(size_t(b) * (rx.slot_bytes + kHeaderRoom));
  if (m.udp) m.ctrl.resize(size_t(b) * CMSG_SPACE(sizeof(uint32_t)));
  m.msgs.resize(b);
  m.iovs.resize(b);
  m.addrs.resize(b);
}

SocketNic::~SocketNic() {
  try {
    stop();
  } catch (...) {
    // The destructor must not throw; stop() reported the failure if called.
  }
}

void SocketNic::start() {
  Impl& m = *impl_;
  m.thread = std::thread([&m, this] {
    try {
      const uint32_t b = cfg_.batch;
      const uint32_t room = m.rx.slot_bytes;
      const int tx_fd = m.udp && m.tx_fd.fd >= 0 ? m.tx_fd.fd : m.rx_fd.fd;
      sockaddr_storage peer{};
      const socklen_t peer_len = sockaddr_for(m.family, cfg_.addresses.dst_ip, kRoceV2Port, &peer);
      std::vector<mmsghdr> out(b);
      std::vector<iovec> out_iov(b);
      sockaddr_ll dev{};
      dev.sll_family = AF_PACKET;
      dev.sll_ifindex = m.ifindex;
      uint32_t idle = 0;
      uint32_t busy_passes = 0;
      while (!m.stop.load(std::memory_order_acquire)) {
        bool busy = false;
        // Receive: a datagram lands after room for the headers udp mode rebuilds.
        const uint32_t lead = m.udp ? kHeaderRoom : 0;
        for (uint32_t i = 0; i < b; ++i) {
          m.iovs[i] = {m.buf.data() + size_t(i) * (room + kHeaderRoom) + lead, room};
          m.msgs[i] = mmsghdr{};
          m.msgs[i].msg_hdr.msg_iov = &m.iovs[i];
          m.msgs[i].msg_hdr.msg_iovlen = 1;
          m.msgs[i].msg_hdr.msg_name = &m.addrs[i];
          m.msgs[i].msg_hdr.msg_namelen = sizeof(sockaddr_storage);
          if (m.udp) {
            m.msgs[i].msg_hdr.msg_control = m.ctrl.data() + i * CMSG_SPACE(sizeof(uint32_t));
            m.msgs[i].msg_hdr.msg_controllen = CMSG_SPACE(sizeof(uint32_t));
          }
        }
        const int n = recvmmsg(m.rx_fd.fd, m.msgs.data(), b, MSG_DONTWAIT | MSG_TRUNC, nullptr);
        // ENETDOWN: the interface went down or came up after the bind; frames
        // resume when it is up, so the thread goes on.
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && errno != ENETDOWN)
          throw std::runtime_error(errno_text("socket NIC: recvmmsg"));
        for (int i = 0; i < n; ++i) {
          busy = true;
          if (m.udp) {
            msghdr& h = m.msgs[i].msg_hdr;
            for (cmsghdr* c = CMSG_FIRSTHDR(&h); c; c = CMSG_NXTHDR(&h, c)) {
              if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SO_RXQ_OVFL) {
                uint32_t running = 0;
                std::memcpy(&running, CMSG_DATA(c), sizeof running);
                m.saw_drops(running);
              }
            }
          }
          uint32_t len = m.msgs[i].msg_len;
          uint8_t* frame = static_cast<uint8_t*>(m.iovs[i].iov_base);
          if (len > room) {  // cut by the buffer: longer than a slot, not ours to take
            m.filtered.fetch_add(1, std::memory_order_relaxed);
            m.too_long.fetch_add(1, std::memory_order_relaxed);
            continue;
          }
          if (m.udp) {
            // The header goes in front of the datagram, in the room left for it.
            uint8_t hdr[kHeaderRoom];
            const uint32_t h = rebuild_headers(cfg_, m.family, m.addrs[i], len, hdr);
            frame -= h;
            std::memcpy(frame, hdr, h);
            len += h;
            if (len > room) {  // fits as a datagram, not with the headers we put back
              m.filtered.fetch_add(1, std::memory_order_relaxed);
              m.too_long.fetch_add(1, std::memory_order_relaxed);
              continue;
            }
            if (len < h + sizeof(Bth) + kIcrcBytes || !ours(frame, len, cfg_.qpn)) {
              m.filtered.fetch_add(1, std::memory_order_relaxed);
              continue;
            }
          } else {
            const auto& from = reinterpret_cast<const sockaddr_ll&>(m.addrs[i]);
            if (from.sll_pkttype == PACKET_OUTGOING || !ours(frame, len, cfg_.qpn)) {
              m.filtered.fetch_add(1, std::memory_order_relaxed);
              continue;
            }
          }
          const uint64_t t = now_ns();
          if (rx_produce<Scope::kSystem>(m.rx, m.prod, frame, len, t) != ProduceResult::kOk) {
            m.rx_ring_full.fetch_add(1, std::memory_order_relaxed);
            store_relaxed<Scope::kSystem>(&m.counters->v[uint32_t(Counter::kRingDrops)],
                                          ++*m.ring_drops);
            continue;
          }
          m.pcap.write(frame, len, wall_ns());
          m.rx_frames.fetch_add(1, std::memory_order_relaxed);
          m.rx_bytes.fetch_add(len, std::memory_order_relaxed);
        }
        // Transmit what the engine submitted, straight from its slots.
        uint32_t k = 0, q = 0;
        for (; k < b; ++k) {
          const TxDesc* d = tx_poll<Scope::kSystem>(m.tx, m.ci + k);
          if (!d) break;
          uint8_t* slot = m.tx.slot(m.ci + k);
          const uint32_t len = d->len < m.tx.slot_bytes ? d->len : m.tx.slot_bytes;
          m.pcap.write(slot, len, wall_ns());
          uint32_t skip = 0;
          if (m.udp) {  // the kernel writes Ethernet, IP and UDP: send from the BTH on
            const DecodeResult r = decode(ByteSpan(slot, len));
            if (!r.ok()) {
              m.tx_errors.fetch_add(1, std::memory_order_relaxed);
              continue;
            }
            skip = r.frame.bth;
          }
          out_iov[q] = {slot + skip, len - skip};
          out[q] = mmsghdr{};
          out[q].msg_hdr.msg_iov = &out_iov[q];
          out[q].msg_hdr.msg_iovlen = 1;
          out[q].msg_hdr.msg_name = m.udp ? static_cast<void*>(&peer) : static_cast<void*>(&dev);
          out[q].msg_hdr.msg_namelen = m.udp ? peer_len : socklen_t(sizeof dev);
          ++q;
        }
        uint32_t sent = 0;
        while (sent < q) {
          const int r = sendmmsg(tx_fd, out.data() + sent, q - sent, 0);
          if (r < 0 && errno == EINTR) continue;
          if (r <= 0) {  // the kernel refused this frame: counted, and the rest go on
            m.tx_errors.fetch_add(1, std::memory_order_relaxed);
            ++sent;
            continue;
          }
          for (int i = 0; i < r; ++i) {
            m.tx_frames.fetch_add(1, std::memory_order_relaxed);
            m.tx_bytes.fetch_add(out_iov[sent + i].iov_len, std::memory_order_relaxed);
          }
          sent += uint32_t(r);
        }
        if (k) {
          busy = true;
          m.ci += k;
          tx_consume<Scope::kSystem>(m.tx, m.ci);
        }
        // The kernel's drops since the last reading: a syscall, so once the thread
        // goes quiet and every 1024 busy passes, not on every pass. Going quiet also
        // writes out what the capture holds.
        if ((busy && ++busy_passes % 1024 == 0) || (!busy && idle == 0)) m.read_kernel_drops();
        if (!busy && idle == 0) m.pcap.flush();
        if (busy) {
          idle = 0;
        } else if (++idle >= kIdleSpins) {
          // Quiet: sleep until a frame arrives, or a moment passes for the tx ring.
          pollfd p{m.rx_fd.fd, POLLIN, 0};
          poll(&p, 1, kIdleWaitMs);
        } else {
          spin_pause();
        }
      }
      m.read_kernel_drops();  // what the kernel dropped since: stats() after stop() are whole
    } catch (const std::exception& e) {
      const std::lock_guard<std::mutex> lock(m.error_mu);
      m.error = e.what();
    }
  });
}

void SocketNic::stop() {
  Impl& m = *impl_;
  m.stop.store(true, std::memory_order_release);
  if (m.thread.joinable()) m.thread.join();
  m.pcap.close();  // its errors are the capture's (info()), not the thread's
  const std::lock_guard<std::mutex> lock(m.error_mu);
  if (!m.error.empty()) {
    std::string e;
    std::swap(e, m.error);
    throw std::runtime_error(e);
  }
}

std::string SocketNic::error() const {
  const std::lock_guard<std::mutex> lock(impl_->error_mu);
  return impl_->error;
}

SocketNicStats SocketNic::stats() const {
  const Impl& m = *impl_;
  SocketNicStats s;
  s.rx_frames = m.rx_frames.load(std::memory_order_relaxed);
  s.rx_bytes = m.rx_bytes.load(std::memory_order_relaxed);
  s.tx_frames = m.tx_frames.load(std::memory_order_relaxed);
  s.tx_bytes = m.tx_bytes.load(std::memory_order_relaxed);
  s.filtered = m.filtered.load(std::memory_order_relaxed);
  s.too_long = m.too_long.load(std::memory_order_relaxed);
  s.rx_ring_full = m.rx_ring_full.load(std::memory_order_relaxed);
  s.tx_errors = m.tx_errors.load(std::memory_order_relaxed);
  s.kernel_drops = m.kernel_drops.load(std::memory_order_relaxed);
  s.capture_errors = m.pcap.lost();
  return s;
}

SocketNicInfo SocketNic::info() const {
  SocketNicInfo i;
  i.rx_buffer_bytes = impl_->rx_buffer_bytes;
  i.rx_buffer_asked = kRxBufferBytes;
  i.capture_error = impl_->pcap.error();
  return i;
}

}  // namespace rt::host
