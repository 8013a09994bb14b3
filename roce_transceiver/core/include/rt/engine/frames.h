// The frames handler: Holoscan Sensor Bridge frame streams (DESIGN.md section 3).
//
// A sensor writes each frame into a page (frame buffer) of one registered
// region with UC RDMA WRITE Only packets, each with its own RETH, and ends it
// with a WRITE Only with Immediate (immediate = psn[19:0] << 12 | page). With
// metadata, that last packet's payload ends with the 128-byte metadata record
// (hsb.h); without, it is the last data packet. The engine places every packet
// (stream_batch.h, responder.h), and this file keeps the frame's state: bytes, PSN range,
// packets lost, then at the end the CRC-32 of page[0, bytes) and a FrameRecord
// for the host.
//
// Every frame the sensor sends is accounted for: recorded (`frames`), or
// dropped (`frames_dropped`) because its page was held by the host, the host's
// ring was full, its end never came (`frames_incomplete`: a packet for another
// page closed it), or nothing of it came (`frames_missing`: a gap in the
// metadata's frame numbers, or without metadata in the sensor's page
// sequence). The PSNs between the previous frame's end and a frame's first
// packet are that frame's, lost.
//
// A page belongs to the host from the frame's record until the host releases
// it (page_free[page] = 1). A packet for a page the host still holds is not
// written; its frame is dropped and counted. The receiver never waits.
//
// Slices (slice_bytes > 0): so that the host can start on a frame before its end, the
// engine records slice k of a frame, page bytes [k * slice_bytes, (k + 1) * slice_bytes)
// cut at the frame's end, once the bytes the frame's packets wrote pass its end, and the
// frame's last slices at its end, before its record. A slice is whole when no packet that
// carried its bytes was lost: the bytes between the packets either side of a gap are the
// lost ones (hole_from, hole_to). A dropped frame's slices are not recorded.
#pragma once

#include "rt/engine/completion.h"
#include "rt/protocol/crc32_combine.h"
#include "rt/protocol/hsb.h"

