// The software NIC's thread (rt/host/socket_nic.h).
#include "rt/host/socket_nic.h"

#include <arpa/inet.h>
#include <linux/if_packet.h>
#include <linux/sock_diag.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sys/mman.h>
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
// With the ring, fewer: a block is ours only once the kernel closes it, and closing it wakes
// poll(), so spinning catches no frame sooner; it is there for the engine's replies (a few
// microseconds after a frame, and 256 passes are tens of them). Measured (bench stream, 2
// cores): the thread's CPU time per frame 1.6 us against 2.1 us with 2048.
constexpr uint32_t kRingIdleSpins = 256;
// A deep receive buffer rides out bursts while the engine catches up; root may exceed
// net.core.rmem_max (SO_RCVBUFFORCE), others get at most that. What still overflows is counted.
constexpr int kRxBufferBytes = 64 << 20;

// Packet mode's receive ring (TPACKET_V3). As deep as the receive buffer it replaces, in
// blocks the kernel fills with frames back to back and hands over whole (one acquire load
// per block, no syscall, while traffic flows). 256 KiB holds 62 frames of 4 KiB (a block
// is ours about as often as a recvmmsg batch of 64 was) or some 1 600 small ones, and the
// largest slot (64 KiB) with room to spare; a bigger slot would double it.
constexpr uint64_t kRingBytes = 64 << 20;
constexpr uint32_t kRingBlockBytes = 256 << 10;
// What a block spends besides the frame: its descriptor (48 bytes), a frame's tpacket3_hdr
// with the sockaddr_ll after it, and alignment (the kernel puts the frame at 82 bytes).
constexpr uint32_t kRingFrameRoom = 256;
// The kernel closes a block it has begun after this long even if it is not full: the most
// a lone frame waits (the timer runs on; measured 0.5 ms at the median). The least it takes.
constexpr uint32_t kRingBlockTimeoutMs = 1;
// tpacket_req3 wants a frame size though V3 packs frames of any length: a unit that
// divides the block, checked by the kernel and used for nothing else.
constexpr uint32_t kRingFrameUnit = 2048;

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

// What a pass over the receive ring did.
enum class RxPass : uint8_t {
  kIdle,     // no frame waiting
  kBusy,     // took frames
  kBlocked,  // a frame waits for room in the engine's rx ring
};

// A frame in the receive ring, as the kernel wrote it.
struct RingFrame {
  const uint8_t* data;  // the Ethernet header on (an 802.1Q tag the kernel took off is not
                        // put back: recvmmsg does not either)
  uint32_t len;         // on the wire
  uint32_t snap;        // in the ring: less than len only for a frame longer than a block
  bool outgoing;        // a frame we sent, seen again (sll_pkttype)
};

// Packet mode's receive ring (PACKET_MMAP, TPACKET_V3; docs/socket_nic.md): the kernel
// writes frames into a block it owns, and hands the block over (block_status TP_STATUS_USER,
// with release) once it is full, or, holding a frame, when the kernel's block timer
// (kRingBlockTimeoutMs) next fires; we take its frames in order and hand it back
// (TP_STATUS_KERNEL) after the last. When every block is
// ours the kernel drops what arrives and counts it (PACKET_STATISTICS tp_drops).
class BlockRing {
 public:
  BlockRing() = default;
  BlockRing(const BlockRing&) = delete;
  BlockRing& operator=(const BlockRing&) = delete;
  ~BlockRing() {
    if (map_) munmap(map_, bytes_);
  }

