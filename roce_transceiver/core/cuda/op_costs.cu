// The GPU's cost of each piece of the engine (rt/bench/op_costs.h).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

#include "rt/bench/op_costs.h"
#include "rt/engine/engine.h"
#include "rt/protocol/icrc_warp.cuh"
#include "rt/protocol/icrc_words.h"

namespace rt::bench {
namespace {

constexpr int kMaxRepeats = 64;
constexpr uint32_t kSlot = 2048;
constexpr uint32_t kRxLog2 = 8;   // 256 requests: three runs of engine_step
constexpr uint32_t kTxLog2 = 9;   // a reply and, for RC, an ACK per request
constexpr uint32_t kAuxLog2 = 4;  // host_tx and completions, unused here

enum Op : int {
  kClockPair,
  kDecode,
  kIcrcThread,
  kIcrcWarp,
  kEncode,
  kEcho,
  kNow,
  kReleaseGpu,
  kReleaseSysDevice,
  kReleaseSysPinned,
  kAcquireGpu,
  kAcquireSysPinned,
  kCopyWidePinned,
  kCrcGlobalTables,
  kCrcSharedTables,
  kMaskedPrefix,
  kCopyBytes,
  kEngineStepGeneral,
  kEngineStep,
  kEngineStepStaged,
  kArrive,
  kPredicted,
  kIcrcTeam,
  kTemplate,
  kRunHandler,
  kPatchReply,
  kIcrcTeam2,
  kCopyOutTeam,
  kSubmitCounted,
  kCountOne,
  kIcrcWords2,
  // One express() step in place, between its own marks (express.h's ExpressPiece).
  kInPlaceFirst,
  kInPlaceWhole = kInPlaceFirst + engine_detail::kExpressPieces,
  kNumOps
};

const char* const kOpNames[kNumOps] = {
    "clock64 pair (overhead)",
    "decode",
    "icrc_ok, one thread",
    "icrc, one warp",
    "encode reply, one thread",
    "echo handler",
    "now_ns (globaltimer)",
    "store_release gpu scope, device memory",
    "store_release sys scope, device memory",
    "store_release sys scope, pinned memory",
    "load_acquire gpu scope, device memory",
    "load_acquire sys scope, pinned memory",
    "copy_wide 128 B to pinned memory",
    "crc32 of 80 B in shared memory, tables in global memory",
    "crc32 of 80 B in shared memory, tables in shared memory",
    "icrc masked prefix, built in local memory",
    "byte loop copy of 32 B, shared to shared",
    "engine_step, general path (express off), staged",
    "engine_step, express, frame in a device-memory slot",
    "engine_step, express, frame staged in shared memory",
    "express: arrive (descriptor + frame, one trip), warp",
    "express: header compare (predicted), warp",
    "express: icrc_team, warp",
    "express: reply template to staging, warp",
    "express: run_handler (reserve, echo), warp",
    "express: patch_reply, a word a lane, warp",
    "express: request + reply ICRCs together (icrc_team2), warp",
    "express: reply to the tx slot, warp",
    "express: submit_counted (doorbell), lane 0",
    "express: one count(), lane 0",
    "express: request + reply ICRCs, a word a lane (icrc_words2), warp",
    "express step in place: header, PSN, lengths, request ICRC",
    "express step in place: handler (an echo read in place)",
    "express step in place: reply (and ACK) loaded and patched a word a lane",
    "express step in place: the reply's ICRC (and the ACK's) from registers",
    "express step in place: reply (and ACK) stored to the tx slots",
    "express step in place: doorbell",
    "express step in place: counters, completion, PSNs",
    "express step in place: whole, arrive excluded",
};
static_assert(sizeof(kOpNames) / sizeof(kOpNames[0]) == kNumOps, "a name an op");

void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) {
    cudaGetLastError();
    throw std::runtime_error(std::string("device_op_costs: ") + what + ": " +
                             cudaGetErrorString(err));
  }
}

__device__ inline uint64_t cycles() { return sm_cycles(); }

// express()'s marks as SM cycles, by lane 0 once the warp has converged.
struct ClockMarks {
  uint64_t* at;  // engine_detail::kExpressPieces stamps
  __device__ void mark(uint32_t k) const {
    __syncwarp();
    if ((threadIdx.x & 31) == 0) at[k] = cycles();
  }
};

