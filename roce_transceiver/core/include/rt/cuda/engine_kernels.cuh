// The persistent engine's kernels, device code only: one epoch of each queue's
// loop (docs/gpu_sharing.md), by one warp or by a crew of warps.
//
// A unit header: included by exactly one translation unit of a module, where
// the kernels below are defined with C linkage, so that their names are the
// same in the built-in module (cuda/engine_kernel.cu, the built-in handlers) and
// in a user handler's (cuda/engine_linkable.cu, linked with the handler at start:
// custom_handler.py), and the host launches either module's by the names in
// kEngineKernelNames.
#pragma once

#include "rt/engine/stream_batch.h"
#include "rt/protocol/icrc_words.h"
#include "rt/queues/steering.h"

namespace rt::cuda {

// A user's module's one-warp kernels give its handler the block's second warp
// (engine_linkable.cu defines RT_HANDLER_WARP for them; handler_warp.cuh).
#if defined(RT_HANDLER_WARP)
constexpr bool kHandlerWarp = true;
#else
constexpr bool kHandlerWarp = false;
#endif

// How often the loop reads its stop flag and publishes a heartbeat: reading
// every pass would put a memory round trip on the critical path.
constexpr uint32_t kControlEvery = 256;
// How often the leader reads the clock for the end of its epoch (a register read).
constexpr uint32_t kClockEvery = 16;

// A crew's profile: SM cycles in classify, commit, execute, publish; batches and their
// frames; team 0's classify pieces (stage, decode, ICRC, verdict) and the frames it took.
struct CrewProfile {
  uint64_t batch_cycles[4];
  uint64_t batches;
  uint64_t batch_frames;
  uint64_t classify_cycles[5];
  uint64_t commit_cycles[3];  // the frames stream's commit: runs, frame ends, decisions
};

// Pinned, mapped: the host's stop request and what the epochs cost, for the host.
struct KernelControl {
  uint32_t stop;  // written by the host (a plain store, no CUDA call), read by the kernel
  uint32_t pad;
  // Block 0's epochs (every block's begin and end together: one launch holds them all).
  uint64_t epochs;  // written by the kernel at each epoch's start
  uint64_t gap_total_ns;
  uint64_t gap_max_ns;
  uint64_t warmup_total_ns;  // start to the loop's first pass: CRC tables, state in
  uint64_t warmup_max_ns;
  uint64_t first_pass_total_ns;  // the first pass of the loop (cold caches)
  uint64_t first_pass_max_ns;
  CrewProfile crew[kMaxQueues];  // a queue's, each written by its own block
};

// Device memory, one a block: what one epoch leaves the next, besides the engine's state.
struct EpochRecord {
  uint64_t passes;       // loop passes so far (block 0's: the heartbeat)
  uint64_t last_end_ns;  // %globaltimer at the last epoch's end
  uint64_t epochs, gap_total_ns, gap_max_ns;
  uint64_t warmup_total_ns, warmup_max_ns, first_pass_total_ns, first_pass_max_ns;
  CrewProfile crew;
};

// Adds `ns` to a total and a maximum kept in device memory, and mirrors both to the host's.
__device__ inline void tally_ns(uint64_t ns, uint64_t& total, uint64_t& max, uint64_t* host_total,
                                uint64_t* host_max) {
  total += ns;
  if (ns > max) max = ns;
  store_relaxed<Scope::kSystem>(host_total, total);
  store_relaxed<Scope::kSystem>(host_max, max);
}

// A struct between memories, a word a lane, every lane's loads in flight
// before its stores (one round trip, not one per word).
template <class T>
__device__ void copy_words(const WarpTeam& team, T* dst, const T* src) {
  static_assert(sizeof(T) % 8 == 0 && alignof(T) >= 8, "copied in 8-byte words");
  constexpr uint32_t kWords = sizeof(T) / 8;
  constexpr uint32_t kPerLane = (kWords + 31) / 32;
  auto* d = reinterpret_cast<uint64_t*>(dst);
  const auto* s = reinterpret_cast<const uint64_t*>(src);
  uint64_t v[kPerLane];
#pragma unroll
  for (uint32_t k = 0; k < kPerLane; ++k)
    if (team.lane() + 32 * k < kWords) v[k] = s[team.lane() + 32 * k];
#pragma unroll
  for (uint32_t k = 0; k < kPerLane; ++k)
    if (team.lane() + 32 * k < kWords) d[team.lane() + 32 * k] = v[k];
  team.sync();
}

// One epoch of one queue's loop (the block's), by one warp (kCrew false:
// engine_step, the team's express path for requests) or by the block's warps
// as a crew (kCrew true: crew_step, batches of frames classified and placed by
// every warp; batch.h). Warp 0 keeps the engine's state in shared memory, where
// every thread reads it; the block's thread 0 is the leader that keeps the
// books. Block 0's leader also keeps the epochs' and the heartbeat's. kStream: the
// crew runs a frames queue's stream step (stream_batch.h) and nothing else, in a kernel
// of its own: inside the one that also holds crew_step, its pass spilled (1 KiB a thread).
// The crew kernel still takes either step (crew_pass): a user's frames statistic runs in
// it, from NVRTC's module, which has no stream kernel.
// Every thread of the engine waits for the others, its memory ordered with theirs: the block's
// (a crew), or warp 0's (one warp, which in a user's module has the handler's warp beside it).
template <bool kCrew>
__device__ inline void engine_sync() {
  if constexpr (kCrew)
    __syncthreads();
  else
    __syncwarp();
}

// `began`: the epoch's start. Every thread of the engine runs it: the block's (a crew), or warp 0
// (one warp: a user's module gives its handler the block's second warp, handler_warp.cuh).
template <Scope S, bool kCrew, bool kStream = false>
__device__ void run_epoch(const EngineDesc& d, Staging& stg, EngineState* state, KernelControl* ctl,
                          EpochRecord* rec, uint64_t* heartbeat, uint64_t began, uint64_t epoch_ns,
                          uint32_t depth) {
  const bool books = blockIdx.x == 0;
  // Dynamic shared memory (stg): warp 0's staging (a frame in, a reply out),
  // then the crew's batch staging, depth frames.
  __shared__ EngineState st;
  __shared__ uint32_t quit;
  // The CRC tables (block-wide): loaded by the caller where the block has warps that do not run
  // the engine (the handler's) or that start it together (a crew); here for one warp alone,
  // where ptxas keeps its loop in 239 registers rather than 250 (no spills either way).
  if constexpr (!kCrew && !kHandlerWarp) crc32_tables_to_shared();
  const WarpTeam team;
  const BlockCrew crew;
  const bool warp0 = crew.team_index() == 0;
  if (warp0) copy_words(team, &st, state);
  uint64_t passes = 0;  // the leader's
  if (crew.leader()) {
    passes = rec->passes;
    if (books && rec->epochs)
      tally_ns(began - rec->last_end_ns, rec->gap_total_ns, rec->gap_max_ns, &ctl->gap_total_ns,
               &ctl->gap_max_ns);
    ++rec->epochs;
    if (books) store_relaxed<Scope::kSystem>(&ctl->epochs, rec->epochs);
    quit = 0;
  }
  Batch* batch = nullptr;
  if constexpr (kCrew) {
    __shared__ Batch b;
    batch = &b;
    engine_sync<kCrew>();  // the state is in
    // After warp 0's staging: the crew's batch staging, or a frames queue's packets.
    const bool frames = d.handler.kind == HandlerKind::kFrames;
    uint8_t* after = stg.tx + d.tx.slot_bytes;
    if (crew.leader())
      batch_init(b, depth, frames ? nullptr : after, st.rx_ci,
                 frames ? reinterpret_cast<StreamPacket*>(after) : nullptr);
  }
  engine_sync<kCrew>();
  const uint64_t until = epoch_ns ? began + epoch_ns : ~uint64_t(0);
  uint64_t warm = 0;  // the leader's clock at the first pass's start
  if (crew.leader() && books) {
    warm = globaltimer_ns();
    tally_ns(warm - began, rec->warmup_total_ns, rec->warmup_max_ns, &ctl->warmup_total_ns,
             &ctl->warmup_max_ns);
  }
  for (bool first = true;; first = false) {
    if constexpr (kStream)
      stream_step<S>(crew, d, st, *batch, &stg);
    else if constexpr (kCrew)
      crew_pass<S>(crew, d, st, *batch, &stg);  // a user's frames statistic: NVRTC's module
    else
      engine_step<S>(team, d, st, &stg, d.batch);  // queues.batch frames a pass at most
    if (crew.leader()) {
      ++passes;
      if (first && books)
        tally_ns(globaltimer_ns() - warm, rec->first_pass_total_ns, rec->first_pass_max_ns,
                 &ctl->first_pass_total_ns, &ctl->first_pass_max_ns);
      if (passes % kControlEvery == 0) {
        if (books) store_relaxed<Scope::kSystem>(heartbeat, passes);
        if (load_acquire<Scope::kSystem>(&ctl->stop)) quit = 1;
      }
      if (passes % kClockEvery == 0 && globaltimer_ns() >= until) quit = 1;
    }
    engine_sync<kCrew>();  // the leader's verdict, for every thread (the next one comes after
                           // the next pass's own synchronisation)
    if (quit) break;
  }
  if (crew.leader()) {
    // Nothing waits on us across the gap: slots we hold go back, counters out
    // (stats() after stop() are exact).
    if (st.rx_released != st.rx_ci) {
      rx_release<S>(d.rx, st.rx_ci);
      st.rx_released = st.rx_ci;
    }
    publish<Scope::kSystem>(st.tally, d.counters);
    publish_completions(d, st);  // the host sees every record before the gap
    if (books) store_relaxed<Scope::kSystem>(heartbeat, passes);
    rec->passes = passes;
    rec->last_end_ns = globaltimer_ns();
    if constexpr (kCrew) {
      CrewProfile& p = rec->crew;
      CrewProfile* host = &ctl->crew[blockIdx.x];
      for (uint32_t k = 0; k < 4; ++k) {
        p.batch_cycles[k] += batch->cycles[k];
        store_relaxed<Scope::kSystem>(&host->batch_cycles[k], p.batch_cycles[k]);
      }
      for (uint32_t k = 0; k < 5; ++k) {
        p.classify_cycles[k] += batch->classify_cycles[k];
        store_relaxed<Scope::kSystem>(&host->classify_cycles[k], p.classify_cycles[k]);
      }
      for (uint32_t k = 0; k < 3; ++k) {
        p.commit_cycles[k] += batch->commit_cycles[k];
        store_relaxed<Scope::kSystem>(&host->commit_cycles[k], p.commit_cycles[k]);
      }
      p.batches += batch->batches;
      p.batch_frames += batch->batch_frames;
      store_relaxed<Scope::kSystem>(&host->batches, p.batches);
      store_relaxed<Scope::kSystem>(&host->batch_frames, p.batch_frames);
    }
  }
  engine_sync<kCrew>();
  if (warp0) copy_words(team, state, &st);
}

// A block per queue: block q runs queue q's engine (descs[q], states[q]), its
// own rings, state and counters; the blocks share nothing but the stop flag.
// The descriptor and the staging pointers go to shared memory: every function
// of the engine takes them by reference, and a parameter whose address is
// taken is copied to each thread's local memory, where 512 threads' copies
// fall out of L1 (a crew's verdict and commit spent thousands of cycles there).
template <Scope S, bool kStream>
__device__ void run_crew(const EngineDesc* descs, EngineState* states, KernelControl* ctl,
                         EpochRecord* recs, uint64_t* heartbeat, uint64_t epoch_ns,
                         uint32_t depth) {
  extern __shared__ __align__(16) uint8_t dynamic_smem[];
  __shared__ EngineDesc d;
  __shared__ Staging stg;
  const uint32_t q = blockIdx.x;
  const uint64_t began = globaltimer_ns();
  uint8_t* staging = icrc_word_tables_to_shared(dynamic_smem);  // lone frames' express path
  crc32_tables_to_shared();
  if (threadIdx.x < 32) copy_words(WarpTeam{}, &d, &descs[q]);
  if (threadIdx.x == 0) stg = Staging{staging, staging + descs[q].rx.slot_bytes};
  __syncthreads();
  run_epoch<S, true, kStream>(d, stg, states + q, ctl, recs + q, heartbeat, began, epoch_ns, depth);
}

// One warp a queue's epoch: each thread keeps its own copy of the descriptor (in
// registers and L1), as a kernel parameter taken by reference would be.
template <Scope S>
__device__ void engine_epoch(const EngineDesc* descs, EngineState* states, KernelControl* ctl,
                             EpochRecord* recs, uint64_t* heartbeat, uint64_t epoch_ns) {
  extern __shared__ __align__(16) uint8_t dynamic_smem[];
  const uint32_t q = blockIdx.x;
  const uint64_t began = globaltimer_ns();
#if defined(RT_HANDLER_WARP)
  // Launched with the handler's warp (kHandlerWarpThreads): without it, the first call would
  // wait for it forever.
  if (blockDim.x != kHandlerWarpThreads) __trap();
  handler_warp_open();
#endif
  uint8_t* staging = icrc_word_tables_to_shared(dynamic_smem);  // the express path's ICRCs
#if defined(RT_HANDLER_WARP)
  crc32_tables_to_shared();  // block-wide: both warps, before they part
  if (threadIdx.x >= 32) {
    handler_warp_serve();
    return;
  }
#endif
  const EngineDesc d = descs[q];
  Staging stg{staging, staging + d.rx.slot_bytes};
  run_epoch<S, false>(d, stg, states + q, ctl, recs + q, heartbeat, began, epoch_ns, 1);
#if defined(RT_HANDLER_WARP)
  handler_warp_close();
#endif
}

#if RT_HOST_FUNCTIONS
// The names of the kernels below, for a module loaded by name: [crew][system scope]; and
// their bits in RT_ENGINE_KERNEL_SET (custom_handler.py's ENGINE_KERNELS has both). The
// host's: NVRTC's module has no use for them.
constexpr const char* kEngineKernelNames[2][2] = {
    {"rt_engine_kernel_device", "rt_engine_kernel_system"},
    {"rt_crew_kernel_device", "rt_crew_kernel_system"}};
constexpr uint32_t kEngineKernelBits[2][2] = {{1, 2}, {4, 8}};
// The frames stream's kernels (bits 16 and 32): built in only (a user handler is never the
// frames handler, so NVRTC's modules leave them out).
#endif

}  // namespace rt::cuda

