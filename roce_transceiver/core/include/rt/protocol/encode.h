// Building a RoCEv2 frame from fields.
//
// Derived fields (IP and UDP lengths, IPv4 checksum, pad count, ICRC) are
// computed unless the spec overrides them, so tests can build bad frames on
// purpose. The opcode row decides which extension headers are written.
#pragma once

#include "rt/byte_copy.h"
#include "rt/protocol/icrc.h"

namespace rt {

struct FrameSpec {
  // Ethernet
  uint8_t dst_mac[6] = {0x02, 0, 0, 0, 0, 0x02};
  uint8_t src_mac[6] = {0x02, 0, 0, 0, 0, 0x01};
  bool vlan = false;
  uint16_t vlan_tci = 0;
  // IP (IPv4 uses the first 4 bytes of the addresses)
  uint8_t ip_version = 4;
  uint8_t src_ip[16] = {10, 0, 0, 1};
  uint8_t dst_ip[16] = {10, 0, 0, 2};
  uint16_t ip_id = 0;
  uint8_t tos = 0;            // IPv4 TOS or IPv6 traffic class
  uint8_t ttl = 64;           // IPv4 TTL or IPv6 hop limit
  uint32_t flow_label = 0;    // IPv6 only
  bool dont_fragment = true;  // IPv4 DF, as RoCE NICs set it
  // UDP
  uint16_t src_port = 49152;
  uint16_t dst_port = kRoceV2Port;
  uint16_t udp_checksum = 0;  // RoCEv2 NICs send zero
  // BTH
  uint8_t opcode = 0x04;  // RC SEND_ONLY
  bool se = false;
  bool mig_req = true;  // IBA: set on every packet until migration is used
  uint8_t tver = 0;
  uint16_t pkey = 0xFFFF;
  bool fecn = false;
  bool becn = false;
  uint32_t dest_qp = 0;
  bool ack_req = false;
  uint32_t psn = 0;
  // Extension headers (only those the opcode carries are written)
  uint64_t va = 0;
  uint32_t rkey = 0;
  uint32_t dma_len = 0;
  uint32_t imm = 0;
  uint8_t syndrome = kAethAck;
  uint32_t msn = 0;
  uint64_t swap_add = 0;
  uint64_t compare = 0;
  uint64_t orig = 0;
  uint32_t qkey = 0;
  uint32_t src_qp = 0;
  uint32_t inval_rkey = 0;
  // Overrides of derived fields
  int16_t pad_count = -1;   // -1: derived from the payload length
  bool icrc_given = false;  // false: computed
  uint32_t icrc = 0;
  bool ip_checksum_given = false;
  uint16_t ip_checksum = 0;
};

enum class EncodeStatus : uint8_t { kOk = 0, kBadOpcode, kBufferTooSmall, kTooLong, kBadField };

struct EncodeResult {
  EncodeStatus status = EncodeStatus::kOk;
  uint32_t len = 0;             // bytes written, or bytes needed for kBufferTooSmall
  const char* field = nullptr;  // the offending field
  RT_HD bool ok() const { return status == EncodeStatus::kOk; }
};

// Bytes the frame will take, Ethernet header to ICRC.
// Where the payload starts in the frame encode() writes for `s`.
RT_HD inline uint32_t payload_offset(const FrameSpec& s) {
  return uint32_t(sizeof(EthHdr)) + (s.vlan ? 4u : 0u) +
         (s.ip_version == 6 ? uint32_t(sizeof(Ipv6Hdr)) : uint32_t(sizeof(Ipv4Hdr))) +
         uint32_t(sizeof(UdpHdr)) + uint32_t(sizeof(Bth)) + opcode_info(s.opcode).ext_bytes();
}

// Bytes the frame will take, Ethernet header to ICRC.
RT_HD inline uint32_t encoded_size(const FrameSpec& s, uint32_t payload_len) {
  const uint32_t pad = (4 - (payload_len & 3)) & 3;
  return payload_offset(s) + payload_len + pad + kIcrcBytes;
}

RT_HD inline EncodeResult encode(const FrameSpec& s, ByteSpan payload, MutByteSpan out) {
  EncodeResult r;
  const OpcodeInfo op = opcode_info(s.opcode);
  if (!op.valid) return {EncodeStatus::kBadOpcode, 0, "opcode"};
  if (s.ip_version != 4 && s.ip_version != 6) return {EncodeStatus::kBadField, 0, "ip_version"};
  if (op.transport == Transport::CNP && payload.size != kCnpReservedBytes)
    return {EncodeStatus::kBadField, 0, "payload"};
  const uint32_t need = encoded_size(s, payload.size > 0xFFFF ? 0xFFFF : uint32_t(payload.size));
  if (payload.size > 0xFFFF || need - sizeof(EthHdr) - (s.vlan ? 4 : 0) > 0xFFFF)
    return {EncodeStatus::kTooLong, need, "payload"};
  if (out.size < need) return {EncodeStatus::kBufferTooSmall, need, "out"};
  // Zero the headers and the pad, not the payload: a handler may have written
  // the payload in place already (payload.data == out.data + payload_offset).
  const uint32_t payload_at = payload_offset(s);
  zero_bytes(out.data, payload_at);
  zero_bytes(out.data + payload_at + payload.size, need - payload_at - uint32_t(payload.size));

  uint8_t* p = out.data;
  EthHdr& eth = *reinterpret_cast<EthHdr*>(p);
  for (int i = 0; i < 6; ++i) {
    eth.dst[i] = s.dst_mac[i];
    eth.src[i] = s.src_mac[i];
  }
  uint32_t off = 12;
  if (s.vlan) {
    reinterpret_cast<Be16*>(p + 12)->set(kEtherTypeVlan);
    reinterpret_cast<Be16*>(p + 14)->set(s.vlan_tci);
    off = 16;
  }
  reinterpret_cast<Be16*>(p + off)->set(s.ip_version == 4 ? kEtherTypeIpv4 : kEtherTypeIpv6);
  const uint32_t l3 = off + 2;
  const uint32_t l3_len = s.ip_version == 4 ? uint32_t(sizeof(Ipv4Hdr)) : uint32_t(sizeof(Ipv6Hdr));
  const uint32_t l4 = l3 + l3_len;
  const uint32_t udp_len = need - l4;
  if (s.ip_version == 4) {
    Ipv4Hdr& ip = *reinterpret_cast<Ipv4Hdr*>(p + l3);
    ip.version_ihl = 0x45;
    ip.tos = s.tos;
    ip.total_length.set(uint16_t(l3_len + udp_len));
    ip.id.set(s.ip_id);
    ip.flags_fragment.set(s.dont_fragment ? kIpv4DontFragment : 0);
    ip.ttl = s.ttl;
    ip.protocol = kIpProtoUdp;
    for (int i = 0; i < 4; ++i) {
      ip.src[i] = s.src_ip[i];
      ip.dst[i] = s.dst_ip[i];
    }
    ip.checksum.set(s.ip_checksum_given ? s.ip_checksum
                                        : ipv4_header_checksum(p + l3, sizeof(Ipv4Hdr)));
  } else {
    Ipv6Hdr& ip = *reinterpret_cast<Ipv6Hdr*>(p + l3);
    ip.vtc_flow.set(6u << 28 | uint32_t(s.tos) << 20 | (s.flow_label & 0xFFFFF));
    ip.payload_length.set(uint16_t(udp_len));
    ip.next_header = kIpProtoUdp;
    ip.hop_limit = s.ttl;
    for (int i = 0; i < 16; ++i) {
      ip.src[i] = s.src_ip[i];
      ip.dst[i] = s.dst_ip[i];
    }
  }
  UdpHdr& udp = *reinterpret_cast<UdpHdr*>(p + l4);
  udp.src_port.set(s.src_port);
  udp.dst_port.set(s.dst_port);
  udp.length.set(uint16_t(udp_len));
  udp.checksum.set(s.udp_checksum);

  const uint32_t bth_off = l4 + uint32_t(sizeof(UdpHdr));
  Bth& bth = *reinterpret_cast<Bth*>(p + bth_off);
  const uint32_t pad = (4 - (uint32_t(payload.size) & 3)) & 3;
  bth.opcode = s.opcode;
  bth.set_flags(s.se, s.mig_req, s.pad_count >= 0 ? uint8_t(s.pad_count) : uint8_t(pad), s.tver);
  bth.pkey.set(s.pkey);
  bth.set_ecn(s.fecn, s.becn);
  bth.dest_qp.set(s.dest_qp & 0xFFFFFF);
  bth.set_ack_req(s.ack_req);
  bth.psn.set(s.psn & 0xFFFFFF);

  const uint32_t ext = bth_off + uint32_t(sizeof(Bth));
  if (op.has(kDeth)) {
    Deth& h = *reinterpret_cast<Deth*>(p + ext + op.offset_of(kDeth));
    h.qkey.set(s.qkey);
    h.src_qp.set(s.src_qp & 0xFFFFFF);
  }
  if (op.has(kReth)) {
    Reth& h = *reinterpret_cast<Reth*>(p + ext + op.offset_of(kReth));
    h.va.set(s.va);
    h.rkey.set(s.rkey);
    h.dma_len.set(s.dma_len);
  }
  if (op.has(kAtomicEth)) {
    AtomicEth& h = *reinterpret_cast<AtomicEth*>(p + ext + op.offset_of(kAtomicEth));
    h.va.set(s.va);
    h.rkey.set(s.rkey);
    h.swap_add.set(s.swap_add);
    h.compare.set(s.compare);
  }
  if (op.has(kAeth)) reinterpret_cast<Aeth*>(p + ext + op.offset_of(kAeth))->set(s.syndrome, s.msn);
  if (op.has(kAtomicAckEth))
    reinterpret_cast<AtomicAckEth*>(p + ext + op.offset_of(kAtomicAckEth))->orig.set(s.orig);
  if (op.has(kImmDt)) reinterpret_cast<ImmDt*>(p + ext + op.offset_of(kImmDt))->imm.set(s.imm);
  if (op.has(kIeth)) reinterpret_cast<Ieth*>(p + ext + op.offset_of(kIeth))->rkey.set(s.inval_rkey);

  const uint32_t payload_off = ext + op.ext_bytes();
  uint8_t* payload_out = p + payload_off;
  if (payload.data + payload.size <= payload_out || payload_out + payload.size <= payload.data)
    copy_bytes(payload_out, payload.data, uint32_t(payload.size));
  else if (payload.data != payload_out)  // overlapping: a byte at a time, in order
    for (size_t i = 0; i < payload.size; ++i) payload_out[i] = payload.data[i];

  const uint32_t icrc_off = need - kIcrcBytes;
  uint32_t icrc = s.icrc;
  if (!s.icrc_given) {
    FrameView f;
    f.base = p;
    f.len = need;
    f.has_eth = true;
    f.ip_version = s.ip_version;
    f.l3 = l3;
    f.l3_len = l3_len;
    f.l4 = l4;
    f.bth = bth_off;
    f.icrc = icrc_off;
    icrc = icrc_compute(f);
  }
  store_le32(p + icrc_off, icrc);
  r.len = need;
  return r;
}

// The spec that re-encodes a decoded frame to the same bytes (when its
// derived fields were right). Starting point for replies: swap the ends,
// change the opcode, encode.
RT_HD inline FrameSpec spec_from_frame(const FrameView& f) {
  FrameSpec s;
  const EthHdr& eth = f.eth_hdr();
  for (int i = 0; i < 6; ++i) {
    s.dst_mac[i] = eth.dst[i];
    s.src_mac[i] = eth.src[i];
  }
  s.vlan = f.has_vlan;
  s.vlan_tci = f.vlan_tci;
  s.ip_version = f.ip_version;
  if (f.ip_version == 4) {
    const Ipv4Hdr& ip = f.ipv4_hdr();
    for (int i = 0; i < 4; ++i) {
      s.src_ip[i] = ip.src[i];
      s.dst_ip[i] = ip.dst[i];
    }
    s.ip_id = ip.id.get();
    s.tos = ip.tos;
    s.ttl = ip.ttl;
    s.dont_fragment = ip.flags_fragment.get() & kIpv4DontFragment;
  } else {
    const Ipv6Hdr& ip = f.ipv6_hdr();
    for (int i = 0; i < 16; ++i) {
      s.src_ip[i] = ip.src[i];
      s.dst_ip[i] = ip.dst[i];
    }
    s.tos = ip.traffic_class();
    s.ttl = ip.hop_limit;
    s.flow_label = ip.flow_label();
  }
  const UdpHdr& udp = f.udp_hdr();
  s.src_port = udp.src_port.get();
  s.dst_port = udp.dst_port.get();
  s.udp_checksum = udp.checksum.get();
  const Bth& bth = f.bth_hdr();
  s.opcode = bth.opcode;
  s.se = bth.se();
  s.mig_req = bth.mig_req();
  s.tver = bth.tver();
  s.pkey = bth.pkey.get();
  s.fecn = bth.fecn();
  s.becn = bth.becn();
  s.dest_qp = bth.dest_qp.get();
  s.ack_req = bth.ack_requested();
  s.psn = bth.psn.get();
  if (f.op.has(kDeth)) {
    s.qkey = f.ext_hdr<Deth>(kDeth).qkey.get();
    s.src_qp = f.ext_hdr<Deth>(kDeth).src_qp.get();
  }
  if (f.op.has(kReth)) {
    const Reth& h = f.ext_hdr<Reth>(kReth);
    s.va = h.va.get();
    s.rkey = h.rkey.get();
    s.dma_len = h.dma_len.get();
  }
  if (f.op.has(kAtomicEth)) {
    const AtomicEth& h = f.ext_hdr<AtomicEth>(kAtomicEth);
    s.va = h.va.get();
    s.rkey = h.rkey.get();
    s.swap_add = h.swap_add.get();
    s.compare = h.compare.get();
  }
  if (f.op.has(kAeth)) {
    s.syndrome = f.ext_hdr<Aeth>(kAeth).syndrome();
    s.msn = f.ext_hdr<Aeth>(kAeth).msn();
  }
  if (f.op.has(kAtomicAckEth)) s.orig = f.ext_hdr<AtomicAckEth>(kAtomicAckEth).orig.get();
  if (f.op.has(kImmDt)) s.imm = f.ext_hdr<ImmDt>(kImmDt).imm.get();
  if (f.op.has(kIeth)) s.inval_rkey = f.ext_hdr<Ieth>(kIeth).rkey.get();
  return s;
}

}  // namespace rt