  // Sets the ring up on `fd` (an AF_PACKET socket not yet bound, so nothing is queued
  // outside the ring) for frames of up to `largest` bytes; `bytes` of ring. Returns what
  // failed ("" when set up); the socket is then as it was, for recvmmsg.
  std::string open(int fd, uint32_t largest, uint64_t bytes) {
    block_bytes_ = kRingBlockBytes;
    while (block_bytes_ < largest + kRingFrameRoom) block_bytes_ *= 2;
    blocks_ = uint32_t(bytes / block_bytes_);
    const int v3 = TPACKET_V3;
    if (setsockopt(fd, SOL_PACKET, PACKET_VERSION, &v3, sizeof v3) != 0)
      return errno_text("setsockopt(PACKET_VERSION, TPACKET_V3)");
    tpacket_req3 req{};
    req.tp_block_size = block_bytes_;
    req.tp_block_nr = blocks_;
    req.tp_frame_size = kRingFrameUnit;
    req.tp_frame_nr = blocks_ * (block_bytes_ / kRingFrameUnit);
    req.tp_retire_blk_tov = kRingBlockTimeoutMs;
    const std::string what = "the " + std::to_string(bytes >> 20) + " MiB ring (" +
                             std::to_string(blocks_) + " blocks of " +
                             std::to_string(block_bytes_ >> 10) + " KiB)";
    std::string failed;
    if (setsockopt(fd, SOL_PACKET, PACKET_RX_RING, &req, sizeof req) != 0) {
      failed = errno_text(("setsockopt(PACKET_RX_RING) for " + what).c_str());
    } else {
      bytes_ = size_t(blocks_) * block_bytes_;
      void* p = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      if (p != MAP_FAILED) {
        map_ = static_cast<uint8_t*>(p);
        return "";
      }
      failed = errno_text(("mmap of " + what).c_str());
      tpacket_req3 none{};  // no blocks: the kernel frees the ring
      setsockopt(fd, SOL_PACKET, PACKET_RX_RING, &none, sizeof none);
    }
    const int v1 = TPACKET_V1;  // the version of a socket without a ring
    setsockopt(fd, SOL_PACKET, PACKET_VERSION, &v1, sizeof v1);
    bytes_ = block_bytes_ = blocks_ = 0;
    return failed;
  }

  bool mapped() const { return map_ != nullptr; }
  uint64_t bytes() const { return bytes_; }
  uint32_t block_bytes() const { return block_bytes_; }
  uint32_t blocks() const { return blocks_; }

  // The frame at the cursor; false while the kernel owns the block there.
  bool peek(RingFrame* f) {
    while (left_ == 0) {  // the cursor is at the start of a block
      tpacket_block_desc* b = block(block_);
      if (!(load_acquire<Scope::kSystem>(&b->hdr.bh1.block_status) & TP_STATUS_USER)) return false;
      left_ = b->hdr.bh1.num_pkts;
      offset_ = b->hdr.bh1.offset_to_first_pkt;
      if (left_ == 0) give_back();  // the kernel closes no empty block; were one, it goes back
    }
    // The kernel wrote these offsets; a frame that does not lie inside its block is a ring
    // we do not understand, and the thread stops rather than read past it.
    const uint8_t* base = reinterpret_cast<const uint8_t*>(block(block_));
    const auto* h = reinterpret_cast<const tpacket3_hdr*>(base + offset_);
    if (offset_ > block_bytes_ - TPACKET_ALIGN(sizeof(tpacket3_hdr)) - sizeof(sockaddr_ll) ||
        h->tp_mac > block_bytes_ - offset_ || h->tp_snaplen > block_bytes_ - offset_ - h->tp_mac)
      throw std::runtime_error("socket NIC: mmap ring: block " + std::to_string(block_) +
                               ": a frame at offset " + std::to_string(offset_) + " (mac " +
                               std::to_string(h->tp_mac) + ", " + std::to_string(h->tp_snaplen) +
                               " bytes) runs past the block's " + std::to_string(block_bytes_));
    const auto* sll =
        reinterpret_cast<const sockaddr_ll*>(base + offset_ + TPACKET_ALIGN(sizeof(tpacket3_hdr)));
    *f = RingFrame{base + offset_ + h->tp_mac, h->tp_len, h->tp_snaplen,
                   sll->sll_pkttype == PACKET_OUTGOING};
    return true;
  }

  // Past the frame peek() gave (done with: its bytes may be overwritten); after a block's
  // last frame the block goes back to the kernel.
  void advance() {
    const auto* h = reinterpret_cast<const tpacket3_hdr*>(
        reinterpret_cast<const uint8_t*>(block(block_)) + offset_);
    if (--left_ == 0)
      give_back();
    else
      offset_ += h->tp_next_offset;
  }

 private:
  tpacket_block_desc* block(uint32_t i) const {
    return reinterpret_cast<tpacket_block_desc*>(map_ + size_t(i) * block_bytes_);
  }
  void give_back() {
    store_release<Scope::kSystem>(&block(block_)->hdr.bh1.block_status, TP_STATUS_KERNEL);
    block_ = block_ + 1 == blocks_ ? 0 : block_ + 1;
    left_ = 0;
  }

