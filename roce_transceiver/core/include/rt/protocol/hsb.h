// Holoscan Sensor Bridge wire conventions (DESIGN.md section 3).
//
// End of frame is a UC RDMA WRITE Only with Immediate whose immediate packs
// the frame's PSN and the page (frame buffer) it was written to. It may carry
// a 128-byte big-endian metadata record describing the frame.
#pragma once

#include "rt/protocol/byte_order.h"

namespace rt {

constexpr uint16_t kHsbSensorUdpPort = 12288;
constexpr uint32_t kHsbDefaultPeerQp = 2;

// immediate = psn[19:0] << 12 | page[11:0]
RT_HD constexpr uint32_t hsb_imm_encode(uint32_t psn, uint32_t page) {
  return (psn & 0xFFFFF) << 12 | (page & 0xFFF);
}
RT_HD constexpr uint32_t hsb_imm_psn(uint32_t imm) { return imm >> 12; }
RT_HD constexpr uint32_t hsb_imm_page(uint32_t imm) { return imm & 0xFFF; }

// The frame metadata record, big-endian and packed, zero-filled to 128 bytes.
struct HsbFrameMetadata {
  Be32 flags;
  Be32 psn;            // PSN of the end-of-frame packet
  Be32 crc32;          // CRC-32 (zlib) of the frame's data bytes
  Be48 ptp_s;          // PTP time of the first data byte: seconds
  Be32 ptp_ns;         //   and nanoseconds
  Be64 bytes_written;  // data bytes in the frame
  Be32 frame_number;
  Be48 meta_ptp_s;   // PTP time the metadata was written: seconds
  Be32 meta_ptp_ns;  //   and nanoseconds
  uint8_t reserved[84];
};
static_assert(sizeof(HsbFrameMetadata) == 128, "HSB metadata record is 128 bytes");

// Host-order view of the record, for code that is not on the wire.
struct HsbMetadataFields {
  uint32_t flags = 0;
  uint32_t psn = 0;
  uint32_t crc32 = 0;
  uint64_t ptp_s = 0;
  uint32_t ptp_ns = 0;
  uint64_t bytes_written = 0;
  uint32_t frame_number = 0;
  uint64_t meta_ptp_s = 0;
  uint32_t meta_ptp_ns = 0;
};

RT_HD inline HsbMetadataFields hsb_metadata_decode(const HsbFrameMetadata& m) {
  HsbMetadataFields f;
  f.flags = m.flags.get();
  f.psn = m.psn.get();
  f.crc32 = m.crc32.get();
  f.ptp_s = m.ptp_s.get();
  f.ptp_ns = m.ptp_ns.get();
  f.bytes_written = m.bytes_written.get();
  f.frame_number = m.frame_number.get();
  f.meta_ptp_s = m.meta_ptp_s.get();
  f.meta_ptp_ns = m.meta_ptp_ns.get();
  return f;
}

RT_HD inline void hsb_metadata_encode(const HsbMetadataFields& f, HsbFrameMetadata* m) {
  m->flags.set(f.flags);
  m->psn.set(f.psn);
  m->crc32.set(f.crc32);
  m->ptp_s.set(f.ptp_s);
  m->ptp_ns.set(f.ptp_ns);
  m->bytes_written.set(f.bytes_written);
  m->frame_number.set(f.frame_number);
  m->meta_ptp_s.set(f.meta_ptp_s);
  m->meta_ptp_ns.set(f.meta_ptp_ns);
  for (uint8_t& b : m->reserved) b = 0;
}

}  // namespace rt
