// The CUDA executor: a persistent kernel runs the same engine_step() as the
// CPU thread, plus a far-end kernel for the GPU side of the loopback wire.
#include <cuda_runtime.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "rt/cuda/engine_launch.h"
#include "rt/engine/batch.h"
#include "rt/protocol/icrc_words.h"

namespace rt::cuda {
namespace {

void check_cuda(cudaError_t err, const char* what) {
  if (err != cudaSuccess) {
    cudaGetLastError();
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorName(err) + " (" +
                             cudaGetErrorString(err) + ")");
  }
}

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
__device__ void tally_ns(uint64_t ns, uint64_t& total, uint64_t& max, uint64_t* host_total,
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
// books. Block 0's leader also keeps the epochs' and the heartbeat's.
template <Scope S, bool kCrew>
__device__ void run_epoch(const EngineDesc& d, Staging& stg, EngineState* state, KernelControl* ctl,
                          EpochRecord* rec, uint64_t* heartbeat, uint64_t epoch_ns,
                          uint32_t depth) {
  const bool books = blockIdx.x == 0;
  // Dynamic shared memory (stg): warp 0's staging (a frame in, a reply out),
  // then the crew's batch staging, depth frames.
  __shared__ EngineState st;
  __shared__ uint32_t quit;
  const uint64_t began = globaltimer_ns();
  crc32_tables_to_shared();
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
    __syncthreads();  // the state is in
    if (crew.leader()) batch_init(b, depth, stg.rx + 2 * size_t(d.rx.slot_bytes), st.rx_ci);
  }
  __syncthreads();
  const uint64_t until = epoch_ns ? began + epoch_ns : ~uint64_t(0);
  uint64_t warm = 0;  // the leader's clock at the first pass's start
  if (crew.leader() && books) {
    warm = globaltimer_ns();
    tally_ns(warm - began, rec->warmup_total_ns, rec->warmup_max_ns, &ctl->warmup_total_ns,
             &ctl->warmup_max_ns);
  }
  for (bool first = true;; first = false) {
    if constexpr (kCrew)
      crew_step<S>(crew, d, st, *batch, &stg);
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
    __syncthreads();  // the leader's verdict, for every thread (the next one comes after
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
      p.batches += batch->batches;
      p.batch_frames += batch->batch_frames;
      store_relaxed<Scope::kSystem>(&host->batches, p.batches);
      store_relaxed<Scope::kSystem>(&host->batch_frames, p.batch_frames);
    }
  }
  __syncthreads();
  if (warp0) copy_words(team, state, &st);
}

// A block per queue: block q runs queue q's engine (descs[q], states[q]), its
// own rings, state and counters; the blocks share nothing but the stop flag.
// The descriptor and the staging pointers go to shared memory: every function
// of the engine takes them by reference, and a parameter whose address is
// taken is copied to each thread's local memory, where 512 threads' copies
// fall out of L1 (a crew's verdict and commit spent thousands of cycles there).
template <Scope S>
__device__ void run_crew(const EngineDesc* descs, EngineState* states, KernelControl* ctl,
                         EpochRecord* recs, uint64_t* heartbeat, uint64_t epoch_ns,
                         uint32_t depth) {
  extern __shared__ __align__(16) uint8_t dynamic_smem[];
  __shared__ EngineDesc d;
  __shared__ Staging stg;
  const uint32_t q = blockIdx.x;
  uint8_t* staging = icrc_word_tables_to_shared(dynamic_smem);  // lone frames' express path
  if (threadIdx.x < 32) copy_words(WarpTeam{}, &d, &descs[q]);
  if (threadIdx.x == 0) stg = Staging{staging, staging + descs[q].rx.slot_bytes};
  __syncthreads();
  run_epoch<S, true>(d, stg, states + q, ctl, recs + q, heartbeat, epoch_ns, depth);
}