  uint8_t* map_ = nullptr;
  size_t bytes_ = 0;
  uint32_t block_bytes_ = 0;
  uint32_t blocks_ = 0;
  uint32_t block_ = 0;   // the block the cursor is in
  uint32_t left_ = 0;    // its frames not yet taken; 0: its status not yet read
  uint32_t offset_ = 0;  // of the cursor's frame in its block
};

}  // namespace

struct SocketNic::Impl {
  Steering steering;
  std::vector<NicQueue> queues;  // their rx_prod and tx_ci: this thread's, as it goes
  uint32_t slot_bytes = 0;       // every queue's rx and tx slots
  bool udp = false;
  int family = AF_INET;
  Fd rx_fd, tx_fd;  // the same socket in packet mode (tx_fd unused)
  BlockRing ring;   // packet mode's receive ring, when it has one (after rx_fd: unmapped first)
  // Each queue's rx `released` as last read: slots up to it + depth are free. Read again
  // only when the NIC has caught up with it, not for every frame: the engine writes it as it
  // goes, and each read would move its cache line across cores.
  std::vector<uint32_t> released_seen;
  std::vector<uint32_t> taken;  // per queue: tx slots in this pass's send batch
  bool capturing = false;       // a capture file: frames are written with a wall-clock stamp
  std::string rx_fallback;      // rx_path "auto" without the ring: why
  int ifindex = 0;
  PcapFile pcap;
  std::atomic<bool> stop{false};
  std::thread thread;
  std::mutex error_mu;
  std::string error;
  // Counters: written by the thread only, read by stats().
  std::atomic<uint64_t> rx_frames{0}, rx_bytes{0}, tx_frames{0}, tx_bytes{0}, filtered{0},
      rx_ring_full{0}, tx_errors{0}, kernel_drops{0}, too_long{0}, ring_freezes{0};
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
    // Reading it resets it: each reading is new drops. A V3 ring's adds how often the kernel
    // found every block ours (its frames dropped then are in tp_drops).
    tpacket_stats_v3 ps{};
    socklen_t ps_len = ring.mapped() ? sizeof(tpacket_stats_v3) : sizeof(tpacket_stats);
    if (getsockopt(rx_fd.fd, SOL_PACKET, PACKET_STATISTICS, &ps, &ps_len) != 0) return;
    if (ps.tp_drops) kernel_drops.fetch_add(ps.tp_drops, std::memory_order_relaxed);
    if (ring.mapped() && ps.tp_freeze_q_cnt)
      ring_freezes.fetch_add(ps.tp_freeze_q_cnt, std::memory_order_relaxed);
  }

  // The queue a frame is for, or kNoQueue: not ours.
  uint32_t queue_for(const uint8_t* f, uint32_t len) const {
    const DecodeResult r = decode(ByteSpan(f, len));
    return r.ok() ? queue_of(steering, r.frame) : kNoQueue;
  }

  // A frame for queue q's engine, past the filter: into its rx ring (a copy), captured,
  // counted.
  void deliver(uint32_t q, const uint8_t* frame, uint32_t len) {
    const uint64_t t = now_ns();
    NicQueue& nq = queues[q];
    if (rx_produce<Scope::kSystem>(nq.rx, nq.rx_prod, frame, len, t) != ProduceResult::kOk) {
      rx_ring_full.fetch_add(1, std::memory_order_relaxed);
      store_relaxed<Scope::kSystem>(&nq.counters->v[uint32_t(Counter::kRingDrops)],
                                    ++*nq.ring_drops);
      return;
    }
    pcap.write(frame, len, wall_ns());
    rx_frames.fetch_add(1, std::memory_order_relaxed);
    rx_bytes.fetch_add(len, std::memory_order_relaxed);
  }

  void filter_out(bool long_frame) {
    filtered.fetch_add(1, std::memory_order_relaxed);
    if (long_frame) too_long.fetch_add(1, std::memory_order_relaxed);
  }

  // Packet mode with the ring: up to `batch` frames.
  RxPass receive_ring(uint32_t batch);
  // recvmmsg (udp mode, packet mode without the ring): one batch; whether it held any.
  bool receive_batch(const SocketNicConfig& c);

  explicit Impl(const std::string& capture) : pcap(capture) {}
};