__global__ void op_costs_kernel(EngineDesc d, const uint8_t* frame, uint32_t len, int repeats,
                                uint32_t* dev_word, uint32_t* pinned_word, uint8_t* pinned_buf,
                                uint64_t* out, uint64_t* span) {
  extern __shared__ __align__(16) uint8_t dynamic_smem[];
  crc32_tables_to_shared();
  uint8_t* smem = icrc_word_tables_to_shared(dynamic_smem);
  uint8_t* f_in = smem;
  uint8_t* f_out = smem + kSlot;
  const uint32_t lane = threadIdx.x;
  for (uint32_t i = lane; i < len; i += 32) f_in[i] = frame[i];
  __syncwarp();
  const DecodeResult r0 = decode(ByteSpan(f_in, len));
  uint64_t sink = 0;
  const uint32_t payload_at = r0.frame.payload;
  const uint32_t payload_len = r0.frame.payload_len;

  // Two passes: the first warms caches and instruction fetch, the second is kept.
  for (int pass = 0; pass < 2; ++pass) {
    for (int rep = 0; rep < repeats; ++rep) {
      for (int op = kClockPair; op <= kCopyBytes; ++op) {
        __syncwarp();
        const uint64_t t0 = cycles();
        if (op == kIcrcWarp) {
          sink += icrc_compute_warp(r0.frame, lane);
        } else if (lane == 0) {
          switch (op) {
            case kDecode: sink += decode(ByteSpan(f_in, len)).frame.payload; break;
            case kIcrcThread: sink += icrc_ok(r0.frame); break;
            case kEncode: {
              FrameSpec spec = d.reply_spec;
              spec.psn = uint32_t(rep);
              sink +=
                  encode(spec, ByteSpan(f_in + payload_at, payload_len), MutByteSpan(f_out, kSlot))
                      .len;
              break;
            }
            case kEcho: {
              const Message m{f_in + payload_at, payload_len, 0, false, 0x04};
              sink += uint32_t(handle(d.handler, m, f_out + 64, kSlot - 64));
              break;
            }
            case kNow: sink += now_ns(); break;
            case kReleaseGpu: store_release<Scope::kDevice>(dev_word, uint32_t(rep)); break;
            case kReleaseSysDevice: store_release<Scope::kSystem>(dev_word, uint32_t(rep)); break;
            case kReleaseSysPinned:
              store_release<Scope::kSystem>(pinned_word, uint32_t(rep));
              break;
            case kAcquireGpu: sink += load_acquire<Scope::kDevice>(dev_word); break;
            case kAcquireSysPinned: sink += load_acquire<Scope::kSystem>(pinned_word); break;
            case kCopyWidePinned: copy_wide(pinned_buf, f_in, 128); break;
            case kCrcGlobalTables:
              sink += crc32_update_with(detail::kCrc32DeviceTables, 0, f_in, 80);
              break;
            case kCrcSharedTables: sink += crc32_update(0, f_in, 80); break;
            case kMaskedPrefix: {
              uint8_t prefix[kIcrcPrefixMax];
              sink += icrc_masked_prefix(r0.frame, prefix);
              sink += prefix[uint32_t(rep) % 40];
              break;
            }
            case kCopyBytes:
              for (uint32_t i = 0; i < 32; ++i) f_out[i + 6] = f_in[i + 54];
              sink += f_out[uint32_t(rep) % 32];
              break;
            default: break;
          }
        }
        __syncwarp();
        const uint64_t t1 = cycles();
        if (lane == 0 && pass == 1) out[op * kMaxRepeats + rep] = t1 - t0;
      }
    }
  }

  // Whole engine steps by the warp, one request each: `repeats` with the
  // express path off (frames staged), then `repeats` on the express path
  // straight from the device-memory slots, then `repeats` staged. The first
  // general-path request teaches the express path its header.
  __shared__ EngineState st;
  if (lane == 0) engine_init(d, &st);
  __syncwarp();
  const WarpTeam team;
  EngineDesc general = d;
  general.express = false;
  Staging stg{f_in, f_out};
  for (int rep = 0; rep < 3 * repeats; ++rep) {
    const int op = kEngineStepGeneral + rep / repeats;
    __syncwarp();
    const uint64_t t0 = cycles();
    if (op == kEngineStepGeneral)
      sink += engine_step<Scope::kDevice>(team, general, st, &stg, 1);
    else
      sink += engine_step<Scope::kDevice>(team, d, st, op == kEngineStepStaged ? &stg : nullptr, 1);
    __syncwarp();
    const uint64_t t1 = cycles();
    if (lane == 0) out[op * kMaxRepeats + rep % repeats] = t1 - t0;
  }

  // The express path's pieces, one at a time, on the next request (whose
  // header the steps above taught the prediction).
  for (int rep = 0; rep < repeats; ++rep) {
    uint64_t t[kCountOne - kArrive + 2];
    __syncwarp();
    t[0] = cycles();
    const engine_detail::Arrival a = engine_detail::arrive<Scope::kDevice>(team, d, st, &stg);
    __syncwarp();
    t[1] = cycles();
    ExpressRequest req{};
    const bool hit = a.frame && predicted(team, st.pred.expect, st.pred.care, a.frame, a.len,
                                          st.expected_psn, false, &req);
    __syncwarp();
    t[2] = cycles();
    sink += hit ? icrc_team(team, a.frame, req.layout) : 0;
    __syncwarp();
    t[3] = cycles();
    copy_wide_team(team, f_out, st.pred.reply.bytes, st.pred.reply.len);
    __syncwarp();
    t[4] = cycles();
    const Message m{hit ? a.frame + req.payload : f_in, req.payload_len, 0, false, 0x04};
    const engine_detail::HandlerReply r =
        engine_detail::run_handler<Scope::kDevice>(d, st, &stg, m, st.pred.reply.len, team);
    __syncwarp();
    t[5] = cycles();
    uint32_t len = 0;
    if (r.frame && r.n >= 0) {
      const uint32_t head = st.pred.reply.len;
      WordFrame<WarpTeam> wf;
      wf.load(team, st.pred.reply.bytes, head, r.frame, head + uint32_t(r.n));
      len = patch_reply(team, st.pred, wf, uint32_t(r.n), st.send_psn);
      wf.store(team, r.frame, len < kWordFrameBytes ? len : kWordFrameBytes);
    }
    __syncwarp();
    t[6] = cycles();
    if (hit && len) {
      IcrcLayout l = st.pred.reply.layout;
      l.end = len - kIcrcBytes;
      l.masks = st.pred.reply.icrc_masks;
      uint32_t rx_icrc = 0, tx_icrc = 0;
      icrc_team2(team, a.frame, req.layout, f_out, l, &rx_icrc, &tx_icrc);
      sink += rx_icrc + tx_icrc;
    }
    __syncwarp();
    t[7] = cycles();
    if (hit && len) {
      IcrcLayout l = st.pred.reply.layout;
      l.end = len - kIcrcBytes;
      l.masks = st.pred.reply.icrc_masks;
      uint32_t rx_icrc = 0, tx_icrc = 0;
      __syncwarp();
      const uint64_t w0 = cycles();
      if (icrc_words_fit(req.layout) && icrc_words_fit(l))
        icrc_words2(team, a.frame, req.layout, f_out, l, &rx_icrc, &tx_icrc);
      __syncwarp();
      const uint64_t w1 = cycles();
      sink += rx_icrc + tx_icrc;
      if (lane == 0) out[kIcrcWords2 * kMaxRepeats + rep] = w1 - w0;
    }
    __syncwarp();
    t[7] = cycles();
    copy_wide_team(team, d.tx.slot(st.tx_pi), f_out, len);
    __syncwarp();
    t[8] = cycles();
    if (lane == 0 && len) engine_detail::submit_counted<Scope::kDevice>(d, st, len);
    __syncwarp();
    t[9] = cycles();
    if (lane == 0) count(st.tally, Counter::kReplies);
    __syncwarp();
    t[10] = cycles();
    if (lane == 0)
      for (int op = kArrive; op <= kCountOne; ++op)
        out[op * kMaxRepeats + rep] = t[op - kArrive + 1] - t[op - kArrive];
  }

  // Whole express steps again, each with its own marks between the pieces, on
  // the requests after those the steps above took (arrive not timed).
  __shared__ uint64_t marks[engine_detail::kExpressPieces];
  for (int rep = 0; rep < repeats; ++rep) {
    const engine_detail::Arrival a = engine_detail::arrive<Scope::kDevice>(team, d, st, &stg);
    if (lane < engine_detail::kExpressPieces) marks[lane] = 0;
    __syncwarp();
    const uint64_t t0 = cycles();
    const bool took =
        a.frame && engine_detail::express<Scope::kDevice>(team, d, st, &stg, a, ClockMarks{marks});
    __syncwarp();
    const uint64_t t1 = cycles();
    if (lane == 0) {
      uint64_t at = t0;
      for (uint32_t k = 0; k < engine_detail::kExpressPieces; ++k) {
        const uint64_t m = took && marks[k] ? marks[k] : at;
        out[(kInPlaceFirst + k) * kMaxRepeats + rep] = m - at;
        at = m;
      }
      out[kInPlaceWhole * kMaxRepeats + rep] = took ? t1 - t0 : 0;
      ++st.rx_ci;
    }
    __syncwarp();
  }

  // The SM clock against %globaltimer over about a millisecond.
  if (lane == 0) {
    const uint64_t c0 = cycles(), g0 = now_ns();
    while (now_ns() - g0 < 1000000) {
    }
    span[0] = cycles() - c0;
    span[1] = now_ns() - g0;
    span[2] = sink;
    span[3] = st.tally.v[uint32_t(Counter::kExpress)];
  }
}