// One warp a queue: each thread keeps its own copy of the descriptor (in registers and
// L1), as a kernel parameter taken by reference would be.
template <Scope S>
__global__ void engine_kernel(const EngineDesc* descs, EngineState* states, KernelControl* ctl,
                              EpochRecord* recs, uint64_t* heartbeat, uint64_t epoch_ns) {
  extern __shared__ __align__(16) uint8_t dynamic_smem[];
  const uint32_t q = blockIdx.x;
  const EngineDesc d = descs[q];
  uint8_t* staging = icrc_word_tables_to_shared(dynamic_smem);  // the express path's ICRCs
  Staging stg{staging, staging + d.rx.slot_bytes};
  run_epoch<S, false>(d, stg, states + q, ctl, recs + q, heartbeat, epoch_ns, 1);
}

// The crew's registers are bounded so that kMaxCrewWarps warps fit one SM (one block a
// SM: 128 registers a thread).
template <Scope S>
__global__ void __launch_bounds__(kMaxCrewWarps * 32, 1)
    crew_kernel(const EngineDesc* descs, EngineState* states, KernelControl* ctl, EpochRecord* recs,
                uint64_t* heartbeat, uint64_t epoch_ns, uint32_t depth) {
  run_crew<S>(descs, states, ctl, recs, heartbeat, epoch_ns, depth);
}

// A block a queue's far end: lane 0 of warp 0 sends, lane 0 of warp 1 receives, so
// building a request never waits for checking a reply (engine/far_end.h). Replies and the
// frames they are compared with are staged in shared memory.
constexpr uint32_t kFarEndThreads = 64;

template <Scope S>
__global__ void __launch_bounds__(kFarEndThreads, 1)
    far_end_kernel(const FarEndDesc* descs, const uint32_t* stop, uint32_t scratch_bytes) {
  extern __shared__ __align__(16) uint8_t staging[];
  __shared__ FarEndDesc d;
  __shared__ FarEndShared sh;
  __shared__ uint64_t start;
  crc32_tables_to_shared();
  if (threadIdx.x == 0) {
    d = descs[blockIdx.x];
    d.frame = staging;
    d.expect = staging + scratch_bytes / 2;
    sh = FarEndShared{};
    start = globaltimer_ns();
  }
  __syncthreads();
  if (threadIdx.x == 0 && !far_end_detail::far_end_begin(d)) start = 0;
  __syncthreads();
  if (start == 0) return;  // bad_config, written by far_end_begin
  if (threadIdx.x == 0) {
    d.result->start_ns = start;
    far_end_send<S>(d, sh, start, stop);
  } else if (threadIdx.x == 32) {
    far_end_receive<S>(d, sh, start, stop);
  }
}

// Launch `blocks` blocks of `threads` with `smem` bytes of dynamic shared memory,
// raising the kernel's limit first when a large slot size needs more than 48 KiB
// with the static shared memory.
template <typename... KArgs>
void allow_dynamic_smem(void (*kernel)(KArgs...), size_t smem) {
  // The 48 KiB limit counts the kernel's static shared memory (the CRC tables) too.
  cudaFuncAttributes attr;
  check_cuda(cudaFuncGetAttributes(&attr, kernel), "cudaFuncGetAttributes");
  if (smem + attr.sharedSizeBytes > 48 * 1024)
    check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)),
               "cudaFuncSetAttribute(shared memory)");
}

template <typename... KArgs, typename... Args>
void launch_with_smem(void (*kernel)(KArgs...), uint32_t blocks, uint32_t threads, size_t smem,
                      cudaStream_t stream, Args&&... args) {
  allow_dynamic_smem(kernel, smem);
  kernel<<<blocks, threads, smem, stream>>>(std::forward<Args>(args)...);
}

