// Decoding a RoCEv2 frame: Ethernet [802.1Q] / IPv4|IPv6 / UDP 4791 / BTH /
// extension headers / payload / pad / ICRC.
//
// decode() never reads past the span it is given. It returns offsets into the
// frame (a view, nothing is copied) or the first problem it met: which field,
// at which byte offset, how many bytes were needed and how many were left.
#pragma once

#include "rt/protocol/bth.h"
#include "rt/protocol/eth.h"
#include "rt/protocol/ipv4.h"
#include "rt/protocol/ipv6.h"
#include "rt/protocol/opcodes.h"
#include "rt/protocol/udp.h"

namespace rt {

enum class DecodeStatus : uint8_t {
  kOk = 0,
  kTruncated,    // a header or the ICRC does not fit in what is left
  kBadValue,     // a field holds a value this frame cannot have
  kNotRoce,      // a valid packet, but not RoCEv2 (other ethertype, protocol, port)
  kUnsupported,  // valid RoCE we do not speak (RD and XRC transports)
};

struct DecodeError {
  DecodeStatus status = DecodeStatus::kOk;
  const char* field = nullptr;  // dotted name, e.g. "reth", "ipv4.total_length"
  uint32_t offset = 0;          // byte offset of that field in the frame
  uint32_t need = 0;            // kTruncated: bytes needed; otherwise the value found
  uint32_t have = 0;            // kTruncated: bytes left; otherwise the limit or the
                                // expected value, kNoLimit when there is none
};

constexpr uint32_t kNoLimit = 0xFFFFFFFFu;

constexpr uint32_t kIcrcBytes = 4;

// Offsets of everything found in one frame. All offsets are from the first
// byte of the Ethernet header (or of the BTH, for decode_transport).
struct FrameView {
  const uint8_t* base = nullptr;
  uint32_t len = 0;  // bytes given; may exceed end (Ethernet minimum-size padding)

  bool has_eth = false;
  bool has_vlan = false;
  uint16_t vlan_tci = 0;
  uint8_t ip_version = 0;    // 0 when decoded from the BTH on (UDP socket mode)
  uint32_t l3 = 0;           // IP header
  uint32_t l3_len = 0;       // IP header bytes (with IPv4 options)
  uint32_t l4 = 0;           // UDP header
  uint32_t bth = 0;          // BTH
  uint32_t ext = 0;          // first extension header
  uint32_t payload = 0;      // first payload byte
  uint32_t payload_len = 0;  // without pad
  uint32_t pad = 0;
  uint32_t icrc = 0;  // the 4 ICRC bytes
  uint32_t end = 0;   // one past the ICRC: where the IP packet ends
  OpcodeInfo op{};