// Rings carved out of one device allocation.
struct Carver {
  uint8_t* base;
  size_t used = 0;
  uint8_t* take(size_t n) {
    uint8_t* p = base + used;
    used += (n + 255) & ~size_t(255);
    return p;
  }
  template <typename T>
  T* take_as(size_t n) {
    return reinterpret_cast<T*>(take(n * sizeof(T)));
  }
  RxRing rx_ring(uint32_t log2_depth) {
    uint8_t* slots = take(size_t(kSlot) << log2_depth);
    RxDesc* descs = take_as<RxDesc>(size_t(1) << log2_depth);
    return RxRing{slots, descs, take_as<uint32_t>(1), log2_depth, kSlot};
  }
  TxRing tx_ring(uint32_t log2_depth) {
    uint8_t* slots = take(size_t(kSlot) << log2_depth);
    TxDesc* descs = take_as<TxDesc>(size_t(1) << log2_depth);
    uint32_t* producer = take_as<uint32_t>(1);
    return TxRing{slots, descs, producer, take_as<uint32_t>(1), log2_depth, kSlot};
  }
};

constexpr size_t ring_bytes(uint32_t log2_depth) {
  return (size_t(kSlot) + sizeof(RxDesc)) << log2_depth;
}

}  // namespace

OpCosts device_op_costs(const std::vector<uint8_t>& request, int repeats) {
  if (repeats < 1 || repeats > kMaxRepeats)
    throw std::invalid_argument("device_op_costs: repeats=" + std::to_string(repeats) +
                                ": must be 1 to " + std::to_string(kMaxRepeats));
  if (request.size() > kSlot)
    throw std::invalid_argument("device_op_costs: a " + std::to_string(request.size()) +
                                "-byte frame is over the " + std::to_string(kSlot) + "-byte slot");
  const DecodeResult r = decode(ByteSpan(request.data(), uint32_t(request.size())));
  if (!r.ok()) throw std::invalid_argument("device_op_costs: the request frame does not decode");
  const FrameView& f = r.frame;
  const uint32_t psn0 = f.bth_hdr().psn.get();

  EngineDesc d{};
  d.qp.qpn = f.bth_hdr().dest_qp.get();
  d.qp.peer_qpn = 0x11;
  d.qp.transport = f.op.transport;
  d.qp.pkey = 0xFFFF;
  d.qp.rx_psn = psn0;
  d.reply_spec = spec_from_frame(f);
  d.handler.kind = HandlerKind::kEcho;
  d.batch = 16;
  d.settle_passes = 8;  // the schema's default
  d.check_icrc = true;
  d.express = true;

  // The rx ring's image: the request again and again with consecutive PSNs.
  const uint32_t rx_depth = 1u << kRxLog2;
  std::vector<uint8_t> slots(size_t(kSlot) * rx_depth);
  std::vector<RxDesc> descs(rx_depth);
  for (uint32_t i = 0; i < rx_depth; ++i) {
    uint8_t* s = slots.data() + size_t(i) * kSlot;
    std::memcpy(s, request.data(), request.size());
    const uint32_t psn = psn_add(psn0, i);
    uint8_t* p = s + f.bth + 9;  // BTH bytes 9..11: the PSN
    p[0] = uint8_t(psn >> 16);
    p[1] = uint8_t(psn >> 8);
    p[2] = uint8_t(psn);
    const DecodeResult ri = decode(ByteSpan(s, uint32_t(request.size())));
    store_le32(s + ri.frame.icrc, icrc_compute(ri.frame));
    descs[i] = RxDesc{uint32_t(request.size()), 1u, 0};
  }

  uint8_t* arena = nullptr;
  const size_t arena_bytes = ring_bytes(kRxLog2) + ring_bytes(kTxLog2) + 2 * ring_bytes(kAuxLog2) +
                             (1 << 16) + 8192 + request.size();
  check(cudaMalloc(&arena, arena_bytes), "cudaMalloc");
  uint8_t* pinned = nullptr;
  cudaError_t err = cudaHostAlloc(&pinned, 4096, cudaHostAllocMapped);
  if (err != cudaSuccess) {
    cudaFree(arena);
    check(err, "cudaHostAlloc");
  }
  OpCosts costs;
  try {
    check(cudaMemset(arena, 0, arena_bytes), "cudaMemset");
    Carver c{arena};
    d.rx = c.rx_ring(kRxLog2);
    d.tx = c.tx_ring(kTxLog2);
    d.host_tx = c.rx_ring(kAuxLog2);
    d.completions = c.tx_ring(kAuxLog2);
    d.counters = reinterpret_cast<Counters*>(c.take(sizeof(Counters)));
    d.msg_buf = c.take(4096);
    d.msg_buf_bytes = 4096;
    d.reply_scratch = c.take(kSlot);
    d.reply_scratch_bytes = kSlot;
    uint32_t* dev_word = reinterpret_cast<uint32_t*>(c.take(4));
    uint64_t* out = reinterpret_cast<uint64_t*>(c.take(sizeof(uint64_t) * kNumOps * kMaxRepeats));
    uint64_t* span = reinterpret_cast<uint64_t*>(c.take(4 * sizeof(uint64_t)));
    uint8_t* frame = c.take(request.size());
    if (c.used > arena_bytes) throw std::logic_error("device_op_costs: arena too small");
    check(cudaMemcpy(d.rx.slots, slots.data(), slots.size(), cudaMemcpyHostToDevice), "rx slots");
    check(
        cudaMemcpy(d.rx.descs, descs.data(), descs.size() * sizeof(RxDesc), cudaMemcpyHostToDevice),
        "rx descriptors");
    check(cudaMemcpy(frame, request.data(), request.size(), cudaMemcpyHostToDevice), "frame");
    uint8_t* pinned_dev = nullptr;
    check(cudaHostGetDevicePointer(reinterpret_cast<void**>(&pinned_dev), pinned, 0),
          "cudaHostGetDevicePointer");

    const size_t smem = kIcrcWordSmemBytes + 2 * kSlot;  // with the static part, over 48 KiB
    check(cudaFuncSetAttribute(op_costs_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               int(smem)),
          "cudaFuncSetAttribute(shared memory)");
    op_costs_kernel<<<1, 32, smem>>>(d, frame, uint32_t(request.size()), repeats, dev_word,
                                     reinterpret_cast<uint32_t*>(pinned_dev), pinned_dev + 256, out,
                                     span);
    check(cudaGetLastError(), "launch");
    check(cudaDeviceSynchronize(), "kernel");
    std::vector<uint64_t> samples(size_t(kNumOps) * kMaxRepeats);
    uint64_t span_host[4];
    check(
        cudaMemcpy(samples.data(), out, samples.size() * sizeof(uint64_t), cudaMemcpyDeviceToHost),
        "results");
    check(cudaMemcpy(span_host, span, sizeof span_host, cudaMemcpyDeviceToHost), "clock span");
    costs.sm_ghz = span_host[1] ? double(span_host[0]) / double(span_host[1]) : 0.0;
    costs.express_taken = span_host[3];
    for (int op = 0; op < kNumOps; ++op) {
      std::vector<uint64_t> v(samples.begin() + op * kMaxRepeats,
                              samples.begin() + op * kMaxRepeats + repeats);
      std::sort(v.begin(), v.end());
      costs.ops.push_back(OpCost{kOpNames[op], double(v.front()), double(v[v.size() / 2])});
    }
  } catch (...) {
    cudaFree(arena);
    cudaFreeHost(pinned);
    throw;
  }
  cudaFree(arena);
  cudaFreeHost(pinned);
  return costs;
}

}  // namespace rt::bench
