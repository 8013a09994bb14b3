// The frames handler's batch step: an HSB sensor's stream of RDMA WRITE Onlys
// (frames.h), a batch at a time, one thread a packet.
//
//   classify  two passes, each thread its packets (k, k + threads, ...). The
//             header: decode, and the checks a stream packet passes on its own
//             (QP, P_Key, transport, no ACK asked, its RETH inside the pages).
//             Then one pass over the packet's bytes that computes its ICRC and,
//             on UC, stores its payload in its page: 16-byte loads, the CRC of a
//             16-byte chunk from conflict-free nibble tables, 16-byte stores;
//             the data's own CRC register comes out of the same pass. A packet
//             that is not a stream WRITE is left to the responder.
//   commit    the crew leader, in ring order: the PSN and the frame account
//             (frame_packet, frame_stream.h: the one accounting), a frame's end,
//             and its record at once when its page CRC is folded from its
//             packets. What is not a stream WRITE in order is the responder's
//             (decide, responder.h) and ends the batch.
//   execute   the placements the commit noted (RC, where nothing is placed
//             before its PSN is known to be the next; the responder's).
//   publish   what the responder's decision sends (transmit.h), a frame whose
//             page is read for its CRC, slots back, counters (end_pass).
//
// Placement before the verdict. On UC a stream WRITE whose checks pass is always
// executed (it starts a message, so no PSN or sequence error drops it): its
// payload goes where the responder would put it, and only into a page the
// engine holds. A page becomes the host's at a frame's end, so a packet does not
// go into the page of an end earlier in its batch; and nothing after the first
// packet the responder takes is placed early. A packet whose ICRC then fails
// wrote into a page whose frame lacks its PSN: that frame records the packet as
// lost and its page CRC is read from the page, never folded past it.
#pragma once

#include "rt/engine/batch.h"

#if RT_HOST_FUNCTIONS
#include <cstring>
#endif

