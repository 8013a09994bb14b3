// pass_probe: one SM, one pass over a packet -- the CRC-32 (zlib's, reflected 0xEDB88320) of
// its payload while copying the payload out. SM-wide cycles per packet (one block, all of its
// threads, many packets each) for several designs of that pass. Self-contained (no project
// headers). See README.md here.
//   nvcc -O3 -std=c++17 -arch=sm_90 bench/probes/pass_probe.cu -o /tmp/pass_probe
//   /tmp/pass_probe [--payload 64,1024,4096] [--packets 16384] [--threads 512,1024]
//                   [--reps 3] [--only SUBSTR] [--self-test]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

static void ck(cudaError_t e, const char* what, int line) {
  if (e != cudaSuccess)
    fprintf(stderr, "line %d: %s: %s\n", line, what, cudaGetErrorString(e)), exit(2);
}
#define CK(x) ck((x), #x, __LINE__)

#define HD __host__ __device__ __forceinline__
#if defined(__CUDA_ARCH__)
#define UNROLL _Pragma("unroll")
#else
#define UNROLL
#endif

constexpr uint32_t kPoly = 0xEDB88320u;
constexpr uint32_t kPayOff = 70;               // the payload's first byte in its slot
constexpr uint32_t kAlnOff = kPayOff & ~15u;   // the aligned 16-byte chunk it starts in
constexpr uint32_t kQ = (kPayOff >> 2) & 3u;   // the word of that chunk it starts in
constexpr uint32_t kSh = (kPayOff & 3u) * 8u;  // funnel-shift bits
constexpr uint32_t kMaxRows = 8;               // a warp's rows (32 chunks each): 4 KiB
constexpr uint32_t kMaxPayload = 32u * 16u * kMaxRows;

// Every table a variant uses; copied to shared memory at each kernel's start. All entries are
// raw registers (not inverted). R(c, d): register c after bytes d. Z(c, n): after n zeros.
struct alignas(16) Tables {
  uint32_t n4[32][16];           // R(0, 16-byte chunk whose only non-zero nibble is v at nibble n)
  uint32_t t8[16][256];          // R(0, 16-byte chunk whose only non-zero byte is b at byte p)
  uint32_t s4[4][256];           // slicing-by-4: R(0, byte b then k zero bytes)
  uint32_t s496[8][16];          // Z(v << 4k, 496): a warp's other 31 chunks
  uint32_t lane_il[8][16][32];   // [k][v][lane] Z(v << 4k, bytes after the lane's last chunk)
  uint32_t lane_seg[8][16][32];  // [k][v][lane] Z(v << 4k, bytes after the lane's segment)
};                               // [..][lane] last: lane l always reads bank l

// ----------------------------------------------------------------- host reference
static uint32_t step_bitwise(uint32_t c, uint8_t b) {
  c ^= b;
  for (int i = 0; i < 8; ++i) c = (c & 1) ? (c >> 1) ^ kPoly : c >> 1;
  return c;
}
static uint32_t crc_bitwise(const uint8_t* p, size_t n) {  // zlib.crc32(p[:n])
  uint32_t c = ~0u;
  for (size_t i = 0; i < n; ++i) c = step_bitwise(c, p[i]);
  return ~c;
}
struct HostCrc {  // one byte table from the bitwise step; everything else from these
  uint32_t t0[256];
  HostCrc() {
    for (uint32_t b = 0; b < 256; ++b) t0[b] = step_bitwise(0, uint8_t(b));
  }
  uint32_t feed(uint32_t c, const uint8_t* p, size_t n) const {
    while (n--) c = t0[(c ^ *p++) & 255] ^ (c >> 8);
    return c;
  }
  uint32_t zeros(uint32_t c, size_t n) const {
    while (n--) c = t0[c & 255] ^ (c >> 8);
    return c;
  }
  uint32_t crc(const uint8_t* p, size_t n) const { return ~feed(~0u, p, n); }
};

// How a payload of C chunks is split: rows of 32 chunks (warp, coalesced), or segments of
// `seg` (a power of two) contiguous chunks a lane; the staging stride is odd (no conflicts).
struct Layout {
  uint32_t payload, C, slot_bytes, rows, seg, seg_lg, stride;
};
static Layout layout_for(uint32_t payload) {
  Layout L{};
  L.payload = payload;
  L.C = payload / 16;
  L.slot_bytes = (payload + 96 + 63) & ~63u;
  L.rows = (L.C + 31) / 32;
  L.seg = 1;
  while (L.seg * 32 < L.C) L.seg *= 2, ++L.seg_lg;
  L.stride = L.seg > 1 ? L.seg + 1 : 1;
  return L;
}

