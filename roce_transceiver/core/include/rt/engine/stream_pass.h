// The frames stream's classify (stream_batch.h): the packet's kind from its header
// (stream_kind) and one pass over its bytes that checks its ICRC and, where the commit will
// find it the engine's, stores its payload in its page (icrc_place: a thread a packet, of
// any size), with the data's own CRC register for the page's fold. A warp a packet (its
// lanes' registers each shifted over the other lanes' chunks, the next row's loads ahead)
// was no faster on the H200 in the engine's kernel: 4 KiB 1 389 SM cycles a packet against
// 1 371 (metadata on: 1 386 against 1 072), 1 KiB 680 against 398; its probe alone
// (bench/probes) was 717 against 943 at 4 KiB. Why the engine's pass costs more than the
// probe's, either way, is not probed apart (the kernel's spills were not it: 1 038 bytes
// to 52 made no difference).
#pragma once

#include "rt/engine/batch.h"

#if RT_HOST_FUNCTIONS
#include <cstring>
#endif

namespace rt {

enum class StreamKind : uint8_t {
  kOther,  // the responder's (decide)
  kData,   // WRITE Only into the pages
  kEnd,    // WRITE Only with Immediate into the pages: a frame's end
};

// Header bytes classify stages next to each packet: every header a stream WRITE has, but
// IPv4 options or IPv6 behind an 802.1Q tag with an immediate (decode_staged).
constexpr uint32_t kStreamHeadBytes = 96;

// One packet of a frames batch, as classify leaves it.
struct StreamPacket {
  // Its first bytes, staged (stage_head): decode's loads a header field at a time then wait on
  // shared memory, not each on a round trip to the rx ring.
  alignas(16) uint8_t header[kStreamHeadBytes];
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
  uint32_t pad;
  uint32_t icrc_start;  // the raw ICRC register at the payload (check_icrc)
  // Its run (stream_commit.h): a packet that goes on from the one before it (link) has the
  // run's head, the packet before the run; the head has the run's length, its members'
  // CRCs folded to the run's end and what they share (kRun*).
  uint32_t head;
  uint32_t run_len;
  uint32_t run_fold;
  uint32_t run_flags;
  StreamKind kind;
  bool placed;    // classify stored the payload
  bool raw_ok;    // raw is known
  bool icrc_bad;  // check_icrc and the ICRC did not match
  bool execute;   // the commit left the payload for execute to store
  bool link;      // goes on from the packet before it, as commit_run would take it
  bool
      run_taken;  // the head's: the commit took its run at once, execute stores what was not placed
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

// Where a packet's pass starts: its bytes, and what its header said of them.
struct PassFrame {
  const uint8_t* frame;
  uint32_t len;          // frame bytes
  uint32_t payload;      // the payload's first byte
  uint32_t payload_len;  // without the pad
  uint32_t pad;
  uint32_t start;  // the raw ICRC register at the payload (icrc_register_at_payload)
  RT_HD uint32_t icrc_field() const { return load_le32(frame + payload + payload_len + pad); }
};

// One thread, one pass over a packet's payload: whether its ICRC matches, with the payload
// stored at dst on the way (null: not stored), and the raw CRC register of its first
// data_len payload bytes into *raw. The register at the data's end less the register at
// its start shifted over it is the data's own: a second register would cost the pass a
// lookup a byte. The header's part of the ICRC comes in (f.start): classify's header pass
// has it, from the staged header.
RT_HD inline bool icrc_place(const PassFrame& f, uint8_t* dst, uint32_t data_len, uint32_t* raw) {
  const Crc32Tables& tb = detail::crc32_tables();
  const uint8_t* pay = f.frame + f.payload;
#if RT_DEVICE_CODE
  uint32_t c = f.start;
  const bool wide = (reinterpret_cast<uintptr_t>(f.frame) & 15u) == 0 &&
                    (!dst || (reinterpret_cast<uintptr_t>(dst) & 15u) == 0);
  const uint32_t chunks = wide ? data_len / 16u : 0;
  switch (chunks ? (f.payload >> 2) & 3u : 4u) {
    case 0: c = crc_place_chunks<0>(tb, c, f.frame, f.payload, chunks, dst, f.len); break;
    case 1: c = crc_place_chunks<1>(tb, c, f.frame, f.payload, chunks, dst, f.len); break;
    case 2: c = crc_place_chunks<2>(tb, c, f.frame, f.payload, chunks, dst, f.len); break;
    case 3: c = crc_place_chunks<3>(tb, c, f.frame, f.payload, chunks, dst, f.len); break;
    default: break;
  }
  const uint32_t done = chunks * 16u;
  c = crc_place_bytes(tb, c, pay + done, data_len - done, dst ? dst + done : nullptr);
  *raw = c ^ crc32_zeros(tb, f.start, data_len);
  c = crc_place_bytes(tb, c, pay + data_len, f.payload_len - data_len,
                      dst ? dst + data_len : nullptr);
  c = ~crc32_update_with(tb, ~c, pay + f.payload_len, f.pad);
  return ~c == f.icrc_field();
#else
  // A CPU's CRC (carry-less multiplies) is faster than its copy: two passes, each at speed.
  (void)tb;
  if (dst) std::memcpy(dst, pay, f.payload_len);  // copy_bytes goes a byte at a time off 4
  *raw = ~crc32_update_fast(0xFFFFFFFFu, pay, data_len);
  return crc32_update_fast(~f.start, pay, f.payload_len + f.pad) == f.icrc_field();
#endif
}

// The same for a decoded frame (its headers read from f.base).
RT_HD inline bool icrc_place(const FrameView& f, uint8_t* dst, uint32_t data_len, uint32_t* raw) {
  const PassFrame pf{f.base,        f.len, f.payload,
                     f.payload_len, f.pad, icrc_register_at_payload(detail::crc32_tables(), f)};
  return icrc_place(pf, dst, data_len, raw);
}

// Classify: the frame's first kStreamHeadBytes into p.header, in one round trip (the loads all
// in flight) where both are 16-byte aligned.
RT_HD inline void stage_head(StreamPacket& p) {
#if RT_DEVICE_CODE
  if (((reinterpret_cast<uintptr_t>(p.frame) | reinterpret_cast<uintptr_t>(p.header)) & 15u) == 0) {
    constexpr uint32_t kChunks = kStreamHeadBytes / 16;
    uint4 v[kChunks];
#pragma unroll
    for (uint32_t k = 0; k < kChunks; ++k)
      v[k] = __ldcg(reinterpret_cast<const uint4*>(p.frame) + k);
#pragma unroll
    for (uint32_t k = 0; k < kChunks; ++k) reinterpret_cast<uint4*>(p.header)[k] = v[k];
    return;
  }
#endif
  copy_bytes(p.header, p.frame, kStreamHeadBytes);
}

// The packet decoded from its staged header (decode reads nothing of a frame but its
// headers, and never past the length it is given); one whose headers go past them, from
// its slot.
RT_HD inline DecodeResult decode_staged(const StreamPacket& p) {
  DecodeResult r = decode(ByteSpan(p.header, p.len));
  if (r.ok() && r.frame.payload > kStreamHeadBytes) r = decode(ByteSpan(p.frame, p.len));
  return r;
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

// Classify, a packet's header (its descriptor's fields in p already): staged, decoded, its
// kind. (Out of line, each call saved and restored ~140 registers: 548 bytes of local
// memory a packet.)
RT_HD inline void classify_header(const EngineDesc& d, StreamPacket& p) {
  p.placed = p.execute = p.raw_ok = p.icrc_bad = p.run_taken = false;
  p.run_len = p.run_fold = p.run_flags = 0;
  stage_head(p);
  const DecodeResult r = decode_staged(p);
  p.kind = stream_kind(d, r, p);
  if (p.kind != StreamKind::kOther) {
    p.pad = r.frame.pad;
    // The ICRC's header part, from the staged bytes: the pass reads only the payload on.
    if (d.check_icrc) p.icrc_start = icrc_register_at_payload(detail::crc32_tables(), r.frame);
  }
}

// Classify, the pass over a stream WRITE's bytes: its ICRC and, where `place`, its payload
// stored in its page.
RT_HD inline void classify_pass(const EngineDesc& d, StreamPacket& p, bool place) {
  if (d.check_icrc) {
    const PassFrame f{p.frame, p.len, p.payload_at, p.pay_len, p.pad, p.icrc_start};
    p.icrc_bad = !icrc_place(f, place ? p.dst : nullptr, p.data_len, &p.raw);
    p.raw_ok = p.pad == 0;
  } else if (place) {
    copy_bytes(p.dst, p.frame + p.payload_at, p.pay_len);
  }
  p.placed = place;
}

// Crew-wide helpers on words of the crew's shared batch.
template <class Crew>
RT_HD inline void crew_min(const Crew&, uint32_t* word, uint32_t v) {
  if constexpr (Crew::Team::kLanes > 1) {
#if RT_DEVICE_CODE
    atomicMin(word, v);
#else  // a host team's lanes are threads (tests/cpp's emulated warp)
    uint32_t seen = __atomic_load_n(word, __ATOMIC_RELAXED);
    while (v < seen &&
           !__atomic_compare_exchange_n(word, &seen, v, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
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

template <class Crew>
RT_HD inline void crew_or(const Crew&, uint32_t* word, uint32_t v) {
  if constexpr (Crew::Team::kLanes > 1) {
#if RT_DEVICE_CODE
    atomicOr(word, v);
#else
    __atomic_fetch_or(word, v, __ATOMIC_RELAXED);
#endif
    return;
  }
  *word |= v;
}

template <class Crew>
RT_HD inline void crew_xor(const Crew&, uint32_t* word, uint32_t v) {
  if constexpr (Crew::Team::kLanes > 1) {
#if RT_DEVICE_CODE
    atomicXor(word, v);
#else
    __atomic_fetch_xor(word, v, __ATOMIC_RELAXED);
#endif
    return;
  }
  *word ^= v;
}

// The page is the engine's, as frame_packet() will find it: not held by the host, or
// released by it since (page_free, monotonic until the next record).
RT_HD inline bool page_ours(const EngineDesc& d, const EngineState& st, uint32_t page) {
  return !page_busy(st.frames, page) || load_acquire<Scope::kSystem>(&d.frames.page_free[page]);
}

}  // namespace engine_detail
}  // namespace rt