namespace rt {

constexpr uint32_t kMaxPages = 4096;  // the immediate's 12-bit page
// A frame whose first packet carries this much data or more has its page CRC folded
// from its packets (fold_page_crc); a stream of smaller packets has its page read at
// the end instead. The stream step (stream_batch.h) has each packet's data CRC from its
// own pass and folds it in four lookups on the commit's lane; a page read ends its batch
// at the frame's end. With 2 KiB here, 1 KiB packets went from 7.6 Gb/s a SM (the batch
// step before it) to 2.4 on the H200: a 512-packet batch cut at every 65th packet.
constexpr uint32_t kFoldMinBytes = 512;
// A frame number this far (or farther) past the last, modulo 2^16, went back: a restart.
constexpr uint32_t kFrameNumberRestart = 0x8000;

struct FramesDesc {
  uint32_t region;      // the registered region that holds the pages
  uint32_t page_bytes;  // bytes per page; page p starts at region offset p * page_bytes
  uint32_t pages;
  bool metadata;         // the end-of-frame packet carries the metadata record
  bool check_crc;        // compare the page's CRC with the record's (HSB's emulator sends 0)
  bool statistic;        // a user handler (handler.custom) runs on each frame: its reply is
                         // the record's result (custom.h, frame_statistic)
  uint32_t page_bits;    // the end-of-frame immediate's bits that name the page (hsb_imm_page)
  uint32_t* page_free;   // host-visible, per page: 1 free, 0 held by the host
  uint32_t slice_bytes;  // a SliceRecord per this many bytes of a frame; 0: none
};

enum FrameFlag : uint32_t {
  kFrameHasMetadata = 1u << 0,  // metadata mode: the frame should end with a record
  kFrameCrcOk = 1u << 1,        // a record came, and its CRC (JAMCRC) matches the page
  kFrameBytesOk = 1u << 2,      // a record came, and its byte count matches what arrived
  kFramePageMatch = 1u << 3,    // the immediate's page is the one the data went to
  kFrameCrcChecked = 1u << 4,   // metadata mode with check_crc: crc_ok decides ok
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
  uint32_t crc32;         // of page[0, bytes), zlib's
  uint32_t metadata_crc;  // the record's CRC field as sent (JAMCRC), 0 without one
  uint32_t psn_first;     // the frame's first PSN (lost or not)
  uint32_t psn_last;
  uint32_t packets;       // packets of the frame that arrived
  uint32_t packets_lost;  // PSNs of the frame that never arrived
  uint32_t ptp_ns;
  uint32_t flags;  // FrameFlag
};
static_assert(sizeof(FrameRecord) == 72, "the host reads this layout");

enum SliceFlag : uint32_t {
  kSliceWhole = 1u << 0,  // every packet that carried its bytes arrived
  kSliceLast = 1u << 1,   // the frame's last: recorded at its end, right before its record
};

// What the host gets per slice of a frame, in the data area of a completion record flagged
// kCompletionSlice. Its bytes are the page's [offset, offset + bytes).
struct SliceRecord {
  uint64_t offset;
  uint64_t bytes;
  uint64_t rx_last_ns;  // the last packet of the frame committed when it was recorded
  uint32_t page;
  uint32_t frame_number;  // the frames recorded before it (FrameState::completed): its
                          // frame's record's frame_number when the stream has no metadata
  uint32_t slice;         // k: offset = k * slice_bytes
  uint32_t flags;         // SliceFlag
};
static_assert(sizeof(SliceRecord) == 40, "the host reads this layout");

// The smallest slice (frames.slice_bytes): each slice is a completion record the host takes,
// and a record every few dozen bytes would fill the completion ring faster than it drains.
constexpr uint32_t kMinSliceBytes = 256;

// FrameState::slice_due when no slice is due: slices off, the frame dropped or closed.
constexpr uint64_t kNoSliceDue = ~uint64_t(0);

// The engine's running account of the frame in progress, and of the stream
// between frames.
struct FrameState {
  uint32_t busy[kMaxPages / 32];  // pages handed to the host and not seen released
  uint64_t bytes;                 // the furthest data byte written, from the page's start
  uint64_t rx_first_ns, rx_last_ns;
  uint32_t page;  // where the data went
  uint32_t psn_first, last_psn;
  uint32_t packets, lost;
  // PSNs before the first packet that arrived taken as the frame's: after the
  // previous frame's end (lead), or estimated from where it landed (lead_landed).
  uint32_t lead, lead_landed;
  uint32_t completed;  // frames recorded so far: the frame number without metadata
  // Where the stream stands: what the next frame should look like.
  uint32_t next_psn;     // the PSN after the last frame's end (have_next_psn)
  uint32_t last_page;    // the page of the last frame closed (have_last_page)
  uint32_t unnumbered;   // metadata: frames closed without a record since last_number
  uint16_t last_number;  // metadata: the last record's frame number (numbered)
  bool have_next_psn, have_last_page, numbered;
  bool open;
  bool dropped;     // a packet hit a page the host holds
  bool has_record;  // metadata mode: the end packet carried a whole record
  // The page's CRC from the packets' own pass (batch.h): the raw register of
  // page[0, crc_len), while every data byte placed so far came in order from 0.
  uint64_t crc_len;
  uint32_t crc_raw;
  bool crc_valid;
  // Slices (slice_bytes): the next to record, and the frame's bytes (bytes) that make it
  // due (kNoSliceDue: none), one compare a run of packets; the lost bytes that reach the
  // slices not yet recorded, from the first such gap to the end of the last.
  uint64_t slice_due;
  uint64_t hole_from, hole_to;
  uint32_t slice_next;
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

// A packet's `len` data bytes placed at `offset` of the frame's page: their raw
// CRC register (`raw`; `raw_ok` false: not known) folds into the page's when they
// go on from the bytes before; anything else (a gap, a byte written twice, data
// whose register is not known) leaves the page's CRC to be read from the page.
RT_HD inline void fold_page_crc(FrameState& fs, uint32_t offset, uint32_t len, uint32_t raw,
                                bool raw_ok, const Crc32ZerosTable* z = nullptr) {
  if (!fs.crc_valid || !len) return;
  if (!raw_ok || offset != fs.crc_len) {
    fs.crc_valid = false;
    return;
  }
  fs.crc_raw = (z && z->n == len ? crc32_zeros_by(*z, fs.crc_raw)
                                 : crc32_zeros(detail::crc32_tables(), fs.crc_raw, len)) ^
               raw;
  fs.crc_len += len;
}

}  // namespace rt
