// Header prediction: what the engine's express path knows about its queue
// pair.
//
// Nearly every packet on a queue pair repeats the last one: the same peer, the
// same operation, the next PSN. So the engine keeps the header of the last
// request it accepted of the kinds it predicts (a SEND Only; a WRITE Only with
// Immediate, NVQLink's shape), with a mask of the bytes that must match (the
// fields that change from packet to packet, or that routers rewrite, are left
// out; so are the AckReq bit, a WRITE's RETH and its immediate, which each
// request brings its own of), a reply header encoded once, whose lengths, PSN,
// pad and checksums are patched per reply, and on RC an ACK encoded once, whose
// PSN, MSN and ICRC are. A request that matches skips decoding; one that does
// not goes to the responder (responder.h), which decides everything the match
// relies on: the match only ever accepts what the responder would accept.
//
// Team-wide functions (team.h) split the header into 16-byte chunks.
#pragma once

#include "rt/engine/word_frame.h"
#include "rt/protocol/encode.h"
#include "rt/protocol/icrc_team.h"
#include "rt/protocol/icrc_words.h"
#include "rt/team.h"

namespace rt {

// Header room: Ethernet + 802.1Q + IPv6 + UDP + BTH + RETH + ImmDt is 98
// bytes; a multiple of 16 for the team's chunks.
constexpr uint32_t kPredictBytes = 112;

struct HeaderTemplate {
  alignas(16) uint8_t bytes[kPredictBytes];
  uint32_t len;       // header bytes, Ethernet to payload; 0: none
  IcrcLayout layout;  // its masks pointer is set where the template is used
  uint32_t icrc_masks[kIcrcMaskWords];
};

struct Prediction {
  HeaderTemplate expect;                    // the last accepted request of a predicted kind
  alignas(16) uint8_t care[kPredictBytes];  // 0xFF bits must match `expect`
  HeaderTemplate reply;                     // our SEND Only to the peer, empty payload
  uint32_t reply_ip_sum;                    // IPv4: header sum without length and checksum
  // RC: our ACKNOWLEDGE, the whole frame but its PSN, MSN and ICRC (patch_ack());
  // len (its header bytes) 0: none. The express path builds each ACK from it.
  HeaderTemplate ack;
  uint32_t reth;  // `expect` is a WRITE Only with Immediate: its RETH's offset, ImmDt
                  // right after (IBA 9.2); 0: a SEND Only
};

// qp.retransmit: the peer's last ACKNOWLEDGE of what we sent (an ACK, not a NAK: the
// syndrome's kind bits are cared for, its credits, MSN and PSN not), which the express path
// takes (express_ack) instead of the general path (~8 us a packet on a GPU's lane). In the
// engine's own memory beside the replay store, not in its state: a kernel's state is in
// shared memory, which the crew and stream kernels have no 340 bytes more of.
struct AckPrediction {
  HeaderTemplate expect;
  alignas(16) uint8_t care[kPredictBytes];
};

// predicted()'s `psn` that any PSN matches: an ACK's lies anywhere in the window.
constexpr uint32_t kAnyPsn = 0xFFFFFFFFu;

namespace prediction_detail {

RT_HD inline uint32_t get_be16(const uint8_t* p) { return uint32_t(p[0]) << 8 | p[1]; }

RT_HD inline IcrcLayout layout_of(const FrameView& f) {
  return IcrcLayout{f.l3, f.l3_len, f.ip_version, f.bth + uint32_t(sizeof(Bth)) - f.l3, 0, nullptr};
}

}  // namespace prediction_detail

namespace prediction_detail {

// Whether `f`'s header fits a template and its lengths add up (what a match relies on).
RT_HD inline bool learnable(const FrameView& f) {
  if (f.payload > kPredictBytes || f.end != f.len) return false;
  if (f.ip_version == 4 && get_be16(f.base + f.l3 + 2) != f.end - f.l3) return false;
  if (f.ip_version == 6 && get_be16(f.base + f.l3 + 4) != f.end - f.l3 - f.l3_len) return false;
  return true;
}

// `f`'s header into `h` and the bytes a match must care for into `care`: all of them but
// what changes from packet to packet or is rewritten on the way (and, past the BTH, what the
// caller clears after).
RT_HD inline void learn_header(HeaderTemplate& h, uint8_t* care, const FrameView& f) {
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
  care[f.bth + 8] = 0x7F;               // AckReq: each request's own (predicted())
  care[f.bth + 9] = care[f.bth + 10] = care[f.bth + 11] = 0;  // PSN
  copy_bytes(h.bytes, f.base, f.payload);
  zero_bytes(h.bytes + f.payload, kPredictBytes - f.payload);
  h.layout = layout_of(f);
  icrc_masks_for(h.layout, h.icrc_masks);
  h.len = f.payload;
}

}  // namespace prediction_detail

// Learn the header of a request the general path accepted: a SEND Only, or
// a WRITE Only with Immediate. Headers it cannot predict (other operations,
// immediate data on a SEND, Ethernet padding, lengths that do not add up)
// leave the prediction as it was.
RT_HD inline void predict_from(Prediction& p, const FrameView& f) {
  using namespace prediction_detail;
  const bool send = (f.op.flags & kSend) && f.op.is(kOnly) && f.op.hdrs == 0;
  const bool write = (f.op.flags & kWrite) && f.op.is(kOnly) && f.op.hdrs == (kReth | kImmDt);
  if (!send && !write) return;
  if (!learnable(f)) return;
  learn_header(p.expect, p.care, f);
  for (uint32_t i = f.ext; i < f.payload; ++i) p.care[i] = 0;  // RETH, ImmDt: the express path's
  p.reth = write ? f.ext + f.op.offset_of(kReth) : 0;
}

// Learn the peer's ACKNOWLEDGE (an ACK the general path took, qp.retransmit): its AETH's
// kind bits must match (a NAK or an RNR NAK goes to the general path), its credit count and
// MSN need not.
RT_HD inline void predict_peer_ack(AckPrediction& p, const FrameView& f) {
  using namespace prediction_detail;
  if (!f.op.is(kResponse) || f.op.hdrs != kAeth || f.payload != f.icrc || !learnable(f)) return;
  p.expect.len = 0;
  learn_header(p.expect, p.care, f);
  p.care[f.ext] = 0x60;  // the syndrome's kind: an ACK's is 0
  p.care[f.ext + 1] = p.care[f.ext + 2] = p.care[f.ext + 3] = 0;
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
  p.reply_ip_sum = 0;
  if (f.ip_version == 4) {
    for (uint32_t i = 0; i < f.l3_len; i += 2)
      if (i != 2 && i != 10) p.reply_ip_sum += get_be16(frame + f.l3 + i);
  }
  // What patch_reply() ORs in, zero here: the lengths, the IPv4 checksum, the pad count, the PSN.
  uint8_t* b = p.reply.bytes;
  const uint32_t len_at = f.ip_version == 4 ? 2 : 4;
  b[f.l3 + len_at] = b[f.l3 + len_at + 1] = 0;
  if (f.ip_version == 4) b[f.l3 + 10] = b[f.l3 + 11] = 0;
  b[f.l4 + 4] = b[f.l4 + 5] = 0;
  b[f.bth + 1] &= 0xCF;
  b[f.bth + 9] = b[f.bth + 10] = b[f.bth + 11] = 0;
}

// The ACK template: `spec` (an RC ACKNOWLEDGE) encoded whole, room for its
// ICRC included. Too long for the room: no template, no express ACKs.
RT_HD inline void predict_ack(Prediction& p, const FrameSpec& spec) {
  using namespace prediction_detail;
  p.ack.len = 0;
  alignas(16) uint8_t frame[kPredictBytes];
  const EncodeResult e = encode(spec, ByteSpan(), MutByteSpan(frame, sizeof frame));
  if (!e.ok()) return;
  const DecodeResult r = decode(ByteSpan(frame, e.len));
  if (!r.ok()) return;
  const FrameView& f = r.frame;
  zero_bytes(p.ack.bytes, kPredictBytes);
  copy_bytes(p.ack.bytes, frame, f.icrc);
  p.ack.layout = layout_of(f);
  p.ack.layout.end = f.icrc;
  icrc_masks_for(p.ack.layout, p.ack.icrc_masks);
  p.ack.len = f.icrc;
  // What patch_ack() ORs in, zero here: the PSN and the AETH's MSN.
  for (uint32_t i = 9; i < 12; ++i) p.ack.bytes[f.bth + i] = 0;
  for (uint32_t i = 1; i < 4; ++i) p.ack.bytes[f.bth + uint32_t(sizeof(Bth)) + i] = 0;
}

// What a matching request carries.
struct ExpressRequest {
  uint32_t payload;      // offset
  uint32_t payload_len;  // without pad
  uint32_t psn;
  IcrcLayout layout;  // with its end set
  bool ack_req;       // BTH AckReq: on RC, the responder ACKs it (IBA 9.7.5.1)
};

// Team-wide: does `frame` (16-byte aligned) match the prediction, at PSN
// `psn`, and (`verify`) is its ICRC good? Fills `req` when it does. Checks
// what the general path's decode would: lengths that add up, the pad within
// the body; the rest is in the bytes compared. Every load is issued before
// the one vote: the header words, the length, pad and PSN bytes, and a short
// frame's ICRC words (icrc_words.h), so the step waits on memory once.
template <class Team>
RT_HD inline bool predicted(const Team& t, const HeaderTemplate& h, const uint8_t* care_bytes,
                            const uint8_t* frame, uint32_t len, uint32_t psn, bool verify,
                            ExpressRequest* req) {
  using namespace prediction_detail;
  if (h.len == 0 || len < h.len + kIcrcBytes) return false;
  // A word a lane (24 at most), against a care of zero past the header.
  const auto* got = reinterpret_cast<const uint32_t*>(frame);
  const auto* want = reinterpret_cast<const uint32_t*>(h.bytes);
  const auto* care = reinterpret_cast<const uint32_t*>(care_bytes);
  bool differ = false;
  for (uint32_t w = t.lane(); 4 * w < h.len; w += t.size())
    differ |= ((got[w] ^ want[w]) & care[w]) != 0;
  // The same bytes on every lane: the verdict below is the team's.
  IcrcLayout l = h.layout;
  const uint32_t l4 = l.l3 + l.l3_len;
  const uint32_t ip_len = l.ip_version == 4 ? len - l.l3 : len - l4;
  const uint32_t bth = l.l3 + l.masked - uint32_t(sizeof(Bth));
  const uint32_t pad = (frame[bth + 1] >> 4) & 3;
  const uint32_t body = len - kIcrcBytes - h.len;
  const uint32_t got_psn =
      uint32_t(frame[bth + 9]) << 16 | uint32_t(frame[bth + 10]) << 8 | frame[bth + 11];
  const bool lengths = get_be16(frame + l.l3 + (l.ip_version == 4 ? 2 : 4)) == ip_len &&
                       get_be16(frame + l4 + 4) == len - l4 && pad <= body;
  l.end = len - kIcrcBytes;
  l.masks = h.icrc_masks;
  uint32_t part = 0;  // this lane's share of a short frame's ICRC, loaded with the rest
  bool words = false;
  if constexpr (Team::kLanes > 1) {
    words = verify && icrc_words_fit(l);
    if (words) part = icrc_words_detail::lane_part(t, detail::icrc_word_tables(), frame, l);
  }
  if (t.any(differ || !lengths || (psn != kAnyPsn && got_psn != psn) || !icrc_team_fits(l)))
    return false;
  if (verify) {
    const uint32_t icrc = words ? ~t.xor_all(part) : icrc_team(t, frame, l);
    if (icrc != load_le32(frame + l.end)) return false;
  }
  req->payload = h.len;
  req->payload_len = body - pad;
  req->psn = got_psn;
  req->ack_req = (frame[bth + 8] & 0x80) != 0;
  req->layout = l;
  return true;
}

// Team-wide: the reply header patched into `f` (the template and `payload_len`
// bytes of payload loaded: WordFrame::load) for PSN `psn`: its lengths, the IPv4
// checksum, the pad count and the PSN. Returns the frame's length; the ICRC is
// the caller's. Every field lies in the first 128 bytes (kPredictBytes).
template <class Team>
RT_HD inline uint32_t patch_reply(const Team& t, const Prediction& p, WordFrame<Team>& f,
                                  uint32_t payload_len, uint32_t psn) {
  const HeaderTemplate& h = p.reply;
  const IcrcLayout& l = h.layout;
  const uint32_t pad = (4 - (payload_len & 3)) & 3;
  const uint32_t len = h.len + payload_len + pad + kIcrcBytes;
  const uint32_t l4 = l.l3 + l.l3_len;
  const uint32_t bth = l4 + uint32_t(sizeof(UdpHdr));
  if (l.ip_version == 4) {
    f.put_be(t, l.l3 + 2, len - l.l3, 2);
    uint32_t sum = p.reply_ip_sum + (len - l.l3);
    sum = (sum & 0xFFFF) + (sum >> 16);
    sum = (sum & 0xFFFF) + (sum >> 16);
    f.put_be(t, l.l3 + 10, ~sum & 0xFFFF, 2);
  } else {
    f.put_be(t, l.l3 + 4, len - l4, 2);
  }
  f.put_be(t, l4 + 4, len - l4, 2);
  f.put(t, bth + 1, pad << 4, 1);
  f.put_be(t, bth + 9, psn, 3);
  return len;
}

// Team-wide: the ACK for the request at `psn`, with MSN `msn` (the messages
// completed, this one counted), patched into `f` (the ACK template loaded), as
// send_response() encodes it. Returns the frame's length; the ICRC is the caller's.
template <class Team>
RT_HD inline uint32_t patch_ack(const Team& t, const Prediction& p, WordFrame<Team>& f,
                                uint32_t psn, uint32_t msn) {
  const IcrcLayout& l = p.ack.layout;
  const uint32_t bth = l.l3 + l.masked - uint32_t(sizeof(Bth));
  f.put_be(t, bth + 9, psn, 3);
  f.put_be(t, bth + uint32_t(sizeof(Bth)) + 1, msn, 3);  // the AETH's syndrome stays as encoded
  return p.ack.len + kIcrcBytes;
}

}  // namespace rt