namespace {

// Packet mode: one AF_PACKET socket, receiving nothing until bind_packet() (protocol 0), so
// that no frame (of any interface) waits in its queue while the ring is set up.
Fd packet_socket(const SocketNicConfig& c, int* ifindex) {
  if (c.interface.empty())
    throw std::runtime_error("socket NIC, packet mode: no interface given (socket.interface)");
  *ifindex = int(if_nametoindex(c.interface.c_str()));
  if (*ifindex == 0)
    throw std::runtime_error("socket NIC: interface '" + c.interface + "' not found");
  Fd fd(socket(AF_PACKET, SOCK_RAW, 0));
  if (fd.fd < 0) {
    if (errno == EPERM || errno == EACCES)
      throw std::runtime_error(
          "socket NIC, packet mode: socket(AF_PACKET) needs root or CAP_NET_RAW (" +
          std::string(std::strerror(errno)) + "); socket.mode 'udp' works without");
    throw std::runtime_error(errno_text("socket NIC: socket(AF_PACKET)"));
  }
  return fd;
}

// ...then every frame of the interface, from here on.
void bind_packet(int fd, int ifindex, const std::string& interface) {
  sockaddr_ll sll{};
  sll.sll_family = AF_PACKET;
  sll.sll_protocol = htons(ETH_P_ALL);
  sll.sll_ifindex = ifindex;
  if (bind(fd, reinterpret_cast<sockaddr*>(&sll), sizeof sll) != 0)
    throw std::runtime_error(errno_text(("socket NIC: bind to '" + interface + "'").c_str()));
#ifdef PACKET_IGNORE_OUTGOING
  const int one = 1;  // our own frames are not looped back to us (Linux 4.20+)
  setsockopt(fd, SOL_PACKET, PACKET_IGNORE_OUTGOING, &one, sizeof one);
#endif
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

SocketNic::SocketNic(const SocketNicConfig& config, const Steering& steering,
                     std::vector<NicQueue> queues)
    : cfg_(config) {
  if (queues.empty() || queues.size() != steering.count)
    throw std::invalid_argument("socket NIC: " + std::to_string(queues.size()) +
                                " queues, steered to " + std::to_string(steering.count));
  if (cfg_.mode != "packet" && cfg_.mode != "udp")
    throw std::invalid_argument("socket NIC: mode '" + cfg_.mode + "': must be packet or udp");
  if (cfg_.batch == 0 || cfg_.batch > 1024)
    throw std::invalid_argument("socket NIC: batch must be 1 to 1024");
  if (cfg_.rx_path != "auto" && cfg_.rx_path != "mmap" && cfg_.rx_path != "recvmmsg")
    throw std::invalid_argument("socket NIC: rx_path '" + cfg_.rx_path +
                                "': must be auto, mmap or recvmmsg");
  if (cfg_.rx_path == "mmap" && cfg_.mode != "packet")
    throw std::invalid_argument("socket NIC: rx_path 'mmap' is packet mode's (udp mode: recvmmsg)");
  impl_ = std::make_unique<Impl>(cfg_.capture);
  Impl& m = *impl_;
  m.steering = steering;
  m.queues = std::move(queues);
  m.slot_bytes = m.queues[0].rx.slot_bytes;
  for (const NicQueue& q : m.queues)
    m.released_seen.push_back(load_acquire<Scope::kSystem>(q.rx.released));
  m.taken.assign(m.queues.size(), 0);
  m.capturing = !cfg_.capture.empty();
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
    m.rx_fd = packet_socket(cfg_, &m.ifindex);
    if (cfg_.rx_path != "recvmmsg") {
      const std::string failed = m.ring.open(m.rx_fd.fd, m.slot_bytes, kRingBytes);
      if (!failed.empty() && cfg_.rx_path == "mmap")
        throw std::runtime_error("socket NIC, packet mode (socket.rx_path 'mmap'): " + failed);
      if (!failed.empty()) m.rx_fallback = failed + "; receiving with recvmmsg instead";
    }
    bind_packet(m.rx_fd.fd, m.ifindex, cfg_.interface);
  }
  m.rx_buffer_bytes = ask_rx_buffer(m.rx_fd.fd);
  if (m.ring.mapped()) return;  // the ring holds what arrives: no batch buffers
  const uint32_t b = cfg_.batch;
  m.buf.resize(size_t(b) * (m.slot_bytes + kHeaderRoom));
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

bool SocketNic::Impl::receive_batch(const SocketNicConfig& c) {
  const uint32_t b = c.batch;
  const uint32_t room = slot_bytes;
  bool busy = false;
  // Receive: a datagram lands after room for the headers udp mode rebuilds.
  const uint32_t lead = udp ? kHeaderRoom : 0;
  for (uint32_t i = 0; i < b; ++i) {
    iovs[i] = {buf.data() + size_t(i) * (room + kHeaderRoom) + lead, room};
    msgs[i] = mmsghdr{};
    msgs[i].msg_hdr.msg_iov = &iovs[i];
    msgs[i].msg_hdr.msg_iovlen = 1;
    msgs[i].msg_hdr.msg_name = &addrs[i];
    msgs[i].msg_hdr.msg_namelen = sizeof(sockaddr_storage);
    if (udp) {
      msgs[i].msg_hdr.msg_control = ctrl.data() + i * CMSG_SPACE(sizeof(uint32_t));
      msgs[i].msg_hdr.msg_controllen = CMSG_SPACE(sizeof(uint32_t));
    }
  }
  const int n = recvmmsg(rx_fd.fd, msgs.data(), b, MSG_DONTWAIT | MSG_TRUNC, nullptr);
  // ENETDOWN: the interface went down or came up after the bind; frames
  // resume when it is up, so the thread goes on.
  if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && errno != ENETDOWN)
    throw std::runtime_error(errno_text("socket NIC: recvmmsg"));
  for (int i = 0; i < n; ++i) {
    busy = true;
    if (udp) {
      msghdr& h = msgs[i].msg_hdr;
      for (cmsghdr* cm = CMSG_FIRSTHDR(&h); cm; cm = CMSG_NXTHDR(&h, cm)) {
        if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SO_RXQ_OVFL) {
          uint32_t running = 0;
          std::memcpy(&running, CMSG_DATA(cm), sizeof running);
          saw_drops(running);
        }
      }
    }
    uint32_t len = msgs[i].msg_len;
    uint8_t* frame = static_cast<uint8_t*>(iovs[i].iov_base);
    if (len > room) {  // cut by the buffer: longer than a slot, not ours to take
      filter_out(true);
      continue;
    }
    bool candidate = true;  // worth decoding: a whole BTH and ICRC, not our own frame seen again
    if (udp) {
      // The header goes in front of the datagram, in the room left for it.
      uint8_t hdr[kHeaderRoom];
      const uint32_t h = rebuild_headers(c, family, addrs[i], len, hdr);
      frame -= h;
      std::memcpy(frame, hdr, h);
      len += h;
      if (len > room) {  // fits as a datagram, not with the headers we put back
        filter_out(true);
        continue;
      }
      candidate = len >= h + sizeof(Bth) + kIcrcBytes;
    } else {
      candidate = reinterpret_cast<const sockaddr_ll&>(addrs[i]).sll_pkttype != PACKET_OUTGOING;
    }
    const uint32_t q = candidate ? queue_for(frame, len) : kNoQueue;
    if (q == kNoQueue) {
      filter_out(false);
      continue;
    }
    deliver(q, frame, len);
  }
  return busy;
}