static void make_tables(const HostCrc& h, const Layout& L, Tables& t) {
  for (uint32_t b = 0; b < 256; ++b) {
    for (uint32_t k = 0; k < 4; ++k) t.s4[k][b] = h.zeros(h.t0[b], k);
    for (uint32_t p = 0; p < 16; ++p) t.t8[p][b] = h.zeros(h.t0[b], 15 - p);
  }
  for (uint32_t n = 0; n < 32; ++n)
    for (uint32_t v = 0; v < 16; ++v) {
      uint8_t ch[16] = {};
      ch[n / 2] = uint8_t(v << (4 * (n % 2)));
      t.n4[n][v] = h.feed(0, ch, 16);
    }
  for (uint32_t k = 0; k < 8; ++k)
    for (uint32_t v = 0; v < 16; ++v) t.s496[k][v] = h.zeros(v << (4 * k), 496);
  for (uint32_t lane = 0; lane < 32; ++lane) {
    const uint32_t last = lane < L.C ? lane + 32 * ((L.C - 1 - lane) / 32) : 0;
    const uint32_t il_tail = lane < L.C ? 16 * (L.C - 1 - last) : 0;
    const uint32_t s0 = lane * L.seg, end = std::min(L.C, s0 + L.seg);
    const uint32_t seg_tail = s0 < L.C ? 16 * (L.C - end) : 0;
    for (uint32_t k = 0; k < 8; ++k)
      for (uint32_t v = 0; v < 16; ++v) {
        t.lane_il[k][v][lane] = h.zeros(v << (4 * k), il_tail);
        t.lane_seg[k][v][lane] = h.zeros(v << (4 * k), seg_tail);
      }
  }
}