// Dynamic shared memory a crew kernel may have beside its static shared memory.
template <typename... KArgs>
size_t dynamic_smem_room(void (*kernel)(KArgs...)) {
  int device = 0, optin = 0;
  check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  check_cuda(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device),
             "cudaDeviceGetAttribute(shared memory)");
  cudaFuncAttributes attr;
  check_cuda(cudaFuncGetAttributes(&attr, kernel), "cudaFuncGetAttributes");
  return size_t(optin) > attr.sharedSizeBytes ? size_t(optin) - attr.sharedSizeBytes : 0;
}

}  // namespace

struct EngineKernel::Impl {
  cudaStream_t stream = nullptr;      // the engine's own non-blocking stream
  cudaStream_t far_stream = nullptr;  // the GPU far end's
  cudaStream_t control = nullptr;     // the far end's stop flag, while both others are busy
  KernelControl* ctl = nullptr;       // pinned, mapped: the host's view
  KernelControl* ctl_device = nullptr;
  EpochRecord* rec = nullptr;     // device memory, one a queue (kMaxQueues)
  EngineDesc* descs = nullptr;    // device memory, one a queue (kMaxQueues)
  uint32_t* far_stop = nullptr;   // device memory: polled by the GPU far end
  uint64_t* heartbeat = nullptr;  // pinned: read by the host
  std::thread relauncher;  // launches the epochs, waits for each: every CUDA call of the loop
  std::atomic<bool> stopping{false};  // stop() asked: launch no more
  std::atomic<bool> finished{false};  // the relauncher returned
  std::string error;                  // what ended the loop other than stop(); set before finished
  bool launched = false;
  bool stopped = false;
  uint32_t batch_depth = 1;      // frames a crew's batch holds (1: no crew)
  uint32_t blocks = 0;           // one a queue
  int device = 0;                // the GPU it runs on: the relauncher's current device
  std::function<void()> launch;  // one epoch, on `stream`
};

EngineKernel::EngineKernel() : impl_(std::make_unique<Impl>()) {
  // CUDA loads kernels lazily (CUDA_MODULE_LOADING=LAZY is the default): the
  // first launch of a kernel waits for the device to go idle. Load every kernel
  // launched beside the engine now, before the engine starts.
  cudaFuncAttributes attr;
  check_cuda(cudaFuncGetAttributes(&attr, engine_kernel<Scope::kDevice>), "load engine_kernel");
  check_cuda(cudaFuncGetAttributes(&attr, engine_kernel<Scope::kSystem>), "load engine_kernel");
  check_cuda(cudaFuncGetAttributes(&attr, crew_kernel<Scope::kDevice>), "load crew_kernel");
  check_cuda(cudaFuncGetAttributes(&attr, crew_kernel<Scope::kSystem>), "load crew_kernel");
  check_cuda(cudaFuncGetAttributes(&attr, far_end_kernel<Scope::kDevice>), "load far_end_kernel");
  check_cuda(cudaStreamCreateWithFlags(&impl_->stream, cudaStreamNonBlocking), "cudaStreamCreate");
  check_cuda(cudaStreamCreateWithFlags(&impl_->far_stream, cudaStreamNonBlocking),
             "cudaStreamCreate");
  check_cuda(cudaStreamCreateWithFlags(&impl_->control, cudaStreamNonBlocking), "cudaStreamCreate");
  check_cuda(cudaHostAlloc(reinterpret_cast<void**>(&impl_->ctl), sizeof(KernelControl),
                           cudaHostAllocMapped),
             "cudaHostAlloc(kernel control)");
  *impl_->ctl = KernelControl{};
  check_cuda(cudaHostGetDevicePointer(reinterpret_cast<void**>(&impl_->ctl_device), impl_->ctl, 0),
             "cudaHostGetDevicePointer(kernel control)");
  // Stream-ordered: a plain cudaMalloc/cudaFree could wait for a running kernel.
  check_cuda(cudaMallocAsync(reinterpret_cast<void**>(&impl_->rec),
                             kMaxQueues * sizeof(EpochRecord), impl_->control),
             "cudaMallocAsync(epoch records)");
  check_cuda(cudaMemsetAsync(impl_->rec, 0, kMaxQueues * sizeof(EpochRecord), impl_->control),
             "cudaMemsetAsync(epoch records)");
  check_cuda(cudaMallocAsync(reinterpret_cast<void**>(&impl_->descs),
                             kMaxQueues * sizeof(EngineDesc), impl_->control),
             "cudaMallocAsync(queue descriptors)");
  check_cuda(
      cudaMallocAsync(reinterpret_cast<void**>(&impl_->far_stop), sizeof(uint32_t), impl_->control),
      "cudaMallocAsync(stop flag)");
  check_cuda(cudaMemsetAsync(impl_->far_stop, 0, sizeof(uint32_t), impl_->control),
             "cudaMemsetAsync(stop flag)");
  check_cuda(cudaStreamSynchronize(impl_->control), "kernel control");
}

