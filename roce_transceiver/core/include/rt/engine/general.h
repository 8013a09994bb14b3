// The engine's general path: every frame the express path does not take.
//
// Decode, ICRC, QP, P_Key, transport, PSN (check_psn), message order
// (check_sequence), then execute: SENDs assembled and delivered to the
// handler, RDMA WRITEs placed by RETH (the frames handler keeps its account
// here too: frames_write), ACK/NAK for RC. Runs on the team's leader; the two
// team-wide helpers at the end share its costly parts with the warp (a long
// frame's ICRC, a finished frame's page CRC).
#pragma once

#include "rt/byte_copy.h"
#include "rt/engine/state.h"
#include "rt/queues/copy_wide.h"

namespace rt {
namespace engine_detail {

// The tx slot at tx_pi holds a frame of `len` bytes: submit it and count it.
template <Scope S>
RT_HD inline void submit_counted(const EngineDesc& d, EngineState& st, uint32_t len) {
  tx_submit<S>(d.tx, st.tx_pi, len, 0, now_ns());
  count_all(st.tally, CountOf{Counter::kTxPackets, 1}, CountOf{Counter::kTxBytes, len});
}

enum class Verdict : uint8_t { kAccept, kDrop };

// Encode `spec` into `out` (the reserved slot, or the staging buffer that is
// then copied to it) and submit. False when encoding fails (counted).
template <Scope S>
RT_HD inline bool encode_and_submit(const EngineDesc& d, EngineState& st, const Staging* stg,
                                    uint8_t* slot, uint8_t* out, const FrameSpec& spec,
                                    ByteSpan payload) {
  const EncodeResult e = encode(spec, payload, MutByteSpan(out, d.tx.slot_bytes));
  if (!e.ok()) {
    count(st.tally, Counter::kHandlerErrors);
    return false;
  }
  if (stg) copy_wide(slot, out, e.len);
  submit_counted<S>(d, st, e.len);
  return true;
}

// Transmit one frame of `spec`, copying `payload` in. False when the tx ring
// is full or the frame does not encode (both counted).
template <Scope S>
RT_HD inline bool transmit(const EngineDesc& d, EngineState& st, const Staging* stg,
                           const FrameSpec& spec, ByteSpan payload) {
  uint8_t* slot = tx_reserve<S>(d.tx, st.tx_pi, st.tx_ci_seen);
  if (!slot) {
    count(st.tally, Counter::kTxRingFull);
    return false;
  }
  return encode_and_submit<S>(d, st, stg, slot, stg ? stg->tx : slot, spec, payload);
}

// RC ACK or NAK (IBA 9.7.5.1): AETH syndrome and our MSN, PSN of the packet acknowledged.
template <Scope S>
RT_HD inline void send_aeth(const EngineDesc& d, EngineState& st, const Staging* stg,
                            uint8_t syndrome, uint32_t psn) {
  if (transmit<S>(d, st, stg, ack_spec(d, syndrome, psn, st.msn), ByteSpan()))
    count(st.tally, syndrome == kAethAck ? Counter::kAcksSent : Counter::kNaksSent);
}

// PSN check of a request (IBA 9.7.5.1.1 for RC, 9.7.5.2.x for UC; DESIGN.md section 3).
template <Scope S>
RT_HD inline Verdict check_psn(const EngineDesc& d, EngineState& st, const Staging* stg,
                               const FrameView& f) {
  const uint32_t psn = f.bth_hdr().psn.get();
  if (d.qp.transport == Transport::RC) {
    const PsnVerdict v = rc_psn_verdict(psn, st.expected_psn);
    if (v == PsnVerdict::kExpected) {
      st.nak_sent = false;
      return Verdict::kAccept;
    }
    if (v == PsnVerdict::kDuplicate) {  // the ACK was lost; acknowledge again, do not execute
      count(st.tally, Counter::kDuplicates);
      send_aeth<S>(d, st, stg, kAethAck, psn);
      return Verdict::kDrop;
    }
    count(st.tally, Counter::kPsnGaps);  // ahead: packets lost; NAK once, then wait
    if (!st.nak_sent) {
      send_aeth<S>(d, st, stg, kAethNakPsnSeqError, st.expected_psn);
      st.nak_sent = true;
    }
    return Verdict::kDrop;
  }
  // UC: no ACKs, never stall (rxe check_psn). A PSN other than the expected
  // one aborts the message in progress; a First or Only resynchronises at
  // once, anything else waits for one.
  const bool starts = f.op.is(kFirst);
  if (st.resync) {
    if (!starts) {
      count(st.tally, Counter::kResyncDrops);
      return Verdict::kDrop;
    }
    st.resync = false;
    st.expected_psn = psn;
    return Verdict::kAccept;
  }
  if (psn == st.expected_psn || psn_wraps_at_20_bits(psn, st.expected_psn)) return Verdict::kAccept;
  // UC has no duplicates: behind or ahead, the PSN broke the sequence (a sender
  // that restarted its PSNs, as an HSB sensor does, must be heard at once).
  count(st.tally, Counter::kPsnGaps);
  st.in_message = 0;
  if (starts) {
    st.expected_psn = psn;
    return Verdict::kAccept;
  }
  st.resync = true;
  return Verdict::kDrop;
}

// First/Middle/Last order within a message (IBA 9.7.5.2.x): a Middle or Last
// needs a message in progress of the same kind; a First or Only may not
// interrupt one.
template <Scope S>
RT_HD inline Verdict check_sequence(const EngineDesc& d, EngineState& st, const Staging* stg,
                                    const FrameView& f) {
  if (sequence_ok(st.in_message, f.op)) return Verdict::kAccept;
  const bool starts = f.op.is(kFirst);
  count(st.tally, Counter::kOpcodeSequence);
  if (d.qp.transport == Transport::RC) {
    send_aeth<S>(d, st, stg, kAethNakInvalidRequest, f.bth_hdr().psn.get());
    st.in_message = 0;
    return Verdict::kDrop;
  }
  st.in_message = 0;  // UC: the interrupted message is lost; a First/Only starts afresh
  return starts ? Verdict::kAccept : Verdict::kDrop;
}

// P_Key match (IBA 10.9.3): the same 15-bit key, and not both limited members.
RT_HD inline bool pkey_matches(uint16_t pkey, uint16_t ours) {
  return (pkey & 0x7FFF) == (ours & 0x7FFF) && ((pkey | ours) & 0x8000);
}

// The region of ours an RDMA WRITE may land in, or -1 (rc_responder.h).
RT_HD inline int find_region(const EngineDesc& d, uint32_t rkey, uint64_t va, uint32_t len) {
  return ::rt::find_region(d.regions, d.num_regions, rkey, va, len);
}

// The handler's answer to one message, and where its reply frame is built.
struct HandlerReply {
  uint8_t* slot;   // the tx slot reserved for the reply, or null: the ring is full
  uint8_t* frame;  // where the reply frame is built: the slot, or the staging buffer
  uint8_t* out;    // the reply payload (in `frame`, or the scratch buffer)
  int n;           // what the handler returned
  uint8_t flags;   // the completion's flags so far
};

// Team-wide: run the handler on a completed message; its reply payload goes
// `offset` bytes into the reply frame. Every lane gets the same answer.
// Counts nothing (count_handled() does): the express path runs handlers
// before its ICRC verdict, and drops what they wrote if the frame is bad.
template <Scope S, class Team = SoloTeam>
RT_HD inline HandlerReply run_handler(const EngineDesc& d, EngineState& st, const Staging* stg,
                                      const Message& m, uint32_t offset, const Team& t = Team{}) {
  uint64_t slot = 0;
  if (t.leader()) slot = reinterpret_cast<uintptr_t>(tx_reserve<S>(d.tx, st.tx_pi, st.tx_ci_seen));
  HandlerReply r;
  r.slot = reinterpret_cast<uint8_t*>(t.from_leader(slot));
  // The largest payload whose padded length and ICRC still fit the slot.
  const uint32_t room =
      d.tx.slot_bytes > offset + kIcrcBytes ? (d.tx.slot_bytes - offset - kIcrcBytes) & ~3u : 0;
  r.frame = r.slot ? (stg ? stg->tx : r.slot) : nullptr;
  r.out = r.frame ? r.frame + offset : d.reply_scratch;
  r.n = handle_team(t, d.handler, m, r.out, r.slot ? room : d.reply_scratch_bytes);
  r.flags = m.has_imm ? kCompletionHasImm : 0;
  if (r.n == kHandlerError)
    r.flags |= kCompletionHandlerError;
  else if (r.n >= 0 && !r.slot)
    r.flags |= kCompletionReplyDropped;
  return r;
}

// Leader: count a message the handler took, and what became of its reply.
RT_HD inline void count_handled(EngineState& st, const HandlerReply& r) {
  count(st.tally, Counter::kMessages);
  if (r.n == kHandlerError)
    count(st.tally, Counter::kHandlerErrors);
  else if (r.n >= 0 && !r.slot)
    count(st.tally, Counter::kTxRingFull);
}

// How many loop passes share one reading of the host's consumer index while the completion
// ring is full: each reading is a bus round trip (~1 us from a GPU), which a full ring would
// otherwise put on every message while the host is behind. After the host has made room, the
// records of at most this many passes are dropped (and counted) before the loop sees it.
constexpr uint32_t kCompletionRetryPasses = 32;

// Leader: the slot for the next completion record, or null when the host has not made room
// (the caller counts the drop). A full ring publishes what is written first, so the host can
// drain it, and reads the consumer index again at its first full call and then once every
// `retry_passes` passes (1: at every call) until there is room.
RT_HD inline uint8_t* reserve_completion(const EngineDesc& d, EngineState& st,
                                         uint32_t retry_passes) {
  const TxRing& r = d.completions;
  if (st.comp_pi - st.comp_ci_seen >= r.depth()) {
    publish_completions(d, st);
    // Signed: comp_read_at is never far from passes (it follows them while there is room).
    if (retry_passes > 1 && int32_t(st.passes - st.comp_read_at) < 0) return nullptr;
    st.comp_read_at = st.passes + retry_passes;
    st.comp_ci_seen = load_acquire<Scope::kSystem>(r.consumer);
    if (st.comp_pi - st.comp_ci_seen >= r.depth()) return nullptr;
  }
  st.comp_read_at = st.passes;  // room: the next full ring reads at once
  return r.slot(st.comp_pi);
}

// Leader: the record at comp_pi is written; the host sees it once published, after at most
// completion_batch records or when the loop settles (end_pass). No fence here: a system-scope
// release waits for every write across the bus before it, and one per message put it between
// a reply and the next request (issue 16: 9.37 against 6.88 us p50 in the roundtrip app).
RT_HD inline void submit_completion(const EngineDesc& d, EngineState& st, uint32_t len,
                                    uint64_t timestamp_ns) {
  tx_prepare(d.completions, st.comp_pi, len, 0, timestamp_ns);
  if (st.comp_pi - st.comp_published >= d.completion_batch) publish_completions(d, st);
}

// The record's 40-byte header in three stores (16 + 16 + 8 bytes) instead of a store a field:
// across PCIe each store is a bus write. `rec` is a completion slot (16-byte aligned).
RT_HD inline void store_record_header(uint8_t* rec, const CompletionRecord& c) {
#if RT_HOST_FUNCTIONS  // NVRTC 13.0 has no offsetof; the host and nvcc builds check it
  static_assert(
      offsetof(CompletionRecord, reply_len) == 4 && offsetof(CompletionRecord, imm) == 8 &&
          offsetof(CompletionRecord, opcode) == 12 && offsetof(CompletionRecord, flags) == 13 &&
          offsetof(CompletionRecord, psn) == 16 &&
          offsetof(CompletionRecord, rx_timestamp_ns) == 24 &&
          offsetof(CompletionRecord, done_timestamp_ns) == 32,
      "the packing below follows the layout the host reads");
#endif
  auto* out = reinterpret_cast<Chunk16*>(rec);
  out[0] = Chunk16{
      uint64_t(c.request_len) | uint64_t(uint32_t(c.reply_len)) << 32,
      uint64_t(c.imm) |
          uint64_t(uint32_t(c.opcode) | uint32_t(c.flags) << 8 | uint32_t(c.reserved) << 16) << 32};
  out[1] = Chunk16{uint64_t(c.psn) | uint64_t(c.reserved2) << 32, c.rx_timestamp_ns};
  *reinterpret_cast<uint64_t*>(rec + 32) = c.done_timestamp_ns;
}

// Team-wide: n bytes of a record's data. A warp's lanes store neighbouring bytes together,
// so a request of a few dozen bytes is one or two bus writes, not one a byte; the source is
// memory next to the team (the staged frame and reply). A team of one copies exactly n
// bytes from wherever they are (the general path's assembled message, the reply scratch).
template <class Team>
RT_HD inline void copy_record_bytes(const Team& t, uint8_t* dst, const uint8_t* src, uint32_t n) {
  if constexpr (Team::kLanes == 1)
    copy_bytes(dst, src, n);
  else
    copy_bytes_team(t, dst, src, n);
}

// Team-wide: the host's record of one message, request and reply bytes, as much as fits
// (each truncated to half the slot's data area). Written after the reply went out.
template <class Team>
RT_HD RT_COLD inline void record_completion(const Team& t, const EngineDesc& d, EngineState& st,
                                            const Message& m, const HandlerReply& r, uint32_t psn,
                                            uint64_t rx_ts) {
  if (!d.record_completions) return;
  uint64_t slot = 0;
  uint64_t done_ts = 0;
  if (t.leader()) {
    slot = reinterpret_cast<uintptr_t>(reserve_completion(d, st, kCompletionRetryPasses));
    if (slot)
      done_ts = now_ns();
    else
      count(st.tally, Counter::kCompletionDrops);
  }
  auto* rec = reinterpret_cast<uint8_t*>(t.from_leader(slot));
  if (!rec) return;  // every lane: the same verdict
  const uint32_t half = completion_data_bytes(d.completions.slot_bytes);
  const uint32_t req_n = m.len < half ? m.len : half;
  const uint32_t rep_n = r.n > 0 ? (uint32_t(r.n) < half ? uint32_t(r.n) : half) : 0;
  if (t.leader()) {
    CompletionRecord c{};
    c.request_len = m.len;
    c.reply_len = r.n;
    c.imm = m.imm;
    c.opcode = m.opcode;
    c.flags = r.flags;
    c.psn = psn;
    c.rx_timestamp_ns = rx_ts;
    c.done_timestamp_ns = done_ts;
    store_record_header(rec, c);
  }
  copy_record_bytes(t, rec + sizeof(CompletionRecord), m.data, req_n);
  copy_record_bytes(t, rec + sizeof(CompletionRecord) + half, r.out, rep_n);
  t.sync();  // every lane's stores before the leader's publication
  if (t.leader()) submit_completion(d, st, uint32_t(sizeof(CompletionRecord)) + 2 * half, done_ts);
}

// Hand a completed message to the handler, transmit its reply, record it.
template <Scope S>
RT_HD inline void deliver(const EngineDesc& d, EngineState& st, const Staging* stg,
                          const Message& m, uint32_t psn, uint64_t rx_ts) {
  FrameSpec spec = reply_send_spec(d);
  HandlerReply r = run_handler<S>(d, st, stg, m, payload_offset(spec));
  count_handled(st, r);
  if (r.n >= 0 && r.slot) {
    spec.psn = st.send_psn;
    if (encode_and_submit<S>(d, st, stg, r.slot, r.frame, spec, ByteSpan(r.out, uint32_t(r.n)))) {
      st.send_psn = psn_add(st.send_psn, 1);
      count(st.tally, Counter::kReplies);
    } else {
      r.flags |= kCompletionHandlerError;
    }
  }
  record_completion(SoloTeam{}, d, st, m, r, psn, rx_ts);
}

// SEND First/Middle/Last/Only: assemble, deliver on Last/Only.
template <Scope S>
RT_HD inline Verdict execute_send(const EngineDesc& d, EngineState& st, const Staging* stg,
                                  const FrameView& f, uint64_t rx_ts) {
  const uint8_t* payload = f.base + f.payload;
  const uint32_t psn = f.bth_hdr().psn.get();
  Message m{payload, f.payload_len, 0, f.op.has(kImmDt), f.bth_hdr().opcode};
  if (m.has_imm) m.imm = f.ext_hdr<ImmDt>(kImmDt).imm.get();
  if (f.op.is(kOnly)) {  // zero copy: the handler reads the rx slot
    deliver<S>(d, st, stg, m, psn, rx_ts);
    predict_from(st.pred, f);  // the next one will likely look the same
    return Verdict::kAccept;
  }
  if (f.op.is(kFirst)) st.msg_len = 0;
  if (f.payload_len > d.msg_buf_bytes - st.msg_len) {
    count(st.tally, Counter::kMalformed);  // longer than the assembly buffer
    st.in_message = 0;
    if (d.qp.transport == Transport::RC) send_aeth<S>(d, st, stg, kAethNakInvalidRequest, psn);
    return Verdict::kDrop;
  }
  copy_bytes(d.msg_buf + st.msg_len, payload, f.payload_len);
  st.msg_len += f.payload_len;
  if (!f.op.is(kLast)) {
    st.in_message = kSend;
    return Verdict::kAccept;
  }
  st.in_message = 0;
  m.data = d.msg_buf;
  m.len = st.msg_len;
  deliver<S>(d, st, stg, m, psn, rx_ts);
  return Verdict::kAccept;
}

// A frame closed without its end: a packet for another page came first
// (frames.h). Its page holds a part of it and stays the engine's.
RT_HD inline void close_incomplete(const FramesDesc& fd, EngineState& st) {
  FrameState& fs = st.frames;
  fs.open = false;
  fs.have_next_psn = false;  // where it ended is unknown
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
}

// The end of a frame arrived (its 0x2B): the account closes, the stream's
// position moves on, and with a record the frame numbers say whether whole
// frames vanished before it.
RT_HD inline void close_frame(const FramesDesc& fd, EngineState& st, uint32_t imm, uint32_t psn) {
  FrameState& fs = st.frames;
  fs.open = false;
  fs.imm = imm;
  fs.end_page = hsb_imm_page(fs.imm);
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

// A WRITE's payload for the team to place once the leader is done (place_pending):
// one thread storing a 4 KiB packet byte by byte was most of a WRITE's cost on a GPU.
RT_HD inline void defer_copy(EngineState& st, uint8_t* dst, const uint8_t* src, uint32_t n) {
  st.place_dst = dst;
  st.place_src = src;
  st.place_len = n;
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
    if (data_len && offset + data_len > fs.bytes) fs.bytes = offset + data_len;
    fold_page_crc(fs, offset, data_len, raw, raw_ok, fold);
  } else {
    count(st.tally, Counter::kFramePageBusy);
  }
  if (record) {  // read from the packet: a dropped frame's number still counts
    fs.meta = hsb_metadata_decode(*reinterpret_cast<const HsbFrameMetadata*>(record));
    fs.has_record = true;
  }
  return ours;
}

// The frames handler's WRITE (frames.h), after the RETH checks of
// execute_write: the page must be in the frames region and hold the packet,
// and not be held by the host; the frame's account is kept, and its end is
// left pending for the team (finish_frame). False: dropped (counted).
template <Scope S>
RT_HD inline bool frames_write(const EngineDesc& d, EngineState& st, const Staging* stg,
                               const FrameView& f, uint64_t rx_ts) {
  const FramesDesc& fd = d.frames;
  const MemRegion& r = d.regions[st.write.region];
  const uint32_t psn = f.bth_hdr().psn.get();
  const uint64_t at = st.write.next_va - r.va;  // region offset of this packet's first byte
  const uint32_t page = uint32_t(at / fd.page_bytes);
  const uint32_t offset = uint32_t(at % fd.page_bytes);
  if (st.write.region != fd.region || page >= fd.pages || offset + f.payload_len > fd.page_bytes) {
    count(st.tally, Counter::kOutOfRange);  // frames live in whole pages of their region
    st.in_message = 0;
    if (d.qp.transport == Transport::RC) send_aeth<S>(d, st, stg, kAethNakRemoteAccessError, psn);
    return false;
  }
  const bool end = f.op.is(kLast) && f.op.has(kImmDt);
  // With metadata the end packet's trailing 128 bytes are the record, the rest data.
  const bool record = end && fd.metadata && f.payload_len >= kHsbMetadataBytes;
  const uint32_t data_len = record ? f.payload_len - kHsbMetadataBytes : f.payload_len;
  // The data's CRC register is not known here: the stream step (stream_batch.h) knows it.
  if (frame_packet(fd, st, psn, page, offset, data_len, rx_ts, 0, false,
                   record ? f.base + f.payload + data_len : nullptr))
    defer_copy(st, r.base + at, f.base + f.payload, f.payload_len);
  write_advance(st.write, f.payload_len);
  st.in_message = f.op.is(kLast) ? 0 : kWrite;
  if (end) close_frame(fd, st, f.ext_hdr<ImmDt>(kImmDt).imm.get(), psn);
  return true;
}

// RDMA WRITE First/Middle/Last/Only: place by RETH into a registered region;
// with immediate, deliver the written bytes to the handler.
template <Scope S>
RT_HD inline Verdict execute_write(const EngineDesc& d, EngineState& st, const Staging* stg,
                                   const FrameView& f, uint64_t rx_ts) {
  const uint32_t psn = f.bth_hdr().psn.get();
  if (!write_accept(st.write, d.regions, d.num_regions, f)) {
    count(st.tally, Counter::kOutOfRange);  // no region holds the RETH's, or beyond its length
    st.in_message = 0;
    if (d.qp.transport == Transport::RC) send_aeth<S>(d, st, stg, kAethNakRemoteAccessError, psn);
    return Verdict::kDrop;
  }
  const MemRegion& r = d.regions[st.write.region];
  if (d.handler.kind == HandlerKind::kFrames)
    return frames_write<S>(d, st, stg, f, rx_ts) ? Verdict::kAccept : Verdict::kDrop;
  uint8_t* dst = write_destination(st.write, d.regions);
  if (f.op.is(kLast) && f.op.has(kImmDt))
    copy_bytes(dst, f.base + f.payload, f.payload_len);  // the handler reads it below
  else
    defer_copy(st, dst, f.base + f.payload, f.payload_len);
  write_advance(st.write, f.payload_len);
  st.in_message = f.op.is(kLast) ? 0 : kWrite;
  if (f.op.is(kLast) && f.op.has(kImmDt)) {
    const uint32_t written = uint32_t(st.write.next_va - st.write.start_va);
    const Message m{r.base + (st.write.start_va - r.va), written,
                    f.ext_hdr<ImmDt>(kImmDt).imm.get(), true, f.bth_hdr().opcode};
    deliver<S>(d, st, stg, m, psn, rx_ts);
    if (f.op.is(kOnly)) predict_from(st.pred, f);  // NVQLink's shape: the next one alike
  }
  return Verdict::kAccept;
}

// ATOMIC ACKNOWLEDGE (IBA 9.7.5.1.2): the value before, at the request's PSN.
template <Scope S>
RT_HD inline void send_atomic_ack(const EngineDesc& d, EngineState& st, const Staging* stg,
                                  uint32_t psn, uint64_t orig) {
  const FrameSpec spec = atomic_ack_spec(d.reply_spec, d.qp.peer_qpn, psn, st.msn, orig);
  if (transmit<S>(d, st, stg, spec, ByteSpan())) count(st.tally, Counter::kAcksSent);
}

// RC FETCH_ADD / COMPARE_SWAP (rc_responder.h: atomic_execute): a signal word the peer
// increments after its WRITEs (GPUNetIO's put_signal). Called with the PSN already checked; a
// duplicate of the last atomic is replayed by receive_decoded.
template <Scope S>
RT_HD RT_COLD inline void execute_atomic(const EngineDesc& d, EngineState& st, const Staging* stg,
                                         const FrameView& f) {
  const uint32_t psn = f.bth_hdr().psn.get();
  const AtomicOutcome a = atomic_execute(d.regions, d.num_regions, f);
  if (a.status != AtomicStatus::kDone) {
    count(st.tally, Counter::kOutOfRange);
    send_aeth<S>(d, st, stg, atomic_nak(a.status), psn);
    return;
  }
  count(st.tally, Counter::kAtomics);
  st.atomic = AtomicReplay{psn, a.orig, true};
  st.expected_psn = psn_add(psn, 1);
  st.msn = psn_add(st.msn, 1);
  send_atomic_ack<S>(d, st, stg, psn, a.orig);
}

// ACKs and NAKs for the SENDs we transmitted (RC requester side, counted only:
// this engine does not retransmit).
RT_HD inline void receive_response(EngineState& st, const FrameView& f) {
  if (!f.op.has(kAeth)) {
    count(st.tally, Counter::kUnsupported);
    return;
  }
  const uint8_t syndrome = f.ext_hdr<Aeth>(kAeth).syndrome();
  count(st.tally, (syndrome & 0x60) == 0 ? Counter::kAcksReceived : Counter::kNaksReceived);
}

// A frame's ICRC as a team found it before the general path, or unchecked.
enum class IcrcVerdict : uint8_t { kUnchecked, kGood, kBad };

// A frame's transport and execution once it is decoded (`r`, of `frame_len`
// bytes): what the general path does after decode, in the order of the ring.
// A crew's commit (batch.h) calls it with frames decoded in parallel.
template <Scope S>
RT_HD RT_COLD inline void receive_decoded(const EngineDesc& d, EngineState& st, const Staging* stg,
                                          const DecodeResult& r, uint32_t frame_len, uint64_t rx_ts,
                                          IcrcVerdict icrc) {
  count(st.tally, Counter::kRxPackets);
  count(st.tally, Counter::kRxBytes, frame_len);
  if (!r.ok()) {
    count(st.tally, Counter::kMalformed);
    return;
  }
  const FrameView& f = r.frame;
  const bool icrc_bad = icrc == IcrcVerdict::kUnchecked ? !icrc_ok(f) : icrc == IcrcVerdict::kBad;
  if (d.check_icrc && icrc_bad) {  // RC too: a corrupt packet is dropped silently
    count(st.tally, Counter::kIcrcErrors);
    return;
  }
  const Bth& bth = f.bth_hdr();
  if (bth.dest_qp.get() != d.qp.qpn) {
    count(st.tally, Counter::kWrongQp);
    return;
  }
  if (!pkey_matches(bth.pkey.get(), d.qp.pkey)) {
    count(st.tally, Counter::kBadPkey);
    return;
  }
  if (f.op.transport != d.qp.transport) {
    count(st.tally, Counter::kMalformed);
    return;
  }
  if (f.op.is(kResponse)) {
    receive_response(st, f);
    return;
  }
  if (f.op.is(kAtomic)) {
    // A duplicate of the last atomic gets its answer again; it is not executed twice.
    if (atomic_is_replay(st.atomic, bth.psn.get(), st.expected_psn)) {
      count(st.tally, Counter::kDuplicates);
      send_atomic_ack<S>(d, st, stg, st.atomic.psn, st.atomic.orig);
      return;
    }
    if (check_psn<S>(d, st, stg, f) == Verdict::kDrop) return;
    if (st.in_message != 0) {  // an atomic inside a message in progress: out of sequence
      count(st.tally, Counter::kOpcodeSequence);
      send_aeth<S>(d, st, stg, kAethNakInvalidRequest, bth.psn.get());
      st.in_message = 0;
      return;
    }
    execute_atomic<S>(d, st, stg, f);
    return;
  }
  if (!(f.op.flags & (kSend | kWrite))) {  // READ: not served in this mode
    count(st.tally, Counter::kUnsupported);
    if (d.qp.transport == Transport::RC)
      send_aeth<S>(d, st, stg, kAethNakInvalidRequest, bth.psn.get());
    return;
  }
  if (check_psn<S>(d, st, stg, f) == Verdict::kDrop) return;
  if (check_sequence<S>(d, st, stg, f) == Verdict::kDrop) return;
  const Verdict v = (f.op.flags & kSend) ? execute_send<S>(d, st, stg, f, rx_ts)
                                         : execute_write<S>(d, st, stg, f, rx_ts);
  if (v == Verdict::kDrop) return;
  st.expected_psn = psn_add(bth.psn.get(), 1);
  if (d.qp.transport == Transport::RC) {
    if (f.op.is(kLast)) st.msn = psn_add(st.msn, 1);
    if (bth.ack_requested()) {
      if (st.place_len) {  // acknowledged once the team has placed the data
        st.ack_pending = true;
        st.ack_psn = bth.psn.get();
      } else {
        send_aeth<S>(d, st, stg, kAethAck, bth.psn.get());
      }
    }
  }
}

template <Scope S>
RT_HD RT_COLD inline void receive_packet(const EngineDesc& d, EngineState& st, const Staging* stg,
                                         ByteSpan frame, uint64_t rx_ts,
                                         IcrcVerdict icrc = IcrcVerdict::kUnchecked) {
  receive_decoded<S>(d, st, stg, decode(frame), frame.size, rx_ts, icrc);
}

// The host's queued payloads, sent as SEND Only to the peer. Stops, without
// dropping, when the tx ring is full: the host ring is the backpressure.
template <Scope S>
RT_HD RT_COLD inline uint32_t drain_host_tx(const EngineDesc& d, EngineState& st,
                                            const Staging* stg) {
  uint32_t n = 0;
  for (; n < d.batch; ++n) {
    const RxDesc* desc = rx_poll<Scope::kSystem>(d.host_tx, st.host_ci);
    if (!desc) break;
    if (!tx_reserve<S>(d.tx, st.tx_pi, st.tx_ci_seen)) break;
    FrameSpec spec = reply_send_spec(d);
    spec.psn = st.send_psn;
    if (transmit<S>(d, st, stg, spec, ByteSpan(d.host_tx.slot(st.host_ci), desc->len))) {
      st.send_psn = psn_add(st.send_psn, 1);
      count(st.tally, Counter::kHostSends);
    }
    ++st.host_ci;
  }
  if (n) rx_release<Scope::kSystem>(d.host_tx, st.host_ci);
  return n;
}

// Team-wide: the placement the leader left pending (defer_copy), then the ACK
// that waited for it.
template <Scope S, class Team>
RT_HD inline void place_pending(const Team& t, const EngineDesc& d, EngineState& st,
                                const Staging* stg) {
  copy_bytes_team(t, st.place_dst, st.place_src, st.place_len);
  if (t.leader()) {
    st.place_len = 0;
    st.place_dst = nullptr;
    st.place_src = nullptr;
    if (st.ack_pending) {
      st.ack_pending = false;
      send_aeth<S>(d, st, stg, kAethAck, st.ack_psn);
    }
  }
  t.sync();
}

// Team-wide: the end of a frame the leader left pending (frames_write): the
// CRC of its page by the whole team, then, on the leader, its record for the
// host. The page is the host's from then until it is released.
// The bytes of the frame pending at its end: with a record the sensor's byte
// count is the frame (a frame that lost packets then fails its CRC instead of
// looking short and whole).
RT_HD inline uint64_t pending_frame_bytes(const FramesDesc& fd, const FrameState& fs) {
  return fs.has_record && fs.meta.bytes_written <= fd.page_bytes ? fs.meta.bytes_written : fs.bytes;
}

RT_HD inline const uint8_t* pending_frame_page(const EngineDesc& d, const FrameState& fs) {
  return d.regions[d.frames.region].base + uint64_t(fs.page) * d.frames.page_bytes;
}

// Leader: the pending frame's record for the host, with its page's CRC. The
// page is the host's from then until it is released.
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

// `result`: the frame's statistic (frame_statistic), in d.reply_scratch; kNoReply for none.
template <Scope S>
// `publish_now` false: the caller publishes (publish_completions) once the batch's pages
// are placed.
RT_HD inline void record_frame(const EngineDesc& d, EngineState& st, uint32_t crc,
                               int result = kNoReply, bool publish_now = true) {
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
    FrameRecord rec{};
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
    const auto* words = reinterpret_cast<const uint64_t*>(&rec);
    auto* out = reinterpret_cast<uint64_t*>(slot + sizeof(CompletionRecord));
#if RT_DEVICE_CODE
#pragma unroll
#endif
    for (uint32_t k = 0; k < sizeof rec / 8; ++k) out[k] = words[k];
    // Published at once, not batched: the host gives the page back only once it has seen
    // the record, and a stream keeps the loop from settling.
    submit_completion(d, st, uint32_t(sizeof(CompletionRecord) + sizeof rec), c.done_timestamp_ns);
    if (publish_now) publish_completions(d, st);
    count(st.tally, Counter::kFrames);
    ++fs.completed;
  }
}

// Team-wide: the end of a frame the leader left pending (frames_write): the
// CRC of its page by the whole team, then, on the leader, its record.
template <Scope S, class Team>
RT_HD inline void finish_frame(const Team& t, const EngineDesc& d, EngineState& st) {
  const uint32_t crc =
      crc32_team(t, pending_frame_page(d, st.frames), pending_frame_bytes(d.frames, st.frames));
  const int result = frame_statistic(t, d, st);
  if (t.leader()) record_frame<S>(d, st, crc, result);
  t.sync();
}

// Team-wide, for a frame the general path takes: its ICRC checked by every
// lane (a long WRITE costs one thread tens of microseconds on a GPU). The
// leader decodes to find the layout; a frame that does not decode is left to
// the general path, which says why.
template <class Team>
RT_HD inline IcrcVerdict icrc_verdict(const Team& t, const EngineDesc& d, const uint8_t* frame,
                                      uint32_t len) {
  if constexpr (Team::kLanes == 1) {
    return IcrcVerdict::kUnchecked;  // one thread: receive_packet's own check is as fast
  } else {
    // Below a read-ahead's worth one thread's CRC costs about what the
    // leader's extra decode would.
    if (!d.check_icrc || len <= kReadAheadBytes) return IcrcVerdict::kUnchecked;
    uint32_t ok = 0, l3 = 0, l3_len = 0, version = 0, masked = 0, end = 0;
    if (t.leader()) {
      const DecodeResult r = decode(ByteSpan(frame, len));
      if (r.ok()) {
        const FrameView& f = r.frame;
        ok = 1;
        l3 = f.l3;
        l3_len = f.l3_len;
        version = f.ip_version;
        masked = f.bth + uint32_t(sizeof(Bth)) - f.l3;
        end = f.icrc;
      }
    }
    if (!t.from_leader(ok)) return IcrcVerdict::kUnchecked;
    const IcrcLayout l{t.from_leader(l3),     t.from_leader(l3_len), t.from_leader(version),
                       t.from_leader(masked), t.from_leader(end),    nullptr};
    if (!icrc_team_fits(l)) return IcrcVerdict::kUnchecked;
    const bool good = icrc_team(t, frame, l) == load_le32(frame + l.end);
    return good ? IcrcVerdict::kGood : IcrcVerdict::kBad;
  }
}

}  // namespace engine_detail
}  // namespace rt