// The kernels, by wire scope (kDevice: a GPU far end, rings in device memory; kSystem: rings
// in pinned host memory). Their names, for a module loaded by name: kEngineKernelNames.
#define RT_ENGINE_KERNEL_PARAMS                                                             \
  const ::rt::EngineDesc *descs, ::rt::EngineState *states, ::rt::cuda::KernelControl *ctl, \
      ::rt::cuda::EpochRecord *recs, uint64_t *heartbeat, uint64_t epoch_ns

// Which of them a module has: RT_ENGINE_KERNEL_SET, a mask of kEngineKernelBits (all of them
// unless set). A user handler's module has the one its transceiver launches: each kernel is
// most of NVRTC's time.
#if !defined(RT_ENGINE_KERNEL_SET)
#define RT_ENGINE_KERNEL_SET 63
#endif

// One warp a queue: each thread keeps its own copy of the descriptor (in registers and
// L1), as a kernel parameter taken by reference would be.
#if RT_ENGINE_KERNEL_SET & 1
extern "C" __global__ void rt_engine_kernel_device(RT_ENGINE_KERNEL_PARAMS) {
  ::rt::cuda::engine_epoch<::rt::Scope::kDevice>(descs, states, ctl, recs, heartbeat, epoch_ns);
}
#endif
#if RT_ENGINE_KERNEL_SET & 2
extern "C" __global__ void rt_engine_kernel_system(RT_ENGINE_KERNEL_PARAMS) {
  ::rt::cuda::engine_epoch<::rt::Scope::kSystem>(descs, states, ctl, recs, heartbeat, epoch_ns);
}
#endif