EngineKernel::~EngineKernel() {
  try {
    if (impl_->launched && !impl_->stopped) stop(5.0);
  } catch (...) {
    // A loop that cannot be stopped is reported by stop(); the destructor must
    // not throw, nor free memory the kernel may still use, nor wait forever on a
    // relauncher stuck in the driver: leave it all behind.
    if (impl_->relauncher.joinable()) impl_->relauncher.detach();
    static_cast<void>(impl_.release());
    return;
  }
  if (impl_->relauncher.joinable()) impl_->relauncher.join();
  cudaFreeAsync(impl_->rec, impl_->control);
  cudaFreeAsync(impl_->descs, impl_->control);
  cudaFreeAsync(impl_->far_stop, impl_->control);
  cudaStreamSynchronize(impl_->control);
  cudaFreeHost(impl_->ctl);
  cudaStreamDestroy(impl_->stream);
  cudaStreamDestroy(impl_->far_stream);
  cudaStreamDestroy(impl_->control);
}

namespace {

// The relauncher: keeps `in_flight` epochs queued on the engine's stream until
// stop() or an error. Waiting spins on cudaStreamQuery/cudaEventQuery (a
// blocking wait would add the scheduler's wake-up to every relaunch gap).
void relaunch_loop(EngineKernel::Impl& k, uint32_t in_flight) {
  std::vector<cudaEvent_t> done(in_flight);
  try {
    // Its streams and kernels are that device's: a thread starts on device 0.
    check_cuda(cudaSetDevice(k.device), "cudaSetDevice");
    for (cudaEvent_t& e : done)
      check_cuda(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
    uint64_t launched = 1;  // start() launched the first epoch
    check_cuda(cudaEventRecord(done[0], k.stream), "cudaEventRecord");
    uint64_t retired = 0;
    for (;;) {
      while (launched - retired < in_flight && !k.stopping.load(std::memory_order_acquire)) {
        k.launch();
        check_cuda(cudaGetLastError(), "engine_kernel launch");
        check_cuda(cudaEventRecord(done[launched % in_flight], k.stream), "cudaEventRecord");
        ++launched;
      }
      if (launched == retired) break;
      cudaError_t err;
      uint32_t spins = 0;
      while ((err = cudaEventQuery(done[retired % in_flight])) == cudaErrorNotReady) {
        if (++spins % 1024 == 0) std::this_thread::yield();
        spin_pause();
      }
      check_cuda(err, "the persistent engine kernel failed");
      ++retired;
    }
  } catch (const std::exception& e) {
    k.error = e.what();
  }
  for (cudaEvent_t e : done)
    if (e) cudaEventDestroy(e);
  // A GPU far end running beside the loop ends with it.
  cudaMemsetAsync(k.far_stop, 1, sizeof(uint32_t), k.control);
  cudaStreamSynchronize(k.control);
  k.finished.store(true, std::memory_order_release);
}

}  // namespace

void EngineKernel::start(const std::vector<EngineDesc>& descs, EngineState* states_device,
                         bool wire_on_device, uint64_t* heartbeat_pinned,
                         const LaunchOptions& opts) {
  if (impl_->launched) throw std::logic_error("EngineKernel::start called twice");
  if (opts.in_flight < 1 || opts.in_flight > 4)
    throw std::invalid_argument("epochs in flight: 1 to 4, not " + std::to_string(opts.in_flight));
  if (opts.warps < 1 || opts.warps > kMaxCrewWarps)
    throw std::invalid_argument("warps: 1 to " + std::to_string(kMaxCrewWarps) + ", not " +
                                std::to_string(opts.warps));
  const uint32_t blocks = uint32_t(descs.size());
  if (blocks < 1 || blocks > kMaxQueues)
    throw std::invalid_argument("queues: 1 to " + std::to_string(kMaxQueues) + ", not " +
                                std::to_string(blocks));
  Impl& k = *impl_;
  k.heartbeat = heartbeat_pinned;
  k.blocks = blocks;
  check_cuda(cudaGetDevice(&k.device), "cudaGetDevice");
  const EngineDesc& desc = descs[0];  // every queue's rings have the same shape
  // Dynamic shared memory: the express path's ICRC tables, then a frame in and a reply out.
  const size_t staging = kIcrcWordSmemBytes + size_t(desc.rx.slot_bytes) + desc.tx.slot_bytes;
  const uint64_t epoch_ns = uint64_t(opts.epoch_us) * 1000;
  KernelControl* ctl = k.ctl_device;
  EpochRecord* rec = k.rec;
  const EngineDesc* on_device = k.descs;
  check_cuda(cudaMemcpyAsync(k.descs, descs.data(), blocks * sizeof(EngineDesc),
                             cudaMemcpyHostToDevice, k.control),
             "cudaMemcpyAsync(queue descriptors)");
  check_cuda(cudaStreamSynchronize(k.control), "queue descriptors");
  const uint32_t threads = 32 * opts.warps;
  auto require_resident = [&](const void* kernel, size_t smem) {
    // Every block spins until stopped: one that waits for a free SM would never start.
    int device = 0, sms = 0, per_sm = 0;
    check_cuda(cudaGetDevice(&device), "cudaGetDevice");
    check_cuda(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device),
               "cudaDeviceGetAttribute(SMs)");
    check_cuda(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, int(threads), smem),
               "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
    if (uint64_t(sms) * uint64_t(per_sm) < blocks)
      throw std::invalid_argument("queues: " + std::to_string(blocks) + " blocks of " +
                                  std::to_string(threads) + " threads do not run at once on " +
                                  std::to_string(sms) + " SMs");
  };
  if (opts.warps > 1) {
    auto* kernel = wire_on_device ? crew_kernel<Scope::kDevice> : crew_kernel<Scope::kSystem>;
    const size_t room = dynamic_smem_room(kernel);
    const uint32_t depth = batch_depth(desc, room > staging ? room - staging : 0, /*staged=*/true);
    const size_t smem = staging + size_t(depth > 1 ? depth : 0) * desc.rx.slot_bytes;
    k.batch_depth = depth;
    allow_dynamic_smem(kernel, smem);
    require_resident(reinterpret_cast<const void*>(kernel), smem);
    k.launch = [=, &k] {
      launch_with_smem(kernel, blocks, threads, smem, k.stream, on_device, states_device, ctl, rec,
                       heartbeat_pinned, epoch_ns, depth);
    };
  } else {
    auto* kernel = wire_on_device ? engine_kernel<Scope::kDevice> : engine_kernel<Scope::kSystem>;
    k.batch_depth = 1;
    allow_dynamic_smem(kernel, staging);
    require_resident(reinterpret_cast<const void*>(kernel), staging);
    k.launch = [=, &k] {
      launch_with_smem(kernel, blocks, threads, staging, k.stream, on_device, states_device, ctl,
                       rec, heartbeat_pinned, epoch_ns);
    };
  }
  k.launch();  // on the caller's thread: a launch that fails says so here
  check_cuda(cudaGetLastError(), "engine_kernel launch");
  k.launched = true;
  k.stopped = false;
  // One launch for the run: the relauncher only waits for it.
  if (opts.epoch_us == 0) k.stopping.store(true, std::memory_order_release);
  const uint32_t in_flight = opts.epoch_us ? opts.in_flight : 1;
  k.relauncher = std::thread([&k, in_flight] { relaunch_loop(k, in_flight); });
}

