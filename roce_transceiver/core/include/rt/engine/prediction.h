// Header prediction: what the engine's express path knows about its queue
// pair.
//
// Nearly every packet on a queue pair repeats the last one: the same peer, a
// SEND Only, the next PSN. So the engine keeps the header of the last SEND
// Only it accepted, with a mask of the bytes that must match (the fields that
// change from packet to packet, or that routers rewrite, are left out), and a
// reply header encoded once, whose lengths, PSN, pad and checksums are
// patched per reply. A request that matches skips decoding; one that does not
// goes the general way (general.h), which decides everything the match relies
// on: the match only ever accepts what the general path would accept.
//
// Team-wide functions (team.h) split the header into 16-byte chunks.
#pragma once

#include "rt/protocol/encode.h"
#include "rt/protocol/icrc_team.h"
#include "rt/team.h"

namespace rt {

// Header room: Ethernet + 802.1Q + IPv6 + UDP + BTH is 78 bytes.
constexpr uint32_t kPredictBytes = 96;

struct HeaderTemplate {
  alignas(16) uint8_t bytes[kPredictBytes];
  uint32_t len;       // header bytes, Ethernet to payload; 0: none
  IcrcLayout layout;  // its masks pointer is set where the template is used
  uint32_t icrc_masks[kIcrcMaskWords];
};

struct Prediction {
  HeaderTemplate expect;                    // the last accepted SEND Only
  alignas(16) uint8_t care[kPredictBytes];  // 0xFF bits must match `expect`
  HeaderTemplate reply;                     // our SEND Only to the peer, empty payload
  uint32_t reply_ip_sum;                    // IPv4: header sum without length and checksum
  // Where the reply's per-packet fields are (frame offsets), worked out once.
  uint16_t reply_ip_len_at;   // IPv4 total length, IPv6 payload length
  uint16_t reply_ip_sum_at;   // IPv4 header checksum; 0: none (IPv6)
  uint16_t reply_udp_len_at;  // UDP length
  uint16_t reply_bth_at;      // BTH
};

namespace prediction_detail {

RT_HD inline void put_be16(uint8_t* p, uint32_t v) {
  p[0] = uint8_t(v >> 8);
  p[1] = uint8_t(v);
}
RT_HD inline uint32_t get_be16(const uint8_t* p) { return uint32_t(p[0]) << 8 | p[1]; }

RT_HD inline IcrcLayout layout_of(const FrameView& f) {
  return IcrcLayout{f.l3, f.l3_len, f.ip_version, f.bth + uint32_t(sizeof(Bth)) - f.l3, 0, nullptr};
}

}  // namespace prediction_detail

// Learn the header of a SEND Only the general path accepted. Headers it
// cannot predict (immediate data, an ACK request, Ethernet padding, lengths
// that do not add up) leave the prediction as it was.
RT_HD inline void predict_from(Prediction& p, const FrameView& f) {
  using namespace prediction_detail;
  const Bth& bth = f.bth_hdr();
  if ((bth.opcode & 0x1F) != 0x04 || bth.ack_requested()) return;
  if (f.payload > kPredictBytes || f.end != f.len) return;
  if (f.ip_version == 4 && get_be16(f.base + f.l3 + 2) != f.end - f.l3) return;
  if (f.ip_version == 6 && get_be16(f.base + f.l3 + 4) != f.end - f.l3 - f.l3_len) return;
  uint8_t* care = p.care;
  for (uint32_t i = 0; i < kPredictBytes; ++i) care[i] = i < f.payload ? 0xFF : 0;
  const uint32_t l3 = f.l3;
  if (f.ip_version == 4) {
    care[l3 + 1] = 0;                   // TOS: ECN is rewritten on the way
    care[l3 + 2] = care[l3 + 3] = 0;    // total length: checked against the frame
    care[l3 + 4] = care[l3 + 5] = 0;    // identification
    care[l3 + 8] = 0;                   // TTL
    care[l3 + 10] = care[l3 + 11] = 0;  // header checksum: not checked (nor by decode)
  } else {
    care[l3] = 0xF0;  // version; traffic class and flow label vary
    care[l3 + 1] = care[l3 + 2] = care[l3 + 3] = 0;
    care[l3 + 4] = care[l3 + 5] = 0;  // payload length: checked against the frame
    care[l3 + 7] = 0;                 // hop limit
  }
  care[f.l4 + 4] = care[f.l4 + 5] = 0;  // UDP length: checked against the frame
  care[f.l4 + 6] = care[f.l4 + 7] = 0;  // UDP checksum
  care[f.bth + 1] = 0xCF;               // pad count
  care[f.bth + 4] = 0;                  // FECN, BECN, reserved
  care[f.bth + 9] = care[f.bth + 10] = care[f.bth + 11] = 0;  // PSN
  copy_bytes(p.expect.bytes, f.base, f.payload);
  zero_bytes(p.expect.bytes + f.payload, kPredictBytes - f.payload);
  p.expect.layout = layout_of(f);
  icrc_masks_for(p.expect.layout, p.expect.icrc_masks);
  p.expect.len = f.payload;
}

// The reply template: `spec` (a SEND Only) encoded with no payload.
RT_HD inline void predict_reply(Prediction& p, const FrameSpec& spec) {
  using namespace prediction_detail;
  p.reply.len = 0;
  alignas(16) uint8_t frame[kPredictBytes + kIcrcBytes];
  const EncodeResult e = encode(spec, ByteSpan(), MutByteSpan(frame, sizeof frame));
  if (!e.ok()) return;  // a header longer than the template room: no express replies
  const DecodeResult r = decode(ByteSpan(frame, e.len));
  if (!r.ok()) return;
  const FrameView& f = r.frame;
  zero_bytes(p.reply.bytes, kPredictBytes);
  copy_bytes(p.reply.bytes, frame, f.payload);
  p.reply.layout = layout_of(f);
  icrc_masks_for(p.reply.layout, p.reply.icrc_masks);
  p.reply.len = f.payload;
  p.reply_ip_len_at = uint16_t(f.l3 + (f.ip_version == 4 ? 2 : 4));
  p.reply_ip_sum_at = uint16_t(f.ip_version == 4 ? f.l3 + 10 : 0);
  p.reply_udp_len_at = uint16_t(f.l4 + 4);
  p.reply_bth_at = uint16_t(f.bth);
  p.reply_ip_sum = 0;
  if (f.ip_version == 4) {
    for (uint32_t i = 0; i < f.l3_len; i += 2)
      if (i != 2 && i != 10) p.reply_ip_sum += get_be16(frame + f.l3 + i);
  }
}

// What a matching request carries.
struct ExpressRequest {
  uint32_t payload;      // offset
  uint32_t payload_len;  // without pad
  uint32_t psn;
  IcrcLayout layout;  // with its end set
};

// Team-wide: does `frame` (16-byte aligned) match the prediction? Fills `req`
// when it does. Checks what the general path's decode would: lengths that add
// up, the pad within the body; the rest is in the bytes compared.
template <class Team>
RT_HD inline bool predicted(const Team& t, const Prediction& p, const uint8_t* frame, uint32_t len,
                            ExpressRequest* req) {
  using namespace prediction_detail;
  const HeaderTemplate& h = p.expect;
  if (h.len == 0 || len < h.len + kIcrcBytes) return false;
  // A word a lane (24 at most): three loads each, all at once, and one vote.
  // Bytes past the header are compared too, against a care of zero.
  const auto* got = reinterpret_cast<const uint32_t*>(frame);
  const auto* want = reinterpret_cast<const uint32_t*>(h.bytes);
  const auto* care = reinterpret_cast<const uint32_t*>(p.care);
  bool differ = false;
  for (uint32_t w = t.lane(); 4 * w < h.len; w += t.size())
    differ |= ((got[w] ^ want[w]) & care[w]) != 0;
  if (t.any(differ)) return false;
  const IcrcLayout& l = h.layout;
  const uint32_t l4 = l.l3 + l.l3_len;
  const uint32_t ip_len = l.ip_version == 4 ? len - l.l3 : len - l4;
  if (get_be16(frame + l.l3 + (l.ip_version == 4 ? 2 : 4)) != ip_len) return false;
  if (get_be16(frame + l4 + 4) != len - l4) return false;
  const uint32_t bth = l.l3 + l.masked - uint32_t(sizeof(Bth));
  const uint32_t pad = (frame[bth + 1] >> 4) & 3;
  const uint32_t body = len - kIcrcBytes - h.len;
  if (pad > body) return false;
  req->payload = h.len;
  req->payload_len = body - pad;
  req->psn = uint32_t(frame[bth + 9]) << 16 | uint32_t(frame[bth + 10]) << 8 | frame[bth + 11];
  req->layout = l;
  req->layout.end = len - kIcrcBytes;
  req->layout.masks = h.icrc_masks;
  return icrc_team_fits(req->layout);
}

namespace prediction_detail {

// Word c of a frame (its bytes 4c..4c+3, little-endian) with the big-endian
// field of `bytes` bytes at frame offset `at` set to v; unchanged where the
// field is not in it.
RT_HD inline uint32_t splice_be(uint32_t w, uint32_t c, uint32_t at, uint32_t bytes, uint32_t v) {
  for (uint32_t k = 0; k < bytes; ++k) {
    const uint32_t pos = at + k - 4 * c;  // unsigned: past 3 when the byte is in another word
    if (pos < 4) {
      const uint32_t byte = (v >> (8 * (bytes - 1 - k))) & 0xFFu;
      w = (w & ~(0xFFu << (8 * pos))) | byte << (8 * pos);
    }
  }
  return w;
}

}  // namespace prediction_detail

// Team-wide, after the handler wrote `payload_len` bytes at `frame` +
// reply.len: the reply's header from the template, with its lengths, IPv4
// checksum, pad count and PSN `psn`, a word a lane; the pad zeroed. Returns the
// frame's length (the same for every lane); the ICRC is the caller's.
template <class Team>
RT_HD inline uint32_t patch_reply_team(const Team& t, const Prediction& p, uint8_t* frame,
                                       uint32_t payload_len, uint32_t psn) {
  using namespace prediction_detail;
  const HeaderTemplate& h = p.reply;
  const uint32_t hdr = h.len;
  const uint32_t pad = (4 - (payload_len & 3)) & 3;
  const uint32_t len = hdr + payload_len + pad + kIcrcBytes;
  if (t.leader()) zero_bytes(frame + hdr + payload_len, pad);
  t.sync();  // the pad before the word that may share it with the header's end
  const uint32_t l3 = p.reply_ip_len_at - (p.reply_ip_sum_at ? 2u : 4u);
  const uint32_t l4 = p.reply_udp_len_at - 4u;
  const uint32_t ip_len = p.reply_ip_sum_at ? len - l3 : len - l4;
  uint32_t sum = p.reply_ip_sum + ip_len;
  sum = (sum & 0xFFFF) + (sum >> 16);
  sum = (sum & 0xFFFF) + (sum >> 16);
  const uint32_t bth1 = h.bytes[p.reply_bth_at + 1] | pad << 4;
  auto* words = reinterpret_cast<uint32_t*>(frame);
  const auto* tmpl = reinterpret_cast<const uint32_t*>(h.bytes);
  for (uint32_t c = t.lane(); 4 * c < hdr; c += t.size()) {
    uint32_t w = tmpl[c];
    w = splice_be(w, c, p.reply_ip_len_at, 2, ip_len);
    if (p.reply_ip_sum_at) w = splice_be(w, c, p.reply_ip_sum_at, 2, ~sum & 0xFFFF);
    w = splice_be(w, c, p.reply_udp_len_at, 2, len - l4);
    w = splice_be(w, c, p.reply_bth_at + 1u, 1, bth1);
    w = splice_be(w, c, p.reply_bth_at + 9u, 3, psn);
    if (4 * c + 4 > hdr) {  // the header's last word: the payload's (or pad's) first bytes after it
      const uint32_t keep = ~0u << (8 * (hdr - 4 * c));
      w = (w & ~keep) | (words[c] & keep);
    }
    words[c] = w;
  }
  t.sync();
  return len;
}

}  // namespace rt