// ----------------------------------------------------------------- CRC math (host and device)
HD uint4 zero4() { return make_uint4(0, 0, 0, 0); }
HD uint32_t fsr(uint32_t lo, uint32_t hi, uint32_t sh) {
#if defined(__CUDA_ARCH__)
  return __funnelshift_r(lo, hi, sh);
#else
  return sh ? (lo >> sh) | (hi << (32 - sh)) : lo;
#endif
}
// The payload's chunk that starts in aligned chunk a and ends in b.
HD uint4 extract(const uint4& a, const uint4& b) {
  const uint32_t w[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
  return make_uint4(fsr(w[kQ], w[kQ + 1], kSh), fsr(w[kQ + 1], w[kQ + 2], kSh),
                    fsr(w[kQ + 2], w[kQ + 3], kSh), fsr(w[kQ + 3], w[kQ + 4], kSh));
}

// Table schemes for a chunk. 0..4: that many of the chunk's words (the last ones) by byte
// tables (t8: 4 lookups a word, bank conflicts), the others by nibble tables (n4: 8 lookups a
// word, conflict-free). kSlice4: four dependent slicing-by-4 steps. kNoCrc: none.
enum : int { kNibble = 0, kMix = 2, kSlice16 = 4, kSlice4 = 5, kNoCrc = 6 };

// R(r, o): register r after the 16 bytes o.
template <int S>
HD uint32_t crc_chunk(const Tables& t, uint32_t r, const uint4& o) {
  if constexpr (S == kNoCrc) {
    return r ^ o.x;  // keeps the loads live; never checked
  } else if constexpr (S == kSlice4) {
    const uint32_t w[4] = {o.x, o.y, o.z, o.w};
    UNROLL for (int j = 0; j < 4; ++j) {
      const uint32_t x = w[j] ^ r;
      r = t.s4[3][x & 255] ^ t.s4[2][(x >> 8) & 255] ^ t.s4[1][(x >> 16) & 255] ^ t.s4[0][x >> 24];
    }
    return r;
  } else {
    const uint32_t w[4] = {o.x ^ r, o.y, o.z, o.w};  // the register enters as the first word
    uint32_t a = 0, b = 0;                           // two accumulators: a shorter XOR chain
    UNROLL for (int j = 0; j < 4; ++j) {
      if (j >= 4 - S) {
        UNROLL for (int q = 0; q < 4; q += 2) {
          a ^= t.t8[4 * j + q][(w[j] >> (8 * q)) & 255];
          b ^= t.t8[4 * j + q + 1][(w[j] >> (8 * q + 8)) & 255];
        }
      } else {
        UNROLL for (int n = 0; n < 8; n += 2) {
          a ^= t.n4[8 * j + n][(w[j] >> (4 * n)) & 15];
          b ^= t.n4[8 * j + n + 1][(w[j] >> (4 * n + 4)) & 15];
        }
      }
    }
    return a ^ b;
  }
}
// Z(r, n) for the n of a [8][16] table, and of a lane's column of a [8][16][32] one.
HD uint32_t shift_tab(const uint32_t (&s)[8][16], uint32_t r) {
  uint32_t a = 0;
  UNROLL for (int k = 0; k < 8; ++k) a ^= s[k][(r >> (4 * k)) & 15];
  return a;
}
HD uint32_t lane_shift(const uint32_t (&s)[8][16][32], uint32_t lane, uint32_t r) {
  uint32_t a = 0;
  UNROLL for (int k = 0; k < 8; ++k) a ^= s[k][(r >> (4 * k)) & 15][lane];
  return a;
}

template <bool kCg>  // kCg: L2 only (the engine's __ldcg); else cached in L1 too
HD uint4 ld(const uint4* p) {
#if defined(__CUDA_ARCH__)
  if constexpr (kCg)
    return __ldcg(p);
  else
    return __ldca(p);
#else
  return *p;
#endif
}
HD void st16(uint8_t* p, const uint4& v) { *reinterpret_cast<uint4*>(p) = v; }

// A thread, a packet of C chunks (the engine's icrc_place): aligned loads 4 chunks ahead of
// their use, funnel shifts, 16-byte stores. Returns R(0, payload).
template <int S, bool kStore, bool kCg>
HD uint32_t thread_packet(const Tables& t, const uint8_t* slot, uint8_t* dst, uint32_t C) {
  constexpr uint32_t G = 4;
  const uint4* a = reinterpret_cast<const uint4*>(slot + kAlnOff);  // aligned chunks 0..C
  uint4 cur = ld<kCg>(a), nx[G];
  UNROLL for (uint32_t g = 0; g < G; ++g) nx[g] = 1 + g <= C ? ld<kCg>(a + 1 + g) : zero4();
  uint32_t r = 0, k = 0;
  auto step = [&](uint32_t g) {
    const uint4 o = extract(cur, nx[g]);
    if (kStore) st16(dst + 16 * (k + g), o);
    r = crc_chunk<S>(t, r, o);
    cur = nx[g];
  };
  for (; k + G <= C; k += G) {
    uint4 ah[G];
    UNROLL for (uint32_t g = 0; g < G; ++g) {
      const uint32_t j = k + 1 + G + g;
      ah[g] = j <= C ? ld<kCg>(a + j) : zero4();
    }
    UNROLL for (uint32_t g = 0; g < G; ++g) step(g);
    UNROLL for (uint32_t g = 0; g < G; ++g) nx[g] = ah[g];
  }
  UNROLL for (uint32_t g = 0; g < G; ++g) if (k + g < C) step(g);
  return r;
}

// A thread, a packet, a 128-byte line at a time: the line's 8 loads back to back (L1-cached)
// before any of it is used, so a line is not evicted between one thread's loads.
template <int S, bool kStore>
HD uint32_t line_packet(const Tables& t, const uint8_t* slot, uint8_t* dst, uint32_t C) {
  const uintptr_t abase = reinterpret_cast<uintptr_t>(slot) + kAlnOff;
  const uint4* line = reinterpret_cast<const uint4*>(abase & ~uintptr_t(127));
  const uint32_t u0 = uint32_t(abase & 127) >> 4, uend = u0 + C;  // aligned chunks u0..uend
  uint4 prev = zero4();
  uint32_t r = 0;
  for (uint32_t L = 0; 8 * L <= uend; ++L, line += 8) {
    uint4 x[8];
    UNROLL for (uint32_t m = 0; m < 8; ++m) {
      const uint32_t u = 8 * L + m;
      x[m] = u >= u0 && u <= uend ? ld<false>(line + m) : zero4();
    }
    UNROLL for (uint32_t m = 0; m < 8; ++m) {
      const uint32_t u = 8 * L + m;
      if (u > u0 && u <= uend) {  // output chunk u - 1 - u0: aligned chunks u - 1 and u
        const uint4 o = extract(m ? x[m ? m - 1 : 0] : prev, x[m]);
        if (kStore) st16(dst + 16 * (u - 1 - u0), o);
        r = crc_chunk<S>(t, r, o);
      }
    }
    prev = x[7];
  }
  return r;
}

// A warp, a packet: this lane's contiguous segment (its seg + 1 aligned loads back to back,
// straight from global memory), its CRC run from zero, its stores; returns its register
// shifted over the bytes after its segment (the lanes' XOR is R(0, payload)).
template <int S, bool kStore>
HD uint32_t segment_lane(const Tables& t, const uint8_t* slot, uint8_t* dst, uint32_t C,
                         uint32_t seg, uint32_t lane) {
  const uint32_t s0 = lane * seg;
  if (s0 >= C) return 0;
  const uint32_t n = seg < C - s0 ? seg : C - s0;
  const uint4* a = reinterpret_cast<const uint4*>(slot + kAlnOff) + s0;
  uint4 v[kMaxRows + 1];
  UNROLL for (uint32_t j = 0; j <= kMaxRows; ++j) v[j] = j <= n ? ld<true>(a + j) : zero4();
  uint32_t r = 0;
  UNROLL for (uint32_t j = 0; j < kMaxRows; ++j) {
    if (j < n) {
      const uint4 o = extract(v[j], v[j + 1]);
      if (kStore) st16(dst + 16 * (s0 + j), o);
      r = crc_chunk<S>(t, r, o);
    }
  }
  return lane_shift(t.lane_seg, lane, r);
}

// ----------------------------------------------------------------- kernels
struct Args {
  const uint8_t* src;
  uint8_t* dst;
  uint32_t* crc;
  long long* clk;       // [0] table copy cycles, [1] main loop cycles (thread 0)
  const uint4* tables;  // a Tables in global memory
  uint32_t n, C, slot_bytes, rows, seg, seg_lg, stride, zinit;  // zinit = Z(~0, payload)
};
__device__ __forceinline__ const uint4* slot4(const Args& a, uint32_t p) {
  return reinterpret_cast<const uint4*>(a.src + size_t(p) * a.slot_bytes + kAlnOff);
}

// A thread a packet; the threads of a warp take consecutive packets.
template <int S, bool kStore, bool kCg, bool kLine>
struct ThreadV {
  static constexpr bool kStage = false;
  static __device__ void run(const Args& a, const Tables& t, uint4*) {
    for (uint32_t p = threadIdx.x; p < a.n; p += blockDim.x) {
      const uint8_t* slot = a.src + size_t(p) * a.slot_bytes;
      uint8_t* dst = a.dst + size_t(p) * a.C * 16;
      uint32_t r;
      if constexpr (kLine)
        r = line_packet<S, kStore>(t, slot, dst, a.C);
      else
        r = thread_packet<S, kStore, kCg>(t, slot, dst, a.C);
      if (S != kNoCrc) a.crc[p] = ~(r ^ a.zinit);
    }
  }
};

template <int S>
struct SegmentV {
  static constexpr bool kStage = false;
  static __device__ void run(const Args& a, const Tables& t, uint4*) {
    const uint32_t lane = threadIdx.x & 31;
    for (uint32_t p = threadIdx.x >> 5; p < a.n; p += blockDim.x >> 5) {
      uint32_t r = segment_lane<S, true>(t, a.src + size_t(p) * a.slot_bytes,
                                         a.dst + size_t(p) * a.C * 16, a.C, a.seg, lane);
      r = __reduce_xor_sync(~0u, r);
      if (lane == 0) a.crc[p] = ~(r ^ a.zinit);
    }
  }
};

// The engine's icrc_place_warp: lane l takes chunks l, l + 32, ...; a row's loads when it
// gets to it; the register shifted over the other lanes' 31 chunks before each of its own.
struct CurrentV {
  static constexpr bool kStage = false;
  static __device__ void run(const Args& a, const Tables& t, uint4*) {
    const uint32_t lane = threadIdx.x & 31, C = a.C;
    for (uint32_t p = threadIdx.x >> 5; p < a.n; p += blockDim.x >> 5) {
      const uint4* a4 = slot4(a, p);
      uint8_t* dst = a.dst + size_t(p) * C * 16;
      uint32_t r = 0, last = 0;
      for (uint32_t k0 = 0; k0 < C; k0 += 32) {
        const uint32_t k = k0 + lane;
        const uint4 cur = k <= C ? ld<true>(a4 + k) : zero4();
        const uint4 fnx = k0 + 32 <= C ? ld<true>(a4 + k0 + 32) : zero4();
        uint4 nxt;
        nxt.x = __shfl_down_sync(~0u, cur.x, 1);
        nxt.y = __shfl_down_sync(~0u, cur.y, 1);
        nxt.z = __shfl_down_sync(~0u, cur.z, 1);
        nxt.w = __shfl_down_sync(~0u, cur.w, 1);
        if (lane == 31) nxt = fnx;
        if (k < C) {
          const uint4 o = extract(cur, nxt);
          st16(dst + 16 * k, o);
          r = crc_chunk<kNibble>(t, k0 ? shift_tab(t.s496, r) : 0u, o);
          last = k + 1;
        }
      }
      r = last ? lane_shift(t.lane_il, lane, r) : 0u;
      r = __reduce_xor_sync(~0u, r);
      if (lane == 0) a.crc[p] = ~(r ^ a.zinit);
    }
  }
};

__device__ __forceinline__ void load_rows(uint4 (&v)[kMaxRows], uint4& tail, const uint4* a4,
                                          uint32_t C, uint32_t R, uint32_t lane) {
  UNROLL for (uint32_t i = 0; i < kMaxRows; ++i) {
    const uint32_t k = lane + 32 * i;
    v[i] = i < R && k <= C ? ld<true>(a4 + k) : zero4();
  }
  tail = lane == 0 && 32 * R <= C ? ld<true>(a4 + 32 * R) : zero4();  // aligned chunk 32 R
}

// A warp a packet, coalesced: all of its rows loaded at once (lane l: aligned chunks l + 32 i),
// the next packet's row i loaded as soon as row i is done with (a packet ahead in flight, no
// extra registers). A row's output chunk from the lane's aligned chunk and its right
// neighbour's (lane 31: lane 0's of the next row, or the tail chunk): one shuffle a word.
//   kCopy: stores only. kInterleave: warp_current's CRC (31-chunk shift per chunk).
//   kStage: each output chunk also to a per-warp staging area in shared memory (odd stride:
//   conflict-free), then each lane a contiguous segment's CRC run from it, combined by the
//   per-lane shift tables: no shift per chunk, loads and stores coalesced.
enum : int { kCopy = 0, kInterleave = 1, kStageMode = 2 };
template <int M, int S, bool kStore>
struct CoalescedV {
  static constexpr bool kStage = M == kStageMode;
  static __device__ void run(const Args& a, const Tables& t, uint4* stage_all) {
    const uint32_t lane = threadIdx.x & 31, W = blockDim.x >> 5, C = a.C, R = a.rows;
    uint4* stage = stage_all + (threadIdx.x >> 5) * 32 * a.stride;
    uint4 v[kMaxRows], tail;
    uint32_t p = threadIdx.x >> 5;
    if (p < a.n) load_rows(v, tail, slot4(a, p), C, R, lane);
    for (; p < a.n; p += W) {
      const bool more = p + W < a.n;
      const uint4* an = slot4(a, more ? p + W : p);
      uint8_t* dst = a.dst + size_t(p) * C * 16;
      uint32_t r = 0, last = 0;
      UNROLL for (uint32_t i = 0; i < kMaxRows; ++i) {
        if (i < R) {
          const uint4 up = i + 1 < R ? v[i + 1 < kMaxRows ? i + 1 : i] : tail;
          const uint4 y = lane == 0 ? up : v[i];
          const int from = (lane + 1) & 31;
          uint4 nx;
          nx.x = __shfl_sync(~0u, y.x, from);
          nx.y = __shfl_sync(~0u, y.y, from);
          nx.z = __shfl_sync(~0u, y.z, from);
          nx.w = __shfl_sync(~0u, y.w, from);
          const uint4 o = extract(v[i], nx);
          const uint32_t k = lane + 32 * i;
          if (more) v[i] = k <= C ? ld<true>(an + k) : zero4();
          if (k < C) {
            if (kStore) st16(dst + 16 * k, o);
            if (M == kInterleave) {
              r = crc_chunk<S>(t, i ? shift_tab(t.s496, r) : 0u, o);
              last = k + 1;
            }
            if (M == kStageMode) stage[(k >> a.seg_lg) * a.stride + (k & (a.seg - 1))] = o;
            if (M == kCopy) r ^= o.x;
          }
        }
      }
      if (more) tail = lane == 0 && 32 * R <= C ? ld<true>(an + 32 * R) : zero4();
      if (M == kInterleave) r = last ? lane_shift(t.lane_il, lane, r) : 0u;
      if (M == kStageMode) {
        __syncwarp();
        const uint32_t s0 = lane * a.seg;
#pragma unroll 1  // unrolled, its loads hoisted: spills at 1024 threads
        for (uint32_t j = 0; j < a.seg && s0 + j < C; ++j)
          r = crc_chunk<S>(t, r, stage[lane * a.stride + j]);
        r = s0 < C ? lane_shift(t.lane_seg, lane, r) : 0u;
        __syncwarp();
      }
      r = __reduce_xor_sync(~0u, r);
      if (M != kCopy && lane == 0) a.crc[p] = ~(r ^ a.zinit);
    }
  }
};

template <class V, int MT>
__global__ void __launch_bounds__(MT, 1) probe(Args a) {
  extern __shared__ uint4 smem[];
  const long long t0 = clock64();
  constexpr uint32_t kWords = sizeof(Tables) / 16;
#pragma unroll 4
  for (uint32_t i = threadIdx.x; i < kWords; i += blockDim.x) smem[i] = a.tables[i];
  __syncthreads();
  const long long t1 = clock64();
  V::run(a, *reinterpret_cast<const Tables*>(smem), smem + kWords);
  __syncthreads();
  const long long t2 = clock64();
  if (threadIdx.x == 0) a.clk[0] = t1 - t0, a.clk[1] = t2 - t1;
}

// ----------------------------------------------------------------- host driver
struct Variant {
  const char* name;
  const void* k512;
  const void* k1024;
  bool store, crc, stage;
};
template <class V>
static Variant var(const char* name, bool store, bool crc) {
  return {name,
          reinterpret_cast<const void*>(probe<V, 512>),
          reinterpret_cast<const void*>(probe<V, 1024>),
          store,
          crc,
          V::kStage};
}
static std::vector<Variant> variants() {
  return {
      var<ThreadV<kNibble, true, true, false>>("thread_nibble", true, true),
      var<ThreadV<kNibble, true, false, false>>("thread_nibble_l1", true, true),
      var<ThreadV<kSlice4, true, true, false>>("thread_slice4", true, true),
      var<ThreadV<kSlice16, true, true, false>>("thread_slice16", true, true),
      var<ThreadV<kMix, true, true, false>>("thread_mix", true, true),
      var<ThreadV<kNibble, true, false, true>>("thread_line", true, true),
      var<CurrentV>("warp_current", true, true),
      var<CoalescedV<kInterleave, kNibble, true>>("warp_current_pf", true, true),
      var<SegmentV<kNibble>>("warp_segment", true, true),
      var<CoalescedV<kStageMode, kNibble, true>>("warp_stage", true, true),
      var<CoalescedV<kStageMode, kMix, true>>("warp_stage_mix", true, true),
      var<ThreadV<kNoCrc, true, true, false>>("copy_thread", true, false),
      var<CoalescedV<kCopy, kNibble, true>>("copy_warp", true, false),
      var<ThreadV<kNibble, false, true, false>>("crc_thread_nibble", false, true),
      var<CoalescedV<kStageMode, kNibble, false>>("crc_warp_stage", false, true),
  };
}

static void fill_random(uint8_t* p, size_t n, uint64_t seed) {
  std::mt19937_64 g(seed);
  for (size_t i = 0; i < n; i += 8) {
    const uint64_t x = g();
    memcpy(p + i, &x, std::min<size_t>(8, n - i));
  }
}

static int self_test() {
  int fails = 0, checks = 0;
  auto expect = [&](bool ok, const char* what, uint32_t payload) {
    ++checks;
    if (!ok) ++fails, printf("FAIL %s (payload %u)\n", what, payload);
  };
  HostCrc h;
  const uint8_t* nine = reinterpret_cast<const uint8_t*>("123456789");
  expect(crc_bitwise(nine, 9) == 0xCBF43926u, "bitwise check value", 9);
  expect(h.crc(nine, 9) == 0xCBF43926u, "table check value", 9);
  std::vector<uint8_t> buf(5000);
  fill_random(buf.data(), buf.size(), 7);
  std::mt19937 rng(1);
  for (int i = 0; i < 200; ++i) {
    const uint32_t at = rng() % 100, n = rng() % 4900;
    expect(h.crc(&buf[at], n) == crc_bitwise(&buf[at], n), "table vs bitwise", n);
  }
  Tables* t = new Tables;
  for (uint32_t payload : {16u, 64u, 80u, 1024u, 1488u, 4096u}) {
    const Layout L = layout_for(payload);
    make_tables(h, L, *t);
    const uint32_t zinit = h.zeros(~0u, payload), C = L.C, R = L.rows;
    const uint32_t kSlots = 3;  // slots at both 0 and 64 mod 128 for thread_line
    const size_t bytes = (size_t(kSlots) * L.slot_bytes + 127) & ~size_t(127);
    uint8_t* src = static_cast<uint8_t*>(aligned_alloc(128, bytes));
    fill_random(src, bytes, payload);
    std::vector<uint8_t> dst(payload);
    for (uint32_t s = 0; s < kSlots; ++s) {
      const uint8_t* slot = src + size_t(s) * L.slot_bytes;
      const uint8_t* pay = slot + kPayOff;
      const uint32_t ref = h.crc(pay, payload);
      auto run = [&](const char* what, auto fn) {
        std::fill(dst.begin(), dst.end(), 0);
        const uint32_t r = fn();
        expect(~(r ^ zinit) == ref && memcmp(dst.data(), pay, payload) == 0, what, payload);
      };
      uint8_t* d = dst.data();
      run("thread_nibble", [&] { return thread_packet<kNibble, true, true>(*t, slot, d, C); });
      run("thread_slice4", [&] { return thread_packet<kSlice4, true, true>(*t, slot, d, C); });
      run("thread_slice16", [&] { return thread_packet<kSlice16, true, true>(*t, slot, d, C); });
      run("thread_mix", [&] { return thread_packet<kMix, true, true>(*t, slot, d, C); });
      run("thread_line", [&] { return line_packet<kNibble, true>(*t, slot, d, C); });
      run("warp_segment", [&] {
        uint32_t r = 0;
        for (uint32_t lane = 0; lane < 32; ++lane)
          r ^= segment_lane<kNibble, true>(*t, slot, d, C, L.seg, lane);
        return r;
      });
      // CoalescedV's rows: lane l holds aligned chunk l + 32 i, lane 0 the tail; a lane's
      // right neighbour is lane (l + 1) & 31, whose word is the next row's (or the tail) at 0.
      const uint4* A = reinterpret_cast<const uint4*>(slot + kAlnOff);
      auto held = [&](uint32_t i, uint32_t l) { return l + 32 * i <= C ? A[l + 32 * i] : zero4(); };
      const uint4 tail0 = 32 * R <= C ? A[32 * R] : zero4();
      std::vector<uint4> out(C);
      for (uint32_t i = 0; i < R; ++i)
        for (uint32_t l = 0; l < 32; ++l) {
          const uint32_t from = (l + 1) & 31, k = l + 32 * i;
          const uint4 y = from == 0 ? (i + 1 < R ? held(i + 1, 0) : tail0) : held(i, from);
          if (k < C) out[k] = extract(held(i, l), y);
        }
      expect(memcmp(out.data(), pay, payload) == 0, "coalesced rows", payload);
      uint32_t ril = 0, rst = 0, rmix = 0;
      std::vector<uint4> stage(32 * L.stride, zero4());
      for (uint32_t k = 0; k < C; ++k)
        stage[(k >> L.seg_lg) * L.stride + (k & (L.seg - 1))] = out[k];
      for (uint32_t l = 0; l < 32; ++l) {
        uint32_t r = 0, last = 0;
        for (uint32_t i = 0; i < R; ++i)
          if (l + 32 * i < C)
            r = crc_chunk<kNibble>(*t, i ? shift_tab(t->s496, r) : 0u, out[l + 32 * i]),
            last = l + 32 * i + 1;
        ril ^= last ? lane_shift(t->lane_il, l, r) : 0u;
        uint32_t a = 0, b = 0;
        for (uint32_t j = 0; j < L.seg && l * L.seg + j < C; ++j) {
          a = crc_chunk<kNibble>(*t, a, stage[l * L.stride + j]);
          b = crc_chunk<kMix>(*t, b, stage[l * L.stride + j]);
        }
        rst ^= l * L.seg < C ? lane_shift(t->lane_seg, l, a) : 0u;
        rmix ^= l * L.seg < C ? lane_shift(t->lane_seg, l, b) : 0u;
      }
      expect(~(ril ^ zinit) == ref, "warp interleaved (s496 + lane_il)", payload);
      expect(~(rst ^ zinit) == ref, "warp_stage (staging + lane_seg)", payload);
      expect(~(rmix ^ zinit) == ref, "warp_stage_mix", payload);
    }
    free(src);
  }
  delete t;
  printf("self-test: %d checks, %d failed: %s\n", checks, fails, fails ? "FAIL" : "PASS");
  return fails ? 1 : 0;
}

static std::vector<uint32_t> parse_list(const char* s) {
  std::vector<uint32_t> v;
  for (const char* p = s; *p;) {
    v.push_back(uint32_t(strtoul(p, const_cast<char**>(&p), 10)));
    if (*p == ',')
      ++p;
    else if (*p)
      break;
  }
  return v;
}

int main(int argc, char** argv) {
  std::vector<uint32_t> payloads = {64, 1024, 4096}, thread_counts = {512, 1024};
  uint32_t n = 16384, reps = 3;
  std::string only;
  for (int i = 1; i < argc; ++i) {
    const std::string o = argv[i];
    const char* val = i + 1 < argc ? argv[i + 1] : "";
    if (o == "--self-test") return self_test();
    if (o == "--payload")
      payloads = parse_list(val), ++i;
    else if (o == "--threads")
      thread_counts = parse_list(val), ++i;
    else if (o == "--packets")
      n = uint32_t(atoi(val)), ++i;
    else if (o == "--reps")
      reps = std::max(1, atoi(val)), ++i;
    else if (o == "--only")
      only = val, ++i;
    else
      return fprintf(stderr,
                     "usage: %s [--payload 64,1024,4096] [--packets N] "
                     "[--threads 512,1024] [--reps 3] [--only SUBSTR] [--self-test]\n",
                     argv[0]),
             2;
  }
  for (uint32_t p : payloads)
    if (p == 0 || p % 16 || p > kMaxPayload)
      return fprintf(stderr, "payload %u: a multiple of 16, <= %u\n", p, kMaxPayload), 2;
  for (uint32_t tc : thread_counts)
    if (tc == 0 || tc % 32 || tc > 1024)
      return fprintf(stderr, "threads %u: a multiple of 32, <= 1024\n", tc), 2;
  if (self_test()) return 1;

  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, 0));
  int peak_khz = 0;
  CK(cudaDeviceGetAttribute(&peak_khz, cudaDevAttrClockRate, 0));
  printf(
      "%s, %d SMs, peak SM clock %.0f MHz; one block on one SM, %u packets; payload at byte %u of "
      "its slot\n",
      prop.name, prop.multiProcessorCount, peak_khz / 1e3, n, kPayOff);
  printf(
      "cyc/pkt: main-loop clock64 cycles (thread 0) / packets. Gb/s@clk: payload bits at the "
      "measured SM clock\n"
      "(kernel clock64 cycles / event time). ev_us: event time of the whole launch. Target: ~650 "
      "(4 KiB), ~50 (64 B).\n");
  HostCrc h;
  Tables* tab = new Tables;
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0)), CK(cudaEventCreate(&e1));
  int failures = 0;
  const auto vars = variants();
  for (uint32_t payload : payloads) {
    const Layout L = layout_for(payload);
    make_tables(h, L, *tab);
    const size_t src_bytes = size_t(n) * L.slot_bytes + 128, dst_bytes = size_t(n) * payload;
    std::vector<uint8_t> src_h(src_bytes), dst_h(dst_bytes);
    std::vector<uint32_t> ref(n), crc_h(n);
    fill_random(src_h.data(), src_bytes, 1000 + payload);
    for (uint32_t p = 0; p < n; ++p)
      ref[p] = h.crc(&src_h[size_t(p) * L.slot_bytes + kPayOff], payload);
    uint8_t *src_d, *dst_d;
    uint32_t* crc_d;
    long long* clk_d;
    uint4* tab_d;
    CK(cudaMalloc(&src_d, src_bytes)), CK(cudaMalloc(&dst_d, dst_bytes)),
        CK(cudaMalloc(&crc_d, n * 4));
    CK(cudaMalloc(&clk_d, 16)), CK(cudaMalloc(&tab_d, sizeof(Tables)));
    CK(cudaMemcpy(src_d, src_h.data(), src_bytes, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(tab_d, tab, sizeof(Tables), cudaMemcpyHostToDevice));
    Args a{src_d,
           dst_d,
           crc_d,
           clk_d,
           tab_d,
           n,
           L.C,
           L.slot_bytes,
           L.rows,
           L.seg,
           L.seg_lg,
           L.stride,
           h.zeros(~0u, payload)};
    printf("\npayload %u B (slot %u B, %u chunks, %u rows, segment %u)\n", payload, L.slot_bytes,
           L.C, L.rows, L.seg);
    printf("%-18s %7s %9s %9s %9s %9s %7s %5s %5s %7s  %s\n", "variant", "threads", "cyc/pkt",
           "Gb/s@clk", "ev_us", "Gb/s(ev)", "MHz", "regs", "lmem", "smem", "check");
    for (uint32_t threads : thread_counts) {
      for (const Variant& v : vars) {
        if (!only.empty() && std::string(v.name).find(only) == std::string::npos) continue;
        const void* k = threads > 512 ? v.k1024 : v.k512;
        const size_t smem =
            sizeof(Tables) + (v.stage ? size_t(threads / 32) * 32 * L.stride * 16 : 0);
        cudaFuncAttributes fa{};
        CK(cudaFuncGetAttributes(&fa, k));
        CK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
        CK(cudaMemset(dst_d, 0, dst_bytes));
        CK(cudaMemset(crc_d, 0, n * 4));
        void* params[] = {&a};
        double best_cyc = 1e30, best_ms = 0, best_total = 0;
        for (uint32_t r = 0; r <= reps; ++r) {  // r == 0: warm-up
          CK(cudaEventRecord(e0)), CK(cudaLaunchKernel(k, dim3(1), dim3(threads), params, smem, 0));
          CK(cudaEventRecord(e1)), CK(cudaEventSynchronize(e1)), CK(cudaGetLastError());
          long long clk[2];
          float ms = 0;
          CK(cudaMemcpy(clk, clk_d, 16, cudaMemcpyDeviceToHost));
          CK(cudaEventElapsedTime(&ms, e0, e1));
          if (r && clk[1] < best_cyc)
            best_cyc = double(clk[1]), best_ms = ms, best_total = double(clk[0] + clk[1]);
        }
        CK(cudaMemcpy(crc_h.data(), crc_d, n * 4, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(dst_h.data(), dst_d, dst_bytes, cudaMemcpyDeviceToHost));
        uint32_t bad_crc = 0, bad_copy = 0, first = ~0u;
        for (uint32_t p = 0; p < n; ++p) {
          const bool c = v.crc && crc_h[p] != ref[p];
          const bool d = v.store && memcmp(&dst_h[size_t(p) * payload],
                                           &src_h[size_t(p) * L.slot_bytes + kPayOff], payload);
          bad_crc += c, bad_copy += d;
          if ((c || d) && first == ~0u) first = p;
        }
        const double cyc = best_cyc / n, mhz = best_total / (best_ms * 1e3);
        printf("%-18s %7u %9.1f %9.1f %9.1f %9.1f %7.0f %5d %5zu %7zu  ", v.name, threads, cyc,
               payload * 8.0 * mhz * 1e6 / cyc / 1e9, best_ms * 1e3,
               payload * 8.0 * n / (best_ms * 1e-3) / 1e9, mhz, fa.numRegs,
               size_t(fa.localSizeBytes), smem);
        if (bad_crc || bad_copy)
          ++failures,
              printf("FAIL: %u CRCs, %u copies wrong (first packet %u: crc %08x, want %08x)\n",
                     bad_crc, bad_copy, first, crc_h[first], ref[first]);
        else
          printf("ok\n");
      }
    }
    CK(cudaFree(src_d)), CK(cudaFree(dst_d)), CK(cudaFree(crc_d)), CK(cudaFree(clk_d)),
        CK(cudaFree(tab_d));
  }
  delete tab;
  if (failures) printf("\nFAIL: %d variant runs wrong\n", failures);
  return failures ? 1 : 0;
}