// The crew's registers are bounded so that kMaxCrewWarps warps fit one SM (one block a
// SM: 128 registers a thread).
#if RT_ENGINE_KERNEL_SET & 4
extern "C" __global__ void __launch_bounds__(::rt::kMaxCrewWarps * 32, 1)
    rt_crew_kernel_device(RT_ENGINE_KERNEL_PARAMS, uint32_t depth) {
  ::rt::cuda::run_crew<::rt::Scope::kDevice, false>(descs, states, ctl, recs, heartbeat, epoch_ns,
                                                    depth);
}
#endif
#if RT_ENGINE_KERNEL_SET & 8
extern "C" __global__ void __launch_bounds__(::rt::kMaxCrewWarps * 32, 1)
    rt_crew_kernel_system(RT_ENGINE_KERNEL_PARAMS, uint32_t depth) {
  ::rt::cuda::run_crew<::rt::Scope::kSystem, false>(descs, states, ctl, recs, heartbeat, epoch_ns,
                                                    depth);
}
#endif

#if RT_ENGINE_KERNEL_SET & 16
extern "C" __global__ void __launch_bounds__(::rt::kMaxCrewWarps * 32, 1)
    rt_stream_kernel_device(RT_ENGINE_KERNEL_PARAMS, uint32_t depth) {
  ::rt::cuda::run_crew<::rt::Scope::kDevice, true>(descs, states, ctl, recs, heartbeat, epoch_ns,
                                                   depth);
}
#endif
#if RT_ENGINE_KERNEL_SET & 32
extern "C" __global__ void __launch_bounds__(::rt::kMaxCrewWarps * 32, 1)
    rt_stream_kernel_system(RT_ENGINE_KERNEL_PARAMS, uint32_t depth) {
  ::rt::cuda::run_crew<::rt::Scope::kSystem, true>(descs, states, ctl, recs, heartbeat, epoch_ns,
                                                   depth);
}
#endif

#undef RT_ENGINE_KERNEL_PARAMS
