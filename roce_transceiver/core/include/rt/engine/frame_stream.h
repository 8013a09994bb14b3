// The frames stream's placement policy (frames.h holds its state): the account of a
// frame kept as its packets arrive, in ring order, whichever step took them (the stream
// step's commit, stream_batch.h, for WRITE Onlys in order; the responder, responder.h, for
// the rest): a frame opens on its first packet, goes on, closes at its end or when a packet
// for another page comes first, and counts the frames that vanished. At its end the page
// becomes the host's, with a record (frame_record) and the page's CRC, folded from the
// packets' own CRC registers where they cover it. This is the one frame accounting.
#pragma once

#include "rt/engine/records.h"

namespace rt {
namespace engine_detail {

// The frame's bytes (FrameState::bytes) that make slice k due: its end, and with metadata
// HSB's pad past it (the last data packet may be padded to kHsbPageAlign: a slice that ends
// in the pad is the frame's last, cut at the record's byte count, recorded at the end).
RT_HD inline uint64_t slice_due_at(const FramesDesc& fd, uint32_t k) {
  return (uint64_t(k) + 1) * fd.slice_bytes + (fd.metadata ? kHsbPageAlign : 0u);
}

// Slices: bytes [from, to) of the frame were lost. The gaps that reach the slices not yet
// recorded are kept as one span; a new gap past all of them starts a new span. (Slices are
// recorded once the frame's bytes pass them, at every run of packets, so at most the slice
// held back by HSB's pad lies between two spans: none is marked partial wrongly.)
RT_HD inline void note_lost_bytes(const FramesDesc& fd, FrameState& fs, uint64_t from,
                                  uint64_t to) {
  if (fs.hole_to <= uint64_t(fs.slice_next) * fd.slice_bytes) fs.hole_from = from;
  fs.hole_to = to;
}

// A frame closed without its end: a packet for another page came first
// (frames.h). Its page holds a part of it and stays the engine's.
RT_HD inline void close_incomplete(const FramesDesc& fd, EngineState& st) {
  FrameState& fs = st.frames;
  fs.open = false;
  fs.slice_due = kNoSliceDue;  // its page stays the engine's: no slice after its last
  fs.have_next_psn = false;    // where it ended is unknown
  fs.have_last_page = true;
  fs.last_page = fs.page;
  if (fd.metadata) ++fs.unnumbered;
  count(st.tally, Counter::kFramesIncomplete);
  count(st.tally, Counter::kFramesDropped);
}

// Frames of which nothing arrived, between the last one closed and one now
// known to follow it.
RT_HD inline void count_missing(EngineState& st, uint32_t n) {
  if (!n) return;
  count(st.tally, Counter::kFramesMissing, n);
  count(st.tally, Counter::kFramesDropped, n);
}

// Open a frame on the first of its packets that arrived: `psn`, landing
// `offset` bytes into `page` with `data_len` data bytes. Its first PSN is the
// one after the previous frame's end when the stream goes on from there (what
// lies between was this frame's, lost); else, when the packet did not land at
// the page's start, the packets before it are estimated from its size.
RT_HD inline void open_frame(const FramesDesc& fd, EngineState& st, uint32_t psn, uint32_t page,
                             uint32_t offset, uint32_t data_len, uint64_t rx_ts) {
  FrameState& fs = st.frames;
  bool goes_on = fs.have_next_psn;
  if (!fd.metadata && fs.have_last_page) {
    // Without metadata the page sequence tells frames that vanished whole: a
    // sensor writes its frames into the pages in turn (HSB's FPGA does).
    const uint32_t skipped = (page + fd.pages - (fs.last_page + 1) % fd.pages) % fd.pages;
    count_missing(st, skipped);
    if (skipped) goes_on = false;
  }
  const uint32_t per_page = data_len ? (fd.page_bytes + data_len - 1) / data_len : fd.page_bytes;
  const int32_t ahead = goes_on ? psn_diff_sensor(psn, fs.next_psn) : -1;
  fs.lead_landed = data_len ? (offset + data_len - 1) / data_len : 0;
  fs.lead = ahead >= 0 && uint32_t(ahead) < per_page ? uint32_t(ahead) : fs.lead_landed;
  const uint32_t lead = fs.lead;
  fs.open = true;
  fs.dropped = false;
  fs.has_record = false;
  fs.bytes = 0;
  fs.page = page;
  fs.psn_first = (psn + (kPsnMask + 1) - lead) & kPsnMask;
  fs.packets = 1;
  fs.rx_first_ns = rx_ts;
  fs.meta = HsbMetadataFields{};
  fs.crc_len = 0;
  fs.crc_raw = 0;
  fs.crc_valid = data_len >= kFoldMinBytes;
  fs.slice_next = 0;
  fs.hole_from = fs.hole_to = 0;
  fs.slice_due = fd.slice_bytes ? slice_due_at(fd, 0) : kNoSliceDue;
}

// The end of a frame arrived (its 0x2B): the account closes, the stream's
// position moves on, and with a record the frame numbers say whether whole
// frames vanished before it.
RT_HD inline void close_frame(const FramesDesc& fd, EngineState& st, uint32_t imm, uint32_t psn) {
  FrameState& fs = st.frames;
  fs.open = false;
  fs.slice_due = kNoSliceDue;  // its last slices come with its record (record_slices)
  fs.imm = imm;
  fs.end_page = hsb_imm_page(fs.imm, fd.page_bits);
  fs.end_psn = psn;
  // Lost: the PSNs the frame spans that never arrived (reordered ones did).
  const int32_t span = psn_diff_sensor(psn, fs.psn_first) + 1;
  fs.lost = span > int32_t(fs.packets) ? uint32_t(span) - fs.packets : 0;
  fs.have_next_psn = fs.have_last_page = true;
  fs.next_psn = psn_add(psn, 1);
  fs.last_page = fs.page;
  if (fd.metadata) {
    if (fs.has_record) {
      // A step back (the 16-bit gap past half the space) is the sensor restarting or a
      // replay numbering from 0 again: a new run, not tens of thousands of lost frames.
      const uint32_t step = fs.numbered ? uint16_t(fs.meta.frame_number - fs.last_number - 1u) : 0u;
      const uint32_t gap = step < kFrameNumberRestart ? step : 0u;
      const uint32_t missing = gap > fs.unnumbered ? gap - fs.unnumbered : 0;
      count_missing(st, missing);
      if (missing && fs.lead > fs.lead_landed) {
        // Whole frames came between: the PSNs after the last end were theirs.
        const uint32_t theirs = fs.lead - fs.lead_landed;
        fs.psn_first = psn_add(fs.psn_first, theirs);
        fs.lost -= fs.lost < theirs ? fs.lost : theirs;
      }
      fs.numbered = true;
      fs.last_number = fs.meta.frame_number;
      fs.unnumbered = 0;
    } else {
      ++fs.unnumbered;
    }
  }
  if (fs.dropped)
    count(st.tally, Counter::kFramesDropped);
  else
    fs.pending = true;
}

// The frame account of one WRITE packet of the frames stream (frames.h), the one both
// paths keep: it lands `offset` bytes into `page` with `data_len` data bytes (their raw CRC
// register `raw` when raw_ok, folded into the page's with `fold`'s table when it is for
// their length) and, at a frame's end with metadata, the record at `record` (else null).
// It opens the frame or goes on with it. Returns whether its payload goes into the page:
// the page is the engine's, not held by the host.
RT_HD inline bool frame_packet(const FramesDesc& fd, EngineState& st, uint32_t psn, uint32_t page,
                               uint32_t offset, uint32_t data_len, uint64_t rx_ts, uint32_t raw,
                               bool raw_ok, const uint8_t* record,
                               const Crc32ZerosTable* fold = nullptr) {
  FrameState& fs = st.frames;
  if (fs.open && page != fs.page) close_incomplete(fd, st);
  if (!fs.open) {
    open_frame(fd, st, psn, page, offset, data_len, rx_ts);
  } else if (psn != fs.last_psn) {  // the same PSN right again is a duplicate: not a packet more
    if (psn_diff_sensor(psn, fs.psn_first) < 0) fs.psn_first = psn;  // a late one from the start
    ++fs.packets;
  }
  fs.last_psn = psn;
  fs.rx_last_ns = rx_ts;
  if (page_busy(fs, page)) {  // held by the host: freed since?
    if (load_acquire<Scope::kSystem>(&fd.page_free[page]))
      set_page_busy(fs, page, false);
    else
      fs.dropped = true;
  }
  const bool ours = !page_busy(fs, page);
  if (ours) {
    if (fd.slice_bytes && data_len) {  // slices: where the frame's packets left a gap
      if (offset > fs.bytes)
        note_lost_bytes(fd, fs, fs.bytes, offset);
      else if (offset <= fs.hole_from && offset + data_len >= fs.hole_to)
        fs.hole_from = fs.hole_to = 0;  // a late packet filled the gap: reordered, not lost
    }
    if (data_len && offset + data_len > fs.bytes) fs.bytes = offset + data_len;
    fold_page_crc(fs, offset, data_len, raw, raw_ok, fold);
  } else {
    fs.slice_due = kNoSliceDue;  // a dropped frame's slices are not recorded
    count(st.tally, Counter::kFramePageBusy);
  }
  if (record) {  // read from the packet: a dropped frame's number still counts
    fs.meta = hsb_metadata_decode(*reinterpret_cast<const HsbFrameMetadata*>(record));
    fs.has_record = true;
  }
  return ours;
}

// The frames stream's decision about a WRITE packet that its step (stream_batch.h) left to
// the responder (not a WRITE Only in order), after the RETH checks of accept_write: the page
// must be in the frames region and hold the packet; the frame's account is kept, its payload
// placed when the page is the engine's, and its end left pending for the step's publish.
// False: dropped (counted; on RC a NAK is the answer).
RT_HD inline bool frames_write(const EngineDesc& d, EngineState& st, const FrameView& f,
                               uint64_t rx_ts) {
  const FramesDesc& fd = d.frames;
  const MemRegion& r = d.regions[st.write.region];
  const uint32_t psn = f.bth_hdr().psn.get();
  const uint64_t at = st.write.next_va - r.va;  // region offset of this packet's first byte
  const uint32_t page = uint32_t(at / fd.page_bytes);
  const uint32_t offset = uint32_t(at % fd.page_bytes);
  if (st.write.region != fd.region || page >= fd.pages || offset + f.payload_len > fd.page_bytes) {
    count(st.tally, Counter::kOutOfRange);  // frames live in whole pages of their region
    st.in_message = 0;
    if (d.qp.transport == Transport::RC) answer(st, kAethNakRemoteAccessError, psn);
    return false;
  }
  const bool end = f.op.is(kLast) && f.op.has(kImmDt);
  // With metadata the end packet's trailing 128 bytes are the record, the rest data.
  const bool record = end && fd.metadata && f.payload_len >= kHsbMetadataBytes;
  const uint32_t data_len = record ? f.payload_len - kHsbMetadataBytes : f.payload_len;
  // The data's CRC register is not known here: the stream step (stream_batch.h) knows it.
  if (frame_packet(fd, st, psn, page, offset, data_len, rx_ts, 0, false,
                   record ? f.base + f.payload + data_len : nullptr))
    place(st, r.base + at, f.base + f.payload, f.payload_len);
  write_advance(st.write, f.payload_len);
  st.in_message = f.op.is(kLast) ? 0 : kWrite;
  if (end) close_frame(fd, st, f.ext_hdr<ImmDt>(kImmDt).imm.get(), psn);
  return true;
}

// The bytes of the frame pending at its end: with a record the sensor's byte count is the
// frame (a frame that lost packets then fails its CRC instead of looking short and whole).
RT_HD inline uint64_t pending_frame_bytes(const FramesDesc& fd, const FrameState& fs) {
  return fs.has_record && fs.meta.bytes_written <= fd.page_bytes ? fs.meta.bytes_written : fs.bytes;
}

RT_HD inline const uint8_t* pending_frame_page(const EngineDesc& d, const FrameState& fs) {
  return d.regions[d.frames.region].base + uint64_t(fs.page) * d.frames.page_bytes;
}

// Team-wide, at a frame's end: its statistic, a user handler (custom.h) given the frame's
// bytes as the message and d.reply_scratch for its result (no reply leaves for the wire on
// the frames stream). Returns the result's length, kNoReply or kHandlerError; kNoReply when
// the stream has no statistic.
template <class Team>
RT_HD inline int frame_statistic(const Team& t, const EngineDesc& d, const EngineState& st) {
  if (!d.frames.statistic) return kNoReply;
  const FrameState& fs = st.frames;
  const Message m{pending_frame_page(d, fs), uint32_t(pending_frame_bytes(d.frames, fs)), fs.imm,
                  true, 0x2B};
  const uint32_t half = completion_data_bytes(d.completions.slot_bytes);
  const uint32_t room = half < d.reply_scratch_bytes ? half : d.reply_scratch_bytes;
  return custom_team(t, d.handler.custom, m, d.reply_scratch, room);
}

// Leader: the slices of the frame whose bytes passed them (slice_due), or at its end
// (`at_end`: the frame pending) all that are left, the last cut at its byte count, a
// completion record each (kCompletionSlice). Only where every byte committed so far is in
// its page (the commit with no placement left to execute, or publish): the host reads the
// slice from the page once it sees the record.
RT_HD RT_COLD inline void record_slices(const EngineDesc& d, EngineState& st, bool at_end) {
  FrameState& fs = st.frames;
  const FramesDesc& fd = d.frames;
  if (!fd.slice_bytes || fs.dropped) return;
  const uint64_t size = fd.slice_bytes;
  const uint64_t end = at_end ? pending_frame_bytes(fd, fs) : fs.bytes;
  // What never came of the frame's end: lost too.
  if (at_end && fs.bytes < end) note_lost_bytes(fd, fs, fs.bytes, end);
  const bool room = completion_data_bytes(d.completions.slot_bytes) >= sizeof(SliceRecord);
  for (;; ++fs.slice_next) {
    const uint64_t from = uint64_t(fs.slice_next) * size;
    if (at_end ? from >= end : slice_due_at(fd, fs.slice_next) > end) break;
    const uint64_t to = from + size < end ? from + size : end;
    const bool whole = !(from < fs.hole_to && to > fs.hole_from);
    uint8_t* slot = d.record_completions && room ? reserve_completion(d, st, 1) : nullptr;
    if (!slot) {
      count(st.tally, Counter::kCompletionDrops);  // the host fell behind: the slice is lost
      continue;
    }
    const uint32_t flags = (whole ? kSliceWhole : 0u) | (at_end && to == end ? kSliceLast : 0u);
    CompletionRecord c{};
    c.request_len = uint32_t(sizeof(SliceRecord));
    c.reply_len = kNoReply;
    c.opcode = at_end ? 0x2B : 0x2A;
    c.flags = kCompletionSlice;
    c.psn = fs.last_psn;
    c.rx_timestamp_ns = fs.rx_last_ns;
    c.done_timestamp_ns = now_ns();
    store_record_header(slot, c);
#if RT_HOST_FUNCTIONS  // NVRTC 13.0 has no offsetof; the host and nvcc builds check it
    static_assert(offsetof(SliceRecord, page) == 24 && offsetof(SliceRecord, frame_number) == 28 &&
                      offsetof(SliceRecord, slice) == 32 && offsetof(SliceRecord, flags) == 36,
                  "the words below follow the layout the host reads");
#endif
    // The record's five words, built in registers: no store a field across the bus.
    auto* out = reinterpret_cast<uint64_t*>(slot + sizeof(CompletionRecord));
    out[0] = from;
    out[1] = to - from;
    out[2] = fs.rx_last_ns;
    out[3] = uint64_t(fs.page) | uint64_t(fs.completed) << 32;
    out[4] = uint64_t(fs.slice_next) | uint64_t(flags) << 32;
    submit_completion(d, st, uint32_t(sizeof(CompletionRecord) + sizeof(SliceRecord)),
                      c.done_timestamp_ns);
    count_all(st.tally, CountOf{Counter::kFrameSlices, 1},
              CountOf{Counter::kFrameSlicesPartial, whole ? 0u : 1u});
  }
  fs.slice_due = at_end ? kNoSliceDue : slice_due_at(fd, fs.slice_next);
}

// Leader: the pending frame's record for the host, with its page's CRC `crc`. The page is
// the host's from then until it is released; its last slices (record_slices) come first.
// `result`: the frame's statistic (frame_statistic), in d.reply_scratch; kNoReply for none.
// `publish_now` false: the caller publishes (publish_completions) once the batch's pages are
// placed.
RT_HD inline void record_frame(const EngineDesc& d, EngineState& st, uint32_t crc,
                               int result = kNoReply, bool publish_now = true) {
  record_slices(d, st, /*at_end=*/true);  // its last slices before it
  FrameState& fs = st.frames;
  const FramesDesc& fd = d.frames;
  const bool meta = fd.metadata;
  const bool has_record = fs.has_record;
  const uint64_t bytes = pending_frame_bytes(fd, fs);
  fs.pending = false;
  // Every full-ring frame reads the consumer index again: a frame is many packets, and one
  // dropped because of a stale reading would cost the host a whole page of data.
  uint8_t* slot = d.record_completions ? reserve_completion(d, st, 1) : nullptr;
  if (!slot || completion_data_bytes(d.completions.slot_bytes) < sizeof(FrameRecord)) {
    count(st.tally, Counter::kCompletionDrops);  // the host fell behind: no record, page kept
    count(st.tally, Counter::kFramesDropped);
  } else {
    // A union, not a cast, lets its 8-byte words be read (type punning through a pointer
    // is undefined, and g++ -O3 acts on it: a record read as words came out zeros).
    union {
      FrameRecord rec;
      uint64_t words[sizeof(FrameRecord) / 8];
    } u{};
    FrameRecord& rec = u.rec;
    rec.bytes = bytes;
    rec.ptp_s = fs.meta.ptp_s;
    rec.ptp_ns = fs.meta.ptp_ns;
    rec.rx_first_ns = fs.rx_first_ns;
    rec.rx_last_ns = fs.rx_last_ns;
    rec.frame_number = has_record ? fs.meta.frame_number : fs.completed;
    rec.page = fs.page;
    rec.crc32 = crc;
    rec.metadata_crc = fs.meta.crc;
    rec.psn_first = fs.psn_first;
    rec.psn_last = fs.end_psn;
    rec.packets = fs.packets;
    rec.packets_lost = fs.lost;
    // What arrived ends at the sensor's byte count, or at HSB's 128-byte pad
    // after it when the record was appended to the last data packet.
    const uint64_t want = fs.meta.bytes_written;
    const uint64_t padded = (want + kHsbPageAlign - 1) / kHsbPageAlign * kHsbPageAlign;
    const bool crc_checked = meta && fd.check_crc;
    rec.flags = (fs.end_page == fs.page ? kFramePageMatch : 0u) | (meta ? kFrameHasMetadata : 0u) |
                (crc_checked ? kFrameCrcChecked : 0u) |
                (has_record && hsb_jamcrc(crc) == fs.meta.crc ? kFrameCrcOk : 0u) |
                (has_record && want <= fs.bytes && fs.bytes <= padded ? kFrameBytesOk : 0u);
    if (crc_checked && !(rec.flags & kFrameCrcOk)) count(st.tally, Counter::kFrameCrcErrors);
    fd.page_free[fs.page] = 0;  // the host's now; published by the record's release below
    set_page_busy(fs, fs.page, true);
    // Built here, stored in wide words: each store crosses the bus (a store a field was
    // most of a frame's end in a stream of 4 KiB packets).
    CompletionRecord c{};
    c.request_len = uint32_t(sizeof(FrameRecord));
    c.reply_len = result;
    c.imm = fs.imm;
    c.opcode = 0x2B;
    c.flags = kCompletionFrame | kCompletionHasImm;
    if (result == kHandlerError) {
      c.flags |= kCompletionHandlerError;
      count(st.tally, Counter::kHandlerErrors);
    }
    // The statistic's result goes where a message's reply would (the slot's second half).
    const uint32_t half = completion_data_bytes(d.completions.slot_bytes);
    if (result > 0)
      copy_bytes(slot + sizeof(CompletionRecord) + half, d.reply_scratch, uint32_t(result));
    c.psn = fs.end_psn;
    c.rx_timestamp_ns = fs.rx_last_ns;
    c.done_timestamp_ns = now_ns();
    store_record_header(slot, c);
    static_assert(sizeof rec % 8 == 0 && sizeof(CompletionRecord) % 8 == 0, "8-byte words");
    auto* out = reinterpret_cast<uint64_t*>(slot + sizeof(CompletionRecord));
#if RT_DEVICE_CODE
#pragma unroll
#endif
    for (uint32_t k = 0; k < sizeof rec / 8; ++k) out[k] = u.words[k];
    // Published at once, not batched: the host gives the page back only once it has seen
    // the record, and a stream keeps the loop from settling.
    submit_completion(d, st, uint32_t(sizeof(CompletionRecord) + sizeof rec), c.done_timestamp_ns);
    if (publish_now) publish_completions(d, st);
    count(st.tally, Counter::kFrames);
    ++fs.completed;
  }
}

}  // namespace engine_detail
}  // namespace rt
