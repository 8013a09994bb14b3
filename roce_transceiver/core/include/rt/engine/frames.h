// The frames handler: Holoscan Sensor Bridge frame streams (DESIGN.md section 3).
//
// A sensor writes each frame into a page (frame buffer) of one registered
// region with UC RDMA WRITE Only packets, each with its own RETH, and ends it
// with a WRITE Only with Immediate (immediate = psn[19:0] << 12 | page). With
// metadata, that last packet carries the 128-byte metadata record; without,
// it is the last data packet. The engine places every packet (general.h), and
// this file keeps the frame's account: bytes, PSN range, packets lost, then at
// the end the CRC-32 of page[0, bytes) and a FrameRecord for the host.
//
// A page belongs to the host from the frame's record until the host releases
// it (page_free[page] = 1). A packet for a page the host still holds is not
// written; its frame is dropped and counted. The receiver never waits.
#pragma once

#include "rt/engine/completion.h"
#include "rt/protocol/hsb.h"

namespace rt {

constexpr uint32_t kMaxPages = 4096;  // the immediate's 12-bit page

struct FramesDesc {
  uint32_t region;      // the registered region that holds the pages
  uint32_t page_bytes;  // bytes per page; page p starts at region offset p * page_bytes
  uint32_t pages;
  bool metadata;        // the end-of-frame packet carries the metadata record
  uint32_t* page_free;  // host-visible, per page: 1 free, 0 held by the host
};

enum FrameFlag : uint32_t {
  kFrameHasMetadata = 1u << 0,
  kFrameCrcOk = 1u << 1,      // metadata present and its CRC matches the page
  kFrameBytesOk = 1u << 2,    // metadata present and its byte count matches what arrived
  kFramePageMatch = 1u << 3,  // the immediate's page is the one the data went to
};

// What the host gets per frame, in the data area of a completion record
// flagged kCompletionFrame.
struct FrameRecord {
  uint64_t bytes;  // data bytes: page[0, bytes) (the metadata's count when it has one)
  uint64_t ptp_s;  // metadata: PTP time of the first data byte
  uint64_t rx_first_ns;
  uint64_t rx_last_ns;
  uint32_t frame_number;  // metadata's, or the engine's own count
  uint32_t page;
  uint32_t crc32;  // of page[0, bytes), zlib's
  uint32_t metadata_crc32;
  uint32_t psn_first;
  uint32_t psn_last;
  uint32_t packets;       // packets of the frame that arrived
  uint32_t packets_lost;  // PSN gaps inside the frame
  uint32_t ptp_ns;
  uint32_t flags;  // FrameFlag
};
static_assert(sizeof(FrameRecord) == 72, "the host reads this layout");

// The engine's running account of the frame in progress.
struct FrameState {
  uint32_t busy[kMaxPages / 32];  // pages handed to the host and not seen released
  uint64_t bytes;
  uint64_t rx_first_ns, rx_last_ns;
  uint32_t page;  // where the data went
  uint32_t psn_first, last_psn;
  uint32_t packets, lost;
  uint32_t completed;  // frames recorded so far: the frame number without metadata
  bool open;
  bool dropped;  // a packet hit a page the host holds
  // The end of the frame, set by the leader, finished by the team (CRC).
  bool pending;
  uint32_t end_page, end_psn, imm;
  HsbMetadataFields meta;
};

RT_HD inline bool page_busy(const FrameState& s, uint32_t page) {
  return s.busy[page / 32] >> (page % 32) & 1u;
}
RT_HD inline void set_page_busy(FrameState& s, uint32_t page, bool busy) {
  const uint32_t bit = 1u << (page % 32);
  s.busy[page / 32] = busy ? s.busy[page / 32] | bit : s.busy[page / 32] & ~bit;
}

}  // namespace rt