namespace rt {

// Packets a frames batch holds at most (queues.batch's bound).
constexpr uint32_t kMaxStreamBatch = 1024;

enum class StreamKind : uint8_t {
  kOther,  // the responder's (decide)
  kData,   // WRITE Only into the pages
  kEnd,    // WRITE Only with Immediate into the pages: a frame's end
};

// One packet of a frames batch, as classify leaves it.
struct StreamPacket {
  const uint8_t* frame;  // in its rx slot
  uint8_t* dst;          // its payload's place in the page
  uint64_t ts;
  uint64_t va;
  uint32_t len;         // frame bytes
  uint32_t payload_at;  // the payload's first byte in the frame
  uint32_t psn;
  uint32_t page, offset;
  uint32_t pay_len;   // payload bytes
  uint32_t data_len;  // without a metadata record at its end
  uint32_t dma_len;
  uint32_t raw;  // the data's raw CRC register (raw_ok)
  uint32_t imm;
  StreamKind kind;
  bool placed;    // classify stored the payload
  bool raw_ok;    // raw is known
  bool icrc_bad;  // check_icrc and the ICRC did not match
  bool execute;   // the commit left the payload for execute to store
};

namespace engine_detail {

// The raw ICRC register at a decoded frame's payload: the masked header and the
// extension headers after the BTH (icrc_compute's first part).
RT_HD inline uint32_t icrc_register_at_payload(const Crc32Tables& tb, const FrameView& f) {
  const uint32_t after_bth = f.bth + uint32_t(sizeof(Bth));
  return ~crc32_update_with(tb, ~icrc_register_after_bth(tb, f), f.base + after_bth,
                            f.payload - after_bth);
}

#if RT_DEVICE_CODE
// The raw register after 16 bytes (four little-endian words) from register c: the
// register enters as the first word, then 32 nibble lookups, each in a 16-word table a
// bank each (no two lanes of a warp wait on one another, as they do on 256-word tables).
__device__ inline uint32_t crc32_step16(const Crc32Tables& tb, uint32_t c, uint32_t w0, uint32_t w1,
                                        uint32_t w2, uint32_t w3) {
  const uint32_t w[4] = {w0 ^ c, w1, w2, w3};
  return crc32_chunk16(tb, w);
}

// The aligned 16-byte chunk at frame + at, where it has bytes of the frame (the last
// one may end the slot, and the ring): zeros past the frame's end.
__device__ inline uint4 frame_chunk(const uint8_t* frame, uint32_t at, uint32_t frame_len) {
  return at < frame_len ? __ldcg(reinterpret_cast<const uint4*>(frame + at))
                        : make_uint4(0, 0, 0, 0);
}

// One 16-byte chunk of the payload out of two aligned ones (cur, nxt): its CRC into c, and
// stored at dst (null: not stored).
template <uint32_t Q>
__device__ inline uint32_t crc_place_chunk(const Crc32Tables& tb, uint32_t c, const uint4& cur,
                                           const uint4& nxt, uint32_t sh, uint8_t* dst) {
  const uint32_t w[8] = {cur.x, cur.y, cur.z, cur.w, nxt.x, nxt.y, nxt.z, nxt.w};
  const uint32_t o0 = __funnelshift_r(w[Q], w[Q + 1], sh);
  const uint32_t o1 = __funnelshift_r(w[Q + 1], w[Q + 2], sh);
  const uint32_t o2 = __funnelshift_r(w[Q + 2], w[Q + 3], sh);
  const uint32_t o3 = __funnelshift_r(w[Q + 3], w[Q + 4], sh);
  if (dst) *reinterpret_cast<uint4*>(dst) = make_uint4(o0, o1, o2, o3);
  return crc32_step16(tb, c, o0, o1, o2, o3);
}

// Chunks a thread has loaded ahead of the one it works on: a thread's loads are the SM's
// bytes in flight (one at a time, 512 threads kept an SM at ~1 320 cycles a 4 KiB packet).
constexpr uint32_t kPassAhead = 4;

// `chunks` 16-byte chunks of a frame from byte `from` (Q = (from / 4) % 4, the word of
// its first aligned chunk it starts in) into register c, each stored at dst (null: none)
// as it goes: aligned 16-byte loads kPassAhead chunks ahead of their use, funnel shifts to
// the payload's alignment.
template <uint32_t Q>
__device__ inline uint32_t crc_place_chunks(const Crc32Tables& tb, uint32_t c, const uint8_t* frame,
                                            uint32_t from, uint32_t chunks, uint8_t* dst,
                                            uint32_t frame_len) {
  constexpr uint32_t G = kPassAhead;
  const uint32_t sh = (from & 3u) * 8u;
  const uint32_t base = from & ~15u;
  uint4 cur = frame_chunk(frame, base, frame_len);
  uint4 next[G];
#pragma unroll
  for (uint32_t g = 0; g < G; ++g) next[g] = frame_chunk(frame, base + 16u * (1u + g), frame_len);
  uint32_t k = 0;
  for (; k + G <= chunks; k += G) {
    uint4 ahead[G];
#pragma unroll
    for (uint32_t g = 0; g < G; ++g)
      ahead[g] = frame_chunk(frame, base + 16u * (k + 1u + G + g), frame_len);
#pragma unroll
    for (uint32_t g = 0; g < G; ++g) {
      c = crc_place_chunk<Q>(tb, c, cur, next[g], sh, dst ? dst + 16u * (k + g) : nullptr);
      cur = next[g];
    }
#pragma unroll
    for (uint32_t g = 0; g < G; ++g) next[g] = ahead[g];
  }
#pragma unroll
  for (uint32_t g = 0; g < G; ++g) {
    if (k + g < chunks) {
      c = crc_place_chunk<Q>(tb, c, cur, next[g], sh, dst ? dst + 16u * (k + g) : nullptr);
      cur = next[g];
    }
  }
  return c;
}
#endif

// n bytes at p into raw register c, and to dst (null: not stored), at any alignment.
RT_HD inline uint32_t crc_place_bytes(const Crc32Tables& tb, uint32_t c, const uint8_t* p,
                                      uint32_t n, uint8_t* dst) {
  if (dst) copy_bytes(dst, p, n);
  return ~crc32_update_with(tb, ~c, p, n);
}

// Payloads this long or longer are passed by a warp, a lane a 16-byte chunk (their
// loads and stores coalesced); shorter ones by a thread (stream_step). One thread a
// 4 KiB packet, 32 of them a warp, was 32 cache lines an instruction: the SM's load and
// store pipe, not its CRC, set the rate (~1 300 SM cycles a packet).
constexpr uint32_t kWarpPassBytes = 512;

#if RT_DEVICE_CODE
// A warp, one pass over a decoded frame's bytes: whether its ICRC matches, with its payload
// stored at dst on the way (null: not stored), and the raw CRC register of its first
// data_len payload bytes into *raw (every lane). Lane l takes chunks l, l + 32, ... of the
// data: its register goes on over the 31 chunks of the other lanes before each of its own,
// then over what follows its last one; the lanes' registers XOR to the data's. Lane 0 meanwhile has
// the register of the headers before it, and takes the data's last bytes, a record after it and the
// pad.
__device__ inline bool icrc_place_warp(const WarpTeam& t, const FrameView& f, uint8_t* dst,
                                       uint32_t data_len, uint32_t* raw) {
  const Crc32Tables& tb = detail::crc32_tables();
  const uint32_t lane = t.lane();
  const uint32_t chunks = data_len / 16u;
  const uint32_t from = f.payload;
  const uint32_t base = from & ~15u, sh = (from & 3u) * 8u, q = (from >> 2) & 3u;
  uint32_t r = 0;
  uint32_t last = 0;  // this lane's last chunk + 1
  for (uint32_t k0 = 0; k0 < chunks; k0 += 32u) {
    const uint32_t k = k0 + lane;
    // The aligned chunk this lane's output chunk starts in; the next one is its neighbour's.
    const uint4 cur = frame_chunk(f.base, base + 16u * k, f.len);
    const uint4 first_next = frame_chunk(f.base, base + 16u * (k0 + 32u), f.len);
    uint4 nxt;
    nxt.x = __shfl_down_sync(0xFFFFFFFFu, cur.x, 1);
    nxt.y = __shfl_down_sync(0xFFFFFFFFu, cur.y, 1);
    nxt.z = __shfl_down_sync(0xFFFFFFFFu, cur.z, 1);
    nxt.w = __shfl_down_sync(0xFFFFFFFFu, cur.w, 1);
    if (lane == 31) nxt = first_next;
    if (k < chunks) {
      const uint32_t w[8] = {cur.x, cur.y, cur.z, cur.w, nxt.x, nxt.y, nxt.z, nxt.w};
      uint32_t o[4];
#pragma unroll
      for (uint32_t j = 0; j < 4; ++j) {
        // q is the same for every lane: a select, not an indexed register.
        const uint32_t lo = q == 0 ? w[j] : q == 1 ? w[j + 1] : q == 2 ? w[j + 2] : w[j + 3];
        const uint32_t hi = q == 0 ? w[j + 1] : q == 1 ? w[j + 2] : q == 2 ? w[j + 3] : w[j + 4];
        o[j] = __funnelshift_r(lo, hi, sh);
      }
      if (dst) *reinterpret_cast<uint4*>(dst + 16u * k) = make_uint4(o[0], o[1], o[2], o[3]);
      r = crc32_step16(tb, k0 ? crc32_shift16(tb, 31, r) : 0u, o[0], o[1], o[2], o[3]);
      last = k + 1;
    }
  }
  // Over what follows this lane's last chunk, to the chunks' end (less than 32 chunks).
  if (last) r = crc32_shift16(tb, chunks - last, r);
  r = t.xor_all(last ? r : 0u);
  uint32_t ok = 0, data_raw = 0;
  if (t.leader()) {
    const uint8_t* pay = f.base + f.payload;
    const uint32_t done = chunks * 16u;
    data_raw = crc_place_bytes(tb, r, pay + done, data_len - done, dst ? dst + done : nullptr);
    const uint32_t start = icrc_register_at_payload(tb, f);
    uint32_t c = crc32_zeros(tb, start, data_len) ^ data_raw;
    c = crc_place_bytes(tb, c, pay + data_len, f.payload_len - data_len,
                        dst ? dst + data_len : nullptr);
    c = ~crc32_update_with(tb, ~c, pay + f.payload_len, f.pad);
    ok = ~c == f.icrc_field();
  }
  *raw = t.from_leader(data_raw);
  return t.from_leader(ok) != 0;
}
#endif

// One thread, one pass over a decoded frame's bytes: whether its ICRC matches, with its
// payload stored at dst on the way (null: not stored), and the raw CRC register of its
// first data_len payload bytes into *raw. The register at the data's end less the
// register at its start shifted over it is the data's own: a second register would cost
// the pass a lookup a byte.
RT_HD inline bool icrc_place(const FrameView& f, uint8_t* dst, uint32_t data_len, uint32_t* raw) {
  const Crc32Tables& tb = detail::crc32_tables();
  const uint8_t* pay = f.base + f.payload;
#if RT_DEVICE_CODE
  const uint32_t start = icrc_register_at_payload(tb, f);
  uint32_t c = start;
  const bool wide = (reinterpret_cast<uintptr_t>(f.base) & 15u) == 0 &&
                    (!dst || (reinterpret_cast<uintptr_t>(dst) & 15u) == 0);
  const uint32_t chunks = wide ? data_len / 16u : 0;
  switch (chunks ? (f.payload >> 2) & 3u : 4u) {
    case 0: c = crc_place_chunks<0>(tb, c, f.base, f.payload, chunks, dst, f.len); break;
    case 1: c = crc_place_chunks<1>(tb, c, f.base, f.payload, chunks, dst, f.len); break;
    case 2: c = crc_place_chunks<2>(tb, c, f.base, f.payload, chunks, dst, f.len); break;
    case 3: c = crc_place_chunks<3>(tb, c, f.base, f.payload, chunks, dst, f.len); break;
    default: break;
  }
  const uint32_t done = chunks * 16u;
  c = crc_place_bytes(tb, c, pay + done, data_len - done, dst ? dst + done : nullptr);
  *raw = c ^ crc32_zeros(tb, start, data_len);
  c = crc_place_bytes(tb, c, pay + data_len, f.payload_len - data_len,
                      dst ? dst + data_len : nullptr);
  c = ~crc32_update_with(tb, ~c, pay + f.payload_len, f.pad);
  return ~c == f.icrc_field();
#else
  // A CPU's CRC (carry-less multiplies) is faster than its copy: two passes, each at speed.
  (void)tb;
  if (dst) std::memcpy(dst, pay, f.payload_len);  // copy_bytes goes a byte at a time off 4
  *raw = ~crc32_update_fast(0xFFFFFFFFu, pay, data_len);
  return icrc_ok(f);
#endif
}

// Classify's header pass: what the stream step may take of `r` on its own. The same
// checks as decide() and frames_write() before they touch the state; anything
// else is kOther.
RT_HD inline StreamKind stream_kind(const EngineDesc& d, const DecodeResult& r, StreamPacket& p) {
  if (!r.ok()) return StreamKind::kOther;
  const FrameView& f = r.frame;
  if (!(f.op.flags & kWrite) || !f.op.is(kOnly) || !f.op.has(kReth) || f.ip_version == 0)
    return StreamKind::kOther;
  if (f.op.transport != d.qp.transport) return StreamKind::kOther;
  const Bth& bth = f.bth_hdr();
  if (bth.dest_qp.get() != d.qp.qpn || !pkey_matches(bth.pkey.get(), d.qp.pkey))
    return StreamKind::kOther;
  if (d.qp.transport == Transport::RC && bth.ack_requested()) return StreamKind::kOther;
  const Reth& reth = f.ext_hdr<Reth>(kReth);
  const uint64_t va = reth.va.get();
  const uint32_t dma_len = reth.dma_len.get();
  const FramesDesc& fd = d.frames;
  if (f.payload_len > dma_len || find_region(d, reth.rkey.get(), va, dma_len) != int(fd.region))
    return StreamKind::kOther;
  const MemRegion& region = d.regions[fd.region];
  const uint32_t at = uint32_t(va - region.va);  // inside the region: its length is 32 bits
  p.page = at / fd.page_bytes;
  p.offset = at % fd.page_bytes;
  if (p.page >= fd.pages || p.offset + f.payload_len > fd.page_bytes) return StreamKind::kOther;
  const bool end = f.op.has(kImmDt);
  p.psn = bth.psn.get();
  p.va = va;
  p.dma_len = dma_len;
  p.dst = region.base + at;
  p.pay_len = f.payload_len;
  p.payload_at = f.payload;
  // With metadata the end packet's trailing 128 bytes are the record (frames_write).
  const bool record = end && fd.metadata && f.payload_len >= kHsbMetadataBytes;
  p.data_len = record ? f.payload_len - kHsbMetadataBytes : f.payload_len;
  p.imm = end ? f.ext_hdr<ImmDt>(kImmDt).imm.get() : 0;
  return end ? StreamKind::kEnd : StreamKind::kData;
}

// Crew-wide helpers on words of the crew's shared batch.
template <class Crew>
RT_HD inline void crew_min(const Crew&, uint32_t* word, uint32_t v) {
  if constexpr (Crew::Team::kLanes > 1) {
#if RT_DEVICE_CODE
    atomicMin(word, v);
#else  // a host team's lanes are threads (tests/cpp's emulated warp)
    uint32_t seen = __atomic_load_n(word, __ATOMIC_RELAXED);
    while (v < seen && !__atomic_compare_exchange_n(word, &seen, v, true, __ATOMIC_RELAXED,
                                                    __ATOMIC_RELAXED)) {
    }
#endif
    return;
  }
  if (v < *word) *word = v;
}

template <class Crew>
RT_HD inline uint32_t crew_add(const Crew&, uint32_t* word, uint32_t v) {
  if constexpr (Crew::Team::kLanes > 1) {
#if RT_DEVICE_CODE
    return atomicAdd(word, v);
#else
    return __atomic_fetch_add(word, v, __ATOMIC_RELAXED);
#endif
  }
  const uint32_t old = *word;
  *word = old + v;
  return old;
}

// The page is the engine's, as frame_packet() will find it: not held by the host, or
// released by it since (page_free, monotonic until the next record).
RT_HD inline bool page_ours(const EngineDesc& d, const EngineState& st, uint32_t page) {
  return !page_busy(st.frames, page) || load_acquire<Scope::kSystem>(&d.frames.page_free[page]);
}

}  // namespace engine_detail

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

// One pass of a frames queue's loop by a crew. Returns the work done, the same for
// every thread.
template <Scope S, class Crew>
RT_HD inline uint32_t stream_step(const Crew& c, const EngineDesc& d, EngineState& st, Batch& b,
                                  Staging* stg) {
  using namespace engine_detail;
  const auto t = c.team();
  const uint32_t threads = c.teams() * t.size();
  const uint32_t me = c.team_index() * t.size() + t.lane();
  StreamPacket* pk = b.packets;
  const uint64_t t0 = crew_clock();
  if (c.leader()) {
    b.ready = b.depth;
    b.first_other = b.depth;
    b.ends = 0;
  }
  c.sync();
  const uint32_t first = st.rx_ci;
  // poll: how many in a row are published (each thread its descriptors, all in flight)
  for (uint32_t i = me; i < b.depth; i += threads)
    if (!rx_poll<S>(d.rx, first + i)) crew_min(c, &b.ready, i);
  c.sync();
  const uint32_t n = b.ready;
  if (n == 0) {
    uint32_t done = 0;
    if (c.leader()) done = b.done = end_pass<S>(d, st, stg, 0);
    c.sync();
    done = b.done;
    c.sync();
    return done;
  }
  const uint64_t t_poll = crew_clock();
  // classify, the header
  for (uint32_t i = me; i < n; i += threads) {
    StreamPacket& p = pk[i];
    const RxDesc& desc = d.rx.descs[(first + i) & d.rx.mask()];
    p.len = desc.len < d.rx.slot_bytes ? desc.len : d.rx.slot_bytes;
    p.ts = desc.timestamp_ns;
    p.frame = d.rx.slot(first + i);
    p.placed = p.execute = p.raw_ok = p.icrc_bad = false;
    p.kind = stream_kind(d, decode(ByteSpan(p.frame, p.len)), p);
    if (p.kind == StreamKind::kOther) crew_min(c, &b.first_other, i);
    if (p.kind == StreamKind::kEnd) {
      const uint32_t k = crew_add(c, &b.ends, 1);
      if (k < kMaxStreamEnds) {
        b.end_index[k] = i;
        b.end_page[k] = p.page;
      } else {
        crew_min(c, &b.first_other, i);  // places nothing early after an end not kept
      }
    }
  }
  c.sync();
  const uint64_t t_head = crew_clock();
  // classify, the pass over the bytes
  const uint32_t ends = b.ends < kMaxStreamEnds ? b.ends : kMaxStreamEnds;
  const bool uc = d.qp.transport == Transport::UC;
  const auto placeable = [&](uint32_t i, const StreamPacket& p) {
    bool place = uc && i < b.first_other && page_ours(d, st, p.page);
    for (uint32_t k = 0; place && k < ends; ++k)
      if (b.end_index[k] < i && b.end_page[k] == p.page) place = false;
    return place;
  };
  // A long payload a warp's: the grain fits the packet.
  const auto by_warp = [&](const StreamPacket& p) {
    return RT_DEVICE_CODE && Crew::Team::kLanes == 32 && d.check_icrc &&
           p.data_len >= kWarpPassBytes &&
           (reinterpret_cast<uintptr_t>(p.frame) & 15u) == 0 &&
           (reinterpret_cast<uintptr_t>(p.dst) & 15u) == 0;
  };
  for (uint32_t i = me; i < n; i += threads) {
    StreamPacket& p = pk[i];
    if (p.kind == StreamKind::kOther || by_warp(p)) continue;
    const bool place = placeable(i, p);
    const FrameView f = decode(ByteSpan(p.frame, p.len)).frame;
    if (d.check_icrc) {
      p.icrc_bad = !icrc_place(f, place ? p.dst : nullptr, p.data_len, &p.raw);
      p.raw_ok = f.pad == 0;
    } else if (place) {
      copy_bytes(p.dst, f.base + f.payload, f.payload_len);
    }
    p.placed = place;
  }
#if RT_DEVICE_CODE
  if constexpr (Crew::Team::kLanes == 32) {
    for (uint32_t i = c.team_index(); i < n; i += c.teams()) {
      StreamPacket& p = pk[i];
      if (p.kind == StreamKind::kOther || !by_warp(p)) continue;
      const bool place = placeable(i, p);
      const FrameView f = decode(ByteSpan(p.frame, p.len)).frame;
      uint32_t raw = 0;
      const bool ok = icrc_place_warp(t, f, place ? p.dst : nullptr, p.data_len, &raw);
      if (t.leader()) {
        p.icrc_bad = !ok;
        p.raw = raw;
        p.raw_ok = f.pad == 0;
        p.placed = place;
      }
    }
  }
#endif
  c.sync();
  const uint64_t t1 = crew_clock();
  // commit, in order
  if (c.leader()) {
    fence_acquire<S>();  // the frames' bytes after the poll's acquires, by other threads
    b.committed = first + stream_commit<S>(d, st, b, n);
  }
  c.sync();
  const uint64_t t2 = crew_clock();
  // execute
  const uint32_t committed = b.committed - first;
  for (uint32_t i = c.team_index(); i < committed; i += c.teams()) {
    const StreamPacket& p = pk[i];
    if (p.execute) copy_bytes_team(t, p.dst, p.frame + p.payload_at, p.pay_len);
  }
  c.sync();
  const uint64_t t3 = crew_clock();
  // publish
  if (c.leader() && sends(st)) send_actions<S>(d, st, stg);
  if (st.frames.pending) {
    const FrameState& fs = st.frames;
    const uint64_t bytes = pending_frame_bytes(d.frames, fs);
    int result = kNoReply;
    if (d.frames.statistic) {
      if (c.team_index() == 0) result = frame_statistic(c.team(), d, st);
      c.sync();
    }
    if (fs.crc_valid && fs.crc_len == bytes) {
      if (c.leader()) record_frame(d, st, folded_page_crc(b, st, bytes), result);
    } else {
      const uint32_t crc = crc32_crew(c, b, pending_frame_page(d, fs), bytes);
      if (c.leader()) record_frame(d, st, crc, result);
    }
  }
  if (c.leader()) {
    publish_completions(d, st);  // the records the commit wrote, their pages placed
    st.rx_ci = b.committed;
    b.done = end_pass<S>(d, st, stg, committed);
    count_batch(b, t0, t1, t2, t3, committed);
    b.classify_cycles[0] += t_poll - t0;
    b.classify_cycles[1] += t_head - t_poll;
    b.classify_cycles[2] += t1 - t_head;
    b.classify_cycles[4] += n;
  }
  c.sync();
  const uint32_t done = b.done;
  c.sync();
  return done;
}

// A frames queue's batch depth: queues.batch, whatever the executor (each thread takes
// every threads-th packet of it).
RT_HD inline uint32_t stream_depth(const EngineDesc& d) {
  return d.batch < kMaxStreamBatch ? d.batch : kMaxStreamBatch;
}

// One pass of a queue's loop by a crew: the frames stream's step, or the batch step.
template <Scope S, class Crew>
RT_HD inline uint32_t crew_pass(const Crew& c, const EngineDesc& d, EngineState& st, Batch& b,
                                Staging* stg = nullptr) {
  if (d.handler.kind == HandlerKind::kFrames) return stream_step<S>(c, d, st, b, stg);
  return crew_step<S>(c, d, st, b, stg);
}

}  // namespace rt