  template <typename H>
  RT_HD const H& at(uint32_t offset) const {
    return *reinterpret_cast<const H*>(base + offset);
  }
  RT_HD const EthHdr& eth_hdr() const { return at<EthHdr>(0); }
  RT_HD const Ipv4Hdr& ipv4_hdr() const { return at<Ipv4Hdr>(l3); }
  RT_HD const Ipv6Hdr& ipv6_hdr() const { return at<Ipv6Hdr>(l3); }
  RT_HD const UdpHdr& udp_hdr() const { return at<UdpHdr>(l4); }
  RT_HD const Bth& bth_hdr() const { return at<Bth>(bth); }
  // Extension headers: only valid when op.has(the header).
  template <typename H>
  RT_HD const H& ext_hdr(Hdr h) const {
    return at<H>(ext + op.offset_of(h));
  }
  RT_HD uint32_t icrc_field() const { return load_le32(base + icrc); }
};

struct DecodeResult {
  FrameView frame;
  DecodeError error;
  RT_HD bool ok() const { return error.status == DecodeStatus::kOk; }
};

namespace detail {
RT_HD inline bool fits(DecodeResult& r, uint32_t offset, uint32_t need, uint32_t limit,
                       const char* field) {
  if (offset <= limit && need <= limit - offset) return true;
  r.error = {DecodeStatus::kTruncated, field, offset, need, offset <= limit ? limit - offset : 0};
  return false;
}
RT_HD inline bool fail(DecodeResult& r, DecodeStatus s, const char* field, uint32_t offset,
                       uint32_t value, uint32_t limit = kNoLimit) {
  r.error = {s, field, offset, value, limit};
  return false;
}

// BTH onwards, given where the transport bytes start and where the packet
// (including the ICRC) ends.
RT_HD inline bool decode_from_bth(DecodeResult& r, uint32_t bth, uint32_t end) {
  FrameView& f = r.frame;
  if (!fits(r, bth, sizeof(Bth), end, "bth")) return false;
  f.bth = bth;
  const Bth& h = f.bth_hdr();
  f.op = opcode_info(h.opcode);
  if (!f.op.valid) {
    const Transport t = transport_of(h.opcode);
    const bool unsupported = t == Transport::RD || t == Transport::XRC;
    return fail(r, unsupported ? DecodeStatus::kUnsupported : DecodeStatus::kBadValue, "bth.opcode",
                bth, h.opcode);
  }
  f.ext = bth + sizeof(Bth);
  const uint32_t body_end = end >= kIcrcBytes ? end - kIcrcBytes : 0;
  // Each header in wire order, so a truncation names the first one missing.
  for (int bit = 0; bit < kNumHdrs; ++bit) {
    const Hdr hdr = Hdr(1u << bit);
    if (!f.op.has(hdr)) continue;
    constexpr const char* names[kNumHdrs] = {"deth",           "reth",  "atomic_eth", "aeth",
                                             "atomic_ack_eth", "immdt", "ieth"};
    if (!fits(r, f.ext + f.op.offset_of(hdr), hdr_bytes(bit), body_end, names[bit])) return false;
  }
  f.payload = f.ext + f.op.ext_bytes();
  if (!fits(r, f.payload, kIcrcBytes, end, "icrc")) return false;
  const uint32_t body = body_end - f.payload;
  if (f.op.transport == Transport::CNP) {
    // A CNP carries 16 reserved bytes and no pad (its PadCnt is reserved).
    if (body != kCnpReservedBytes)
      return fail(r, DecodeStatus::kBadValue, "cnp.length", f.payload, body, kCnpReservedBytes);
    f.pad = 0;
  } else {
    f.pad = h.pad_count();
    if (f.pad > body)
      return fail(r, DecodeStatus::kBadValue, "bth.pad_count", bth + 1, f.pad, body);
  }
  f.payload_len = body - f.pad;
  f.icrc = body_end;
  f.end = end;
  return true;
}
}  // namespace detail

// Decode a full Ethernet frame.
RT_HD inline DecodeResult decode(ByteSpan frame) {
  DecodeResult r;
  FrameView& f = r.frame;
  f.base = frame.data;
  f.len = frame.size > 0xFFFFFFFFu ? 0xFFFFFFFFu : uint32_t(frame.size);
  f.has_eth = true;
  const uint32_t len = f.len;
  using detail::fail;
  using detail::fits;

  if (!fits(r, 0, sizeof(EthHdr), len, "eth")) return r;
  uint32_t off = 12;  // the ethertype
  uint16_t ethertype = f.eth_hdr().ethertype.get();
  if (ethertype == kEtherTypeVlan) {
    if (!fits(r, 12, 2 + sizeof(VlanTag), len, "vlan")) return r;
    f.has_vlan = true;
    f.vlan_tci = f.at<VlanTag>(14).tci.get();
    ethertype = f.at<VlanTag>(14).ethertype.get();
    off = 16;
  }
  f.l3 = off + 2;
  uint32_t ip_end = 0;
  if (ethertype == kEtherTypeIpv4) {
    if (!fits(r, f.l3, sizeof(Ipv4Hdr), len, "ipv4")) return r;
    const Ipv4Hdr& ip = f.ipv4_hdr();
    f.ip_version = 4;
    if (ip.version() != 4) {
      fail(r, DecodeStatus::kBadValue, "ipv4.version", f.l3, ip.version());
      return r;
    }
    f.l3_len = uint32_t(ip.header_bytes());
    if (f.l3_len < sizeof(Ipv4Hdr)) {
      fail(r, DecodeStatus::kBadValue, "ipv4.ihl", f.l3, f.l3_len / 4, 5);
      return r;
    }
    if (!fits(r, f.l3, f.l3_len, len, "ipv4.options")) return r;
    const uint32_t total = ip.total_length.get();
    if (total < f.l3_len || total > len - f.l3) {
      fail(r, DecodeStatus::kBadValue, "ipv4.total_length", f.l3 + 2, total, len - f.l3);
      return r;
    }
    if (ip.protocol != kIpProtoUdp) {
      fail(r, DecodeStatus::kNotRoce, "ipv4.protocol", f.l3 + 9, ip.protocol, kIpProtoUdp);
      return r;
    }
    if ((ip.flags_fragment.get() & 0x3FFF) != 0) {  // MF set or a non-zero offset
      fail(r, DecodeStatus::kUnsupported, "ipv4.flags_fragment", f.l3 + 6, ip.flags_fragment.get());
      return r;
    }
    ip_end = f.l3 + total;
  } else if (ethertype == kEtherTypeIpv6) {
    if (!fits(r, f.l3, sizeof(Ipv6Hdr), len, "ipv6")) return r;
    const Ipv6Hdr& ip = f.ipv6_hdr();
    f.ip_version = 6;
    if (ip.version() != 6) {
      fail(r, DecodeStatus::kBadValue, "ipv6.version", f.l3, ip.version());
      return r;
    }
    f.l3_len = sizeof(Ipv6Hdr);
    const uint32_t plen = ip.payload_length.get();
    if (plen > len - f.l3 - f.l3_len) {
      fail(r, DecodeStatus::kBadValue, "ipv6.payload_length", f.l3 + 4, plen,
           len - f.l3 - f.l3_len);
      return r;
    }
    if (ip.next_header != kIpProtoUdp) {
      fail(r, DecodeStatus::kNotRoce, "ipv6.next_header", f.l3 + 6, ip.next_header, kIpProtoUdp);
      return r;
    }
    ip_end = f.l3 + f.l3_len + plen;
  } else {
    fail(r, DecodeStatus::kNotRoce, "eth.ethertype", off, ethertype);  // describe() names both
    return r;
  }

  f.l4 = f.l3 + f.l3_len;
  if (!fits(r, f.l4, sizeof(UdpHdr), ip_end, "udp")) return r;
  const UdpHdr& udp = f.udp_hdr();
  if (udp.dst_port.get() != kRoceV2Port) {
    fail(r, DecodeStatus::kNotRoce, "udp.dst_port", f.l4 + 2, udp.dst_port.get(), kRoceV2Port);
    return r;
  }
  const uint32_t udp_len = udp.length.get();
  if (udp_len < sizeof(UdpHdr) || udp_len > ip_end - f.l4) {
    fail(r, DecodeStatus::kBadValue, "udp.length", f.l4 + 4, udp_len, ip_end - f.l4);
    return r;
  }
  detail::decode_from_bth(r, f.l4 + sizeof(UdpHdr), f.l4 + udp_len);
  return r;
}

// Decode the transport bytes alone (BTH .. ICRC), as a UDP socket delivers
// them. ICRC checks then need the IP and UDP headers from elsewhere.
RT_HD inline DecodeResult decode_transport(ByteSpan bytes) {
  DecodeResult r;
  r.frame.base = bytes.data;
  r.frame.len = bytes.size > 0xFFFFFFFFu ? 0xFFFFFFFFu : uint32_t(bytes.size);
  detail::decode_from_bth(r, 0, r.frame.len);
  return r;
}

}  // namespace rt