// The ring waits for the engine: while its rx ring is full, frames stay in the kernel's
// ring (64 MiB, as the receive buffer held them for recvmmsg), and what overflows that is
// the kernel's drop, counted. Copying them out only to drop them (recvmmsg's way) would
// lose frames in every burst the engine takes longer over than the NIC, which the ring,
// faster than the engine, would make common.
RxPass SocketNic::Impl::receive_ring(uint32_t batch) {
  RingFrame f;
  uint32_t n = 0;
  for (; n < batch && ring.peek(&f); ++n, ring.advance()) {
    if (f.len > slot_bytes || f.snap < f.len) {  // longer than a slot (or than a block)
      filter_out(true);
      continue;
    }
    const uint32_t q = f.outgoing ? kNoQueue : queue_for(f.data, f.len);
    if (q == kNoQueue) {
      filter_out(false);
      continue;
    }
    NicQueue& nq = queues[q];
    // rx_reserve()'s test, on the last reading. A full queue holds the frames behind this
    // one too (they wait in the kernel's ring), as one receive ring would.
    if (nq.rx_prod - released_seen[q] >= nq.rx.depth()) {
      released_seen[q] = load_acquire<Scope::kSystem>(nq.rx.released);
      if (nq.rx_prod - released_seen[q] >= nq.rx.depth())
        return n ? RxPass::kBusy : RxPass::kBlocked;
    }
    const uint64_t t = now_ns();
    std::memcpy(nq.rx.slot(nq.rx_prod), f.data, f.len);
    rx_publish<Scope::kSystem>(nq.rx, nq.rx_prod, f.len, t);
    if (capturing) pcap.write(f.data, f.len, wall_ns());
    // One writer: plain stores, no locked add (which would wait for the copy's stores).
    rx_frames.store(rx_frames.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    rx_bytes.store(rx_bytes.load(std::memory_order_relaxed) + f.len, std::memory_order_relaxed);
  }
  return n ? RxPass::kBusy : RxPass::kIdle;
}

void SocketNic::start() {
  Impl& m = *impl_;
  m.thread = std::thread([&m, this] {
    pthread_setname_np(pthread_self(), "rt-socket-nic");  // top -H, /proc/<pid>/task/*/comm
    try {
      const uint32_t b = cfg_.batch;
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
        const RxPass rx = m.ring.mapped()         ? m.receive_ring(b)
                          : m.receive_batch(cfg_) ? RxPass::kBusy
                                                  : RxPass::kIdle;
        bool busy = rx == RxPass::kBusy;
        // Transmit what the engines submitted, straight from their slots: up to a batch,
        // queue after queue.
        uint32_t q = 0;
        std::vector<uint32_t>& taken = m.taken;
        for (uint32_t qi = 0; qi < m.queues.size(); ++qi) {
          NicQueue& nq = m.queues[qi];
          uint32_t& k = taken[qi];
          for (k = 0; q < b; ++k) {
            const TxDesc* d = tx_poll<Scope::kSystem>(nq.tx, nq.tx_ci + k);
            if (!d) break;
            uint8_t* slot = nq.tx.slot(nq.tx_ci + k);
            const uint32_t len = d->len < nq.tx.slot_bytes ? d->len : nq.tx.slot_bytes;
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
        for (uint32_t qi = 0; qi < m.queues.size(); ++qi) {
          if (!taken[qi]) continue;
          busy = true;
          NicQueue& nq = m.queues[qi];
          nq.tx_ci += taken[qi];
          tx_consume<Scope::kSystem>(nq.tx, nq.tx_ci);
        }
        // The kernel's drops since the last reading: a syscall, so once the thread
        // goes quiet and every 1024 busy passes, not on every pass. Going quiet also
        // writes out what the capture holds.
        if ((busy && ++busy_passes % 1024 == 0) || (!busy && idle == 0)) m.read_kernel_drops();
        if (!busy && idle == 0) m.pcap.flush();
        if (busy) {
          idle = 0;
        } else if (++idle >= (m.ring.mapped() ? kRingIdleSpins : kIdleSpins)) {
          // Quiet: sleep until a frame arrives, or a moment passes for the tx ring. Frames
          // waiting for the engine would end poll() at once: then a moment, for the engine.
          pollfd p{m.rx_fd.fd, POLLIN, 0};
          poll(&p, rx == RxPass::kBlocked ? 0 : 1, kIdleWaitMs);
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
  const BlockRing& r = impl_->ring;
  i.rx_path = r.mapped() ? "mmap" : "recvmmsg";
  i.rx_path_reason = cfg_.rx_path_reason;
  i.rx_fallback = impl_->rx_fallback;
  if (r.mapped()) {
    i.rx_ring_bytes = r.bytes();
    i.rx_ring_block_bytes = r.block_bytes();
    i.rx_ring_blocks = r.blocks();
    i.rx_ring_block_timeout_ms = kRingBlockTimeoutMs;
    i.rx_ring_freezes = impl_->ring_freezes.load(std::memory_order_relaxed);
  }
  return i;
}

}  // namespace rt::host
