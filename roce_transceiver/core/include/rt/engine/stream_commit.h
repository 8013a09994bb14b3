// The frames stream's commit (stream_batch.h), on the crew leader in ring order: the PSN
// and the frame account (frame_packet, frame_stream.h) of each stream WRITE, a run of them
// with the state in registers (commit_run), a frame's end and its record when its page CRC
// folds from its packets; the responder's decision (decide) for anything else, which ends
// the batch. It sends nothing and copies no payload.
#pragma once

#include "rt/engine/stream_pass.h"

namespace rt {

// Commit: the packets from pk[j] on that go on in the run of the one before it, which
// frame_packet() took into the frame in progress, on a page that is ours: WRITE Onlys
// without an end, good, the next PSN, the same page. What frame_packet() and the PSN
// check do for each, with the state in registers and written back once (a lane walking
// the state in shared memory cost the commit ~1 500 SM cycles a packet). Returns how many
// it took; `placing` is set when one of them is left to execute.
RT_HD inline uint32_t commit_run(const EngineDesc& d, EngineState& st, Batch& b, StreamPacket* pk,
                                 uint32_t j, uint32_t n, bool& placing) {
  FrameState& fs = st.frames;
  const uint32_t page = fs.page;
  const uint32_t psn_first = fs.psn_first;
  const bool raw_known = d.check_icrc;
  const Crc32ZerosTable& fold = b.fold;
  const uint64_t fold_n = fold.n;
  uint32_t next_psn = psn_add(pk[j - 1].psn, 1);
  uint64_t end = fs.bytes, at = fs.crc_len, frame_bytes = 0;
  uint32_t raw = fs.crc_raw;
  bool valid = fs.crc_valid, execute = false;
  uint32_t k = 0;
  for (; j + k < n; ++k) {
    StreamPacket& q = pk[j + k];
    // Every field first, then one branch: a load a condition put each load's round trip
    // after the one before.
    const StreamKind kind = q.kind;
    const bool bad = q.icrc_bad, placed = q.placed, raw_ok = q.raw_ok;
    const uint32_t psn = q.psn, at_page = q.page, offset = q.offset, data_len = q.data_len;
    const uint32_t len = q.len, q_raw = q.raw;
    const bool goes_on = (kind == StreamKind::kData) & !bad & (psn == next_psn) &
                         (at_page == page) & (psn_diff_sensor(psn, psn_first) >= 0);
    if (!goes_on) break;
    frame_bytes += len;
    if (data_len) {
      const uint64_t e = uint64_t(offset) + data_len;
      end = e > end ? e : end;
      if (valid && (!raw_ok || !raw_known || offset != at)) {
        valid = false;
      } else if (valid) {
        raw = (data_len == fold_n ? crc32_zeros_by(fold, raw)
                                  : crc32_zeros(detail::crc32_tables(), raw, data_len)) ^
              q_raw;
        at += data_len;
      }
    }
    if (!placed) {
      q.execute = true;
      execute = true;
    }
    next_psn = psn_add(psn, 1);
  }
  if (!k) return 0;
  const StreamPacket& last = pk[j + k - 1];
  fs.packets += k;
  fs.last_psn = last.psn;
  fs.rx_last_ns = last.ts;
  fs.bytes = end;
  fs.crc_valid = valid;
  fs.crc_raw = raw;
  fs.crc_len = at;
  count(st.tally, Counter::kRxPackets, k);
  count(st.tally, Counter::kRxBytes, frame_bytes);
  st.write =
      WriteProgress{d.frames.region, last.va, last.va + last.pay_len, last.dma_len - last.pay_len};
  st.expected_psn = next_psn;
  if (d.qp.transport == Transport::RC) st.msn = psn_add(st.msn, k);
  placing = placing || execute;
  return k;
}

// Leader: zlib's CRC of the pending frame's n bytes from the register its packets folded
// (crc_raw), counted as folded; zlib's start for n is kept for the next frame of n.
RT_HD inline uint32_t folded_page_crc(Batch& b, EngineState& st, uint64_t n) {
  if (b.start_n != n) {
    b.start_n = n;
    b.start_crc = crc32_mulmod(crc32_x8n(n), 0xFFFFFFFFu);
  }
  count(st.tally, Counter::kFramesCrcFolded);
  return ~(st.frames.crc_raw ^ b.start_crc);
}

// Leader: the record of the frame the commit just closed, its CRC folded from its packets.
// False: the frame waits for publish (its page read, or its statistic run, after execute).
template <Scope S>
RT_HD inline bool record_folded_now(const EngineDesc& d, EngineState& st, Batch& b, bool placing) {
  using namespace engine_detail;
  FrameState& fs = st.frames;
  if (!fs.pending || placing || d.frames.statistic) return false;
  const uint64_t n = pending_frame_bytes(d.frames, fs);
  if (!fs.crc_valid || fs.crc_len != n) return false;
  record_frame(d, st, folded_page_crc(b, st, n), kNoReply, /*publish_now=*/false);
  return true;
}

// Commit, the crew leader: the batch's n packets in ring order (stream_step). Out of line:
// its own registers, not the kernel's (spilled inside the loop, each a trip to memory).
template <Scope S>
RT_HD RT_COLD inline uint32_t stream_commit(const EngineDesc& d, EngineState& st, Batch& b,
                                            uint32_t n) {
  using namespace engine_detail;
  StreamPacket* pk = b.packets;
  const FramesDesc& fd = d.frames;
  const bool rc = d.qp.transport == Transport::RC;
  bool placing = false;  // execute has placements to make
  uint32_t i = 0;
  for (; i < n; ++i) {
    StreamPacket& p = pk[i];
    const bool stream = p.kind != StreamKind::kOther && !p.icrc_bad && st.in_message == 0 &&
                        !st.resync && p.psn == st.expected_psn;
    if (!stream && !p.icrc_bad) {  // the responder's, alone or last in the batch
      const DecodeResult r = decode(ByteSpan(p.frame, p.len));
      if (placing && waits_for_placements(r)) break;
      const IcrcVerdict v =
          p.kind == StreamKind::kOther ? IcrcVerdict::kUnchecked : IcrcVerdict::kGood;
      decide(d, st, r, p.len, p.ts, v);
      p.pay_len = take_placement(st, &p.dst, &p.frame);  // execute copies from p.frame
      p.execute = p.pay_len != 0;
      p.payload_at = 0;
      ++i;
      break;  // what it sends, after execute (publish)
    }
    count(st.tally, Counter::kRxPackets);
    count(st.tally, Counter::kRxBytes, p.len);
    if (p.icrc_bad) {  // dropped silently, as the responder does (RC too)
      count(st.tally, Counter::kIcrcErrors);
      continue;
    }
    if (rc) st.nak_sent = false;
    const uint8_t* rec = p.data_len != p.pay_len ? p.frame + p.payload_at + p.data_len : nullptr;
    const bool ours = frame_packet(fd, st, p.psn, p.page, p.offset, p.data_len, p.ts, p.raw,
                                   p.raw_ok && d.check_icrc, rec, &b.fold);
    if (ours && !p.placed) {
      p.execute = true;  // its payload is the engine's to store: now, after the commit
      placing = true;
    }
    st.write = WriteProgress{fd.region, p.va, p.va + p.pay_len, p.dma_len - p.pay_len};
    st.in_message = 0;
    st.expected_psn = psn_add(p.psn, 1);
    if (rc) st.msn = psn_add(st.msn, 1);
    // The fold table for the stream's packet size, once two frames in a row open with it.
    if (st.frames.packets == 1 && p.data_len != b.fold.n) {
      if (p.data_len == b.fold_seen && p.data_len >= kFoldMinBytes)
        crc32_zeros_table(b.fold, p.data_len);
      b.fold_seen = p.data_len;
    }
    if (p.kind == StreamKind::kData && ours) i += commit_run(d, st, b, pk, i + 1, n, placing);
    if (p.kind == StreamKind::kEnd) {
      close_frame(fd, st, p.imm, p.psn);
      if (st.frames.pending && !record_folded_now<S>(d, st, b, placing)) {
        ++i;
        break;  // its record after execute (publish)
      }
    }
  }
  return i;
}

}  // namespace rt