bool EngineKernel::running() const {
  return impl_->launched && !impl_->stopped && !impl_->finished.load(std::memory_order_acquire);
}

void EngineKernel::check() const {
  if (!impl_->launched || impl_->stopped) return;
  if (!impl_->finished.load(std::memory_order_acquire)) return;
  if (!impl_->error.empty()) throw std::runtime_error(impl_->error);
  throw std::runtime_error("the persistent engine kernel exited without being asked to stop");
}

void EngineKernel::stop(double timeout_s) {
  Impl& k = *impl_;
  if (!k.launched || k.stopped) return;
  // No CUDA call: the flag is pinned host memory the kernel polls; the
  // relauncher sees `stopping` and launches no more.
  k.stopping.store(true, std::memory_order_release);
  reinterpret_cast<volatile uint32_t*>(&k.ctl->stop)[0] = 1;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (!k.finished.load(std::memory_order_acquire)) {
    if (std::chrono::steady_clock::now() > deadline) {
      const uint64_t beats = k.heartbeat ? *reinterpret_cast<volatile uint64_t*>(k.heartbeat) : 0;
      throw std::runtime_error(
          "the persistent engine kernel did not stop within " + std::to_string(timeout_s) +
          " s (heartbeat at " + std::to_string(beats) +
          " passes; its stop flag is set, and a CUDA call blocked elsewhere in the process may "
          "be holding the device)");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  k.relauncher.join();
  k.stopped = true;
  if (!k.error.empty()) throw std::runtime_error(k.error);
}

EpochStats EngineKernel::epoch_stats() const {
  const volatile KernelControl& c = *impl_->ctl;
  EpochStats e{c.epochs,        c.gap_total_ns,        c.gap_max_ns,       c.warmup_total_ns,
               c.warmup_max_ns, c.first_pass_total_ns, c.first_pass_max_ns};
  for (uint32_t q = 0; q < impl_->blocks; ++q) {
    const volatile CrewProfile& p = c.crew[q];
    for (uint32_t k = 0; k < 4; ++k) e.batch_cycles[k] += p.batch_cycles[k];
    for (uint32_t k = 0; k < 5; ++k) e.classify_cycles[k] += p.classify_cycles[k];
    e.batches += p.batches;
    e.batch_frames += p.batch_frames;
  }
  e.batch_depth = impl_->batch_depth;
  e.blocks = impl_->blocks;
  return e;
}

void EngineKernel::run_far_end(const FarEndDesc* descs, uint32_t queues, size_t scratch_bytes,
                               double timeout_s) {
  launch_with_smem(far_end_kernel<Scope::kDevice>, queues, kFarEndThreads, scratch_bytes,
                   impl_->far_stream, descs, static_cast<const uint32_t*>(impl_->far_stop),
                   uint32_t(scratch_bytes));
  check_cuda(cudaGetLastError(), "far_end_kernel launch");
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s + 5.0);
  for (;;) {
    const cudaError_t err = cudaStreamQuery(impl_->far_stream);
    if (err == cudaSuccess) return;
    if (err != cudaErrorNotReady) check_cuda(err, "the GPU far end failed");
    if (std::chrono::steady_clock::now() > deadline)
      throw std::runtime_error("the GPU far end did not finish within its timeout + 5 s");
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

}  // namespace rt::cuda
