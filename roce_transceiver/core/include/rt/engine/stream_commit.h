// The frames stream's commit (stream_batch.h), on the crew leader in ring order: the PSN
// and the frame account (frame_packet, frame_stream.h) of each stream WRITE that heads a
// run, the run after it at once from what the crew found before the commit (link_runs,
// commit_linked_run) or, where that cannot be, walked with the state in registers
// (commit_run), a frame's end and its record when its page CRC
// folds from its packets; the responder's decision (decide) for anything else, which ends
// the batch. It sends nothing and copies no payload.
#pragma once

#include "rt/engine/stream_pass.h"

namespace rt {

// What a run's members share, at its head (run_flags).
constexpr uint32_t kRunRawUnknown = 1;  // a member's data CRC is not known
constexpr uint32_t kRunUnplaced = 2;    // a member's payload is left to execute

namespace engine_detail {

RT_HD inline uint32_t lowest_bit(uint32_t v) {  // v != 0
#if RT_DEVICE_CODE
  return uint32_t(__ffs(v)) - 1u;
#else
  return uint32_t(__builtin_ctz(v));
#endif
}

RT_HD inline uint32_t highest_bit(uint32_t v) {  // v != 0
#if RT_DEVICE_CODE
  return 31u - uint32_t(__clz(v));
#else
  return 31u - uint32_t(__builtin_clz(v));
#endif
}

// Packet i goes on from packet i - 1 as commit_run takes a packet into the run before it,
// as far as the packets alone say: WRITE Onlys without an end, good, the next PSN, the same
// page, the same size, right after it in the page. (What the state says, the commit checks
// once a run: commit_linked_run.)
RT_HD inline bool links(const StreamPacket* pk, uint32_t i) {
  if (i == 0) return false;
  const StreamPacket& p = pk[i];
  const StreamPacket& q = pk[i - 1];
  return p.kind == StreamKind::kData && q.kind == StreamKind::kData && !p.icrc_bad &&
         p.psn == psn_add(q.psn, 1) && p.page == q.page && p.len == q.len &&
         p.data_len == q.data_len && p.offset == q.offset + q.data_len;
}

// The first break after packet i (n: none before the batch's end).
RT_HD inline uint32_t next_break(const Batch& b, uint32_t i, uint32_t n) {
  uint32_t w = i / 32;
  uint32_t bits = b.breaks[w] & ~((2u << (i % 32)) - 1u);  // i % 32 == 31: none left
  while (!bits && ++w < (n + 31) / 32) bits = b.breaks[w];
  if (!bits) return n;
  const uint32_t at = w * 32 + lowest_bit(bits);
  return at < n ? at : n;
}

// The last break before packet i (packet 0 is always one).
RT_HD inline uint32_t last_break(const Batch& b, uint32_t i) {
  uint32_t w = i / 32;
  uint32_t bits = b.breaks[w] & ((1u << (i % 32)) - 1u);
  while (!bits) bits = b.breaks[--w];
  return w * 32 + highest_bit(bits);
}

}  // namespace engine_detail

// Commit's runs, by the crew before the commit: which packets go on from the one before
// (links), then at each run's head its length, its members' data CRCs each shifted over
// the members after it and XORed (the run's fold: the commit shifts the frame's register
// over the run once and XORs it in), and what its members share. Everything the commit
// would find walking the run, but the state.
template <class Crew>
RT_HD inline void link_runs(const Crew& c, const EngineDesc& d, Batch& b, uint32_t n) {
  using namespace engine_detail;
  const uint32_t threads = c.teams() * c.team().size();
  const uint32_t me = c.team_index() * c.team().size() + c.team().lane();
  StreamPacket* pk = b.packets;
  for (uint32_t w = me; w < (n + 31) / 32; w += threads) b.breaks[w] = 0;
  c.sync();
  for (uint32_t i = me; i < n; i += threads) {
    const bool link = links(pk, i);
    pk[i].link = link;
    if (!link) crew_or(c, &b.breaks[i / 32], 1u << (i % 32));
  }
  c.sync();
  const bool folds = d.check_icrc && b.runs.n != ~uint64_t(0);
  for (uint32_t i = me; i < n; i += threads) {
    StreamPacket& p = pk[i];
    const uint32_t end = next_break(b, i, n);
    if (!p.link) {
      p.run_len = end - i - 1;
      continue;
    }
    const uint32_t h = last_break(b, i);
    p.head = h;
    StreamPacket& head = pk[h];
    uint32_t flags = p.placed ? 0u : kRunUnplaced;
    if (!p.raw_ok) flags |= kRunRawUnknown;
    if (flags) crew_or(c, &head.run_flags, flags);
    if (folds && p.raw_ok && p.data_len == b.runs.n)
      crew_xor(c, &head.run_fold, crc32_run_shift(b.runs, p.raw, end - 1 - i));
  }
}

// Commit: the run after pk[h] at once, from what link_runs() found: what commit_run()
// does for each of its packets, for all of them. 0: the run is commit_run's to walk (the
// commit did not reach h as its head, the run leaves the frame's PSNs, or its CRCs fold
// only by the packet).
RT_HD inline uint32_t commit_linked_run(const EngineDesc& d, EngineState& st, Batch& b,
                                        StreamPacket* pk, uint32_t h, bool& placing) {
  StreamPacket& head = pk[h];
  const uint32_t k = head.run_len;
  if (!k || head.link) return 0;
  FrameState& fs = st.frames;
  const StreamPacket& first = pk[h + 1];
  const StreamPacket& last = pk[h + k];
  if (psn_diff_sensor(first.psn, fs.psn_first) < 0 || psn_diff_sensor(last.psn, fs.psn_first) < 0)
    return 0;
  const uint32_t data_len = first.data_len;
  bool valid = fs.crc_valid;
  uint32_t raw = fs.crc_raw;
  uint64_t at = fs.crc_len;
  if (data_len) {
    if (valid && (!d.check_icrc || (head.run_flags & kRunRawUnknown) || first.offset != at)) {
      valid = false;
    } else if (valid) {
      if (data_len != b.runs.n) return 0;
      raw = crc32_run_shift(b.runs, raw, k) ^ head.run_fold;
      at += uint64_t(k) * data_len;
    }
    const uint64_t e = uint64_t(last.offset) + data_len;
    fs.bytes = e > fs.bytes ? e : fs.bytes;
  }
  fs.packets += k;
  fs.last_psn = last.psn;
  fs.rx_last_ns = last.ts;
  fs.crc_valid = valid;
  fs.crc_raw = raw;
  fs.crc_len = at;
  count(st.tally, Counter::kRxPackets, k);
  count(st.tally, Counter::kRxBytes, uint64_t(k) * first.len);
  st.write =
      WriteProgress{d.frames.region, last.va, last.va + last.pay_len, last.dma_len - last.pay_len};
  st.expected_psn = psn_add(last.psn, 1);
  if (d.qp.transport == Transport::RC) st.msn = psn_add(st.msn, k);
  head.run_taken = (head.run_flags & kRunUnplaced) != 0;
  placing = placing || head.run_taken;
  return k;
}

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
      const uint64_t c0 = crew_clock();
      decide(d, st, r, p.len, p.ts, v);
      b.commit_cycles[2] += crew_clock() - c0;
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
    if (p.kind == StreamKind::kData && ours) {
      const uint64_t c0 = crew_clock();
      const uint32_t k = commit_linked_run(d, st, b, pk, i, placing);
      i += k ? k : commit_run(d, st, b, pk, i + 1, n, placing);
      b.commit_cycles[0] += crew_clock() - c0;
    }
    // Slices, once a run: due when the frame's bytes pass the next one's end (never, with
    // slices off; an end's come with its record). Recorded now when every byte is in the
    // page, else after execute (publish): the batch ends here, before another gap can come.
    if (p.kind == StreamKind::kData && st.frames.bytes >= st.frames.slice_due) {
      if (placing) {
        ++i;
        break;
      }
      record_slices(d, st, /*at_end=*/false);
    }
    if (p.kind == StreamKind::kEnd) {
      const uint64_t c0 = crew_clock();
      close_frame(fd, st, p.imm, p.psn);
      const bool later = st.frames.pending && !record_folded_now<S>(d, st, b, placing);
      b.commit_cycles[1] += crew_clock() - c0;
      if (later) {
        ++i;
        break;  // its record after execute (publish)
      }
    }
  }
  return i;
}

}  // namespace rt
