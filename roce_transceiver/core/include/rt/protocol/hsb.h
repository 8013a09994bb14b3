// Holoscan Sensor Bridge wire conventions (DESIGN.md section 3).
//
// End of frame is a UC RDMA WRITE Only with Immediate whose immediate packs
// the frame's PSN and the page (frame buffer) it was written to. It may carry
// a 128-byte big-endian metadata record describing the frame.
//
// What HSB's own emulator also sends, and is accepted: BTH byte 4 (FECN, BECN,
// reserved) all ones, and PSNs that wrap at 2^20 (psn.h, psn_wraps_at_20_bits).
#pragma once

#include "rt/fixed_width.h"
#include "rt/protocol/byte_order.h"

namespace rt {

constexpr uint16_t kHsbSensorUdpPort = 12288;
constexpr uint32_t kHsbDefaultPeerQp = 2;

// immediate = psn[19:0] << 12 | page[11:0]
RT_HD constexpr uint32_t hsb_imm_encode(uint32_t psn, uint32_t page) {
  return (psn & 0xFFFFF) << 12 | (page & 0xFFF);
}
RT_HD constexpr uint32_t hsb_imm_psn(uint32_t imm) { return imm >> 12; }
// The page: the immediate's low `page_bits` bits, 12 from HSB IP 0x2603 on, 8 before (the
// configuration's hsb.page_bits).
RT_HD constexpr uint32_t hsb_imm_page(uint32_t imm, uint32_t page_bits = 12) {
  return imm & ((1u << page_bits) - 1);
}

// The frame metadata record, big-endian, 128 bytes, laid out as HSB's FPGA
// sends it and hololink's Hololink::deserialize_metadata reads it. It is the
// trailing 128 bytes of the end-of-frame packet's payload: the whole payload
// when the record travels alone, or behind the frame's last data bytes (and
// a zero pad up to HSB's 128-byte alignment) when the sensor appends it there.
struct HsbFrameMetadata {
  Be32 flags;          // @0: bit 0 early TLAST, bit 1 window-size termination
  Be32 psn;            // @4: PSN of the end-of-frame packet
  Be32 crc;            // @8: JAMCRC of the frame's data bytes (hsb_jamcrc)
  Be64 ptp_s;          // @12: PTP time of the first data byte: seconds
  Be32 ptp_ns;         // @20:   and nanoseconds
  Be64 bytes_written;  // @24: data bytes in the frame
  uint8_t reserved0[2];
  Be16 frame_number;  // @34: a 16-bit count of frames
  Be64 meta_ptp_s;    // @36: PTP time the record was formed: seconds
  Be32 meta_ptp_ns;   // @44:   and nanoseconds
  uint8_t reserved[80];
};
static_assert(sizeof(HsbFrameMetadata) == 128, "HSB metadata record is 128 bytes");
#if RT_HOST_FUNCTIONS  // NVRTC 13.0 has no offsetof; the host and nvcc builds check it
static_assert(offsetof(HsbFrameMetadata, bytes_written) == 24, "hololink's layout");
static_assert(offsetof(HsbFrameMetadata, frame_number) == 34, "hololink's layout");
static_assert(offsetof(HsbFrameMetadata, meta_ptp_ns) == 44, "hololink's layout");
#endif

constexpr uint32_t kHsbMetadataBytes = sizeof(HsbFrameMetadata);
constexpr uint32_t kHsbPageAlign = 128;  // HSB pads a frame to this before an appended record

// The record's CRC: CRC-32 without the final XOR (JAMCRC), what the FPGA
// computes; from zlib's CRC-32 of the same bytes.
RT_HD constexpr uint32_t hsb_jamcrc(uint32_t zlib_crc32) { return ~zlib_crc32; }

// Host-order view of the record, for code that is not on the wire.
struct HsbMetadataFields {
  uint32_t flags = 0;
  uint32_t psn = 0;
  uint32_t crc = 0;  // JAMCRC
  uint64_t ptp_s = 0;
  uint32_t ptp_ns = 0;
  uint64_t bytes_written = 0;
  uint16_t frame_number = 0;
  uint64_t meta_ptp_s = 0;
  uint32_t meta_ptp_ns = 0;
};

RT_HD inline HsbMetadataFields hsb_metadata_decode(const HsbFrameMetadata& m) {
  HsbMetadataFields f;
  f.flags = m.flags.get();
  f.psn = m.psn.get();
  f.crc = m.crc.get();
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
  m->crc.set(f.crc);
  m->ptp_s.set(f.ptp_s);
  m->ptp_ns.set(f.ptp_ns);
  m->bytes_written.set(f.bytes_written);
  m->frame_number.set(f.frame_number);
  m->meta_ptp_s.set(f.meta_ptp_s);
  m->meta_ptp_ns.set(f.meta_ptp_ns);
  for (uint8_t& b : m->reserved0) b = 0;
  for (uint8_t& b : m->reserved) b = 0;
}

}  // namespace rt
