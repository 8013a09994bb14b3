// The GPU latency floors declared in rt/bench/floors.h: a persistent kernel
// answering the host through pinned memory, two thread blocks answering each
// other through device memory, and one kernel launch per message; and the
// plain per-packet pass, the engine's own pass over a stream with nothing around it.
//
// Every persistent kernel here has a stop flag in pinned memory and waits that
// give up after a time budget of their own, and the host stops waiting for it
// after a timeout and says what was outstanding: a bug becomes an exception,
// never a hang. Memory is freed on every path, except memory a kernel that
// would not stop may still touch (see Resources).
#include <cuda_runtime.h>

#include <cstring>
#include <cuda/atomic>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "rt/bench/floors.h"
#include "rt/bench/host_spin.h"
#include "rt/device_clock.h"
#include "rt/engine/stream_pass.h"

namespace rt::bench {
namespace {

// Host-shared words take system scope only, device-only words device scope
// only: no word is ever accessed under two scopes.
using SystemRef = cuda::atomic_ref<uint32_t, cuda::thread_scope_system>;
using DeviceRef = cuda::atomic_ref<uint32_t, cuda::thread_scope_device>;
constexpr auto kAcquire = cuda::std::memory_order_acquire;
constexpr auto kRelease = cuda::std::memory_order_release;
constexpr auto kRelaxed = cuda::std::memory_order_relaxed;

// ---- errors -------------------------------------------------------------------------------

// Carries the floor's name into every check, so a message says which floor
// failed and at which CUDA call.
struct Cuda {
  const char* floor;

  void operator()(cudaError_t err, const char* what) const {
    if (err != cudaSuccess)
      fail(std::string(what) + ": " + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")");
  }
  [[noreturn]] void fail(const std::string& why) const {
    throw std::runtime_error(std::string(floor) + ": " + why);
  }
};

// First of all, so a machine without a GPU or driver gets one clear sentence
// rather than the error of whichever allocation came first.
void require_gpu(const Cuda& cuda) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError();  // clear it, so later calls start clean
    cuda.fail(std::string("no usable CUDA GPU (cudaGetDeviceCount: ") + cudaGetErrorName(err) +
              ": " + cudaGetErrorString(err) + ")");
  }
  if (count == 0) cuda.fail("no usable CUDA GPU (the CUDA runtime lists 0 devices)");
}

// ---- memory, streams, graphs --------------------------------------------------------------

// A floor's stream and memory, released together when the floor returns or
// throws. The stream is non-blocking, so work on the legacy default stream
// elsewhere in the process neither waits for ours nor delays it.
//
// Memory that a kernel which could not be stopped may still touch is
// abandoned (leaked) instead of freed: cudaFree and cudaFreeHost wait for the
// device, so freeing it would turn a stuck kernel into a hung caller.
class Resources {
 public:
  explicit Resources(const Cuda& cuda) : cuda_(cuda) {
    cuda_(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  }
  ~Resources() {
    for (cudaEvent_t e : events_) cudaEventDestroy(e);
    if (!abandoned_) {
      for (void* p : device_) cudaFree(p);
      for (void* p : pinned_) cudaFreeHost(p);
    }
    cudaStreamDestroy(stream_);  // returns at once; queued work still completes
  }
  Resources(const Resources&) = delete;
  Resources& operator=(const Resources&) = delete;

  cudaStream_t stream() const { return stream_; }
  void abandon() { abandoned_ = true; }

  // n zeroed Ts of pinned host memory mapped into the GPU; *device receives
  // the GPU's address of it.
  template <typename T>
  T* pinned(size_t n, T** device) {
    pinned_.push_back(nullptr);  // grown first, so a failed push cannot leak the allocation
    cuda_(cudaHostAlloc(&pinned_.back(), n * sizeof(T), cudaHostAllocMapped), "cudaHostAlloc");
    std::memset(pinned_.back(), 0, n * sizeof(T));
    void* dev = nullptr;
    cuda_(cudaHostGetDevicePointer(&dev, pinned_.back(), 0), "cudaHostGetDevicePointer");
    *device = static_cast<T*>(dev);
    return static_cast<T*>(pinned_.back());
  }

  // n zeroed Ts of device memory; zeroed on our stream, so before our kernels.
  template <typename T>
  T* device(size_t n) {
    device_.push_back(nullptr);
    cuda_(cudaMalloc(&device_.back(), n * sizeof(T)), "cudaMalloc");
    cuda_(cudaMemsetAsync(device_.back(), 0, n * sizeof(T), stream_), "cudaMemsetAsync");
    return static_cast<T*>(device_.back());
  }

  cudaEvent_t event() {
    events_.push_back(nullptr);
    cuda_(cudaEventCreate(&events_.back()), "cudaEventCreate");
    return events_.back();
  }

 private:
  Cuda cuda_;
  cudaStream_t stream_ = nullptr;
  std::vector<void*> pinned_;
  std::vector<void*> device_;
  std::vector<cudaEvent_t> events_;
  bool abandoned_ = false;
};

// ---- persistent kernels -------------------------------------------------------------------

// How a persistent kernel's thread left; it writes this once, as it leaves.
enum class Exit : uint32_t { kRunning = 0, kDone = 1, kStopped = 2, kOutOfTime = 3 };

struct ExitRecord {
  uint32_t reason;  // an Exit
  uint32_t seq;     // the round trip it was waiting for; when done, the last one
};

// A word in pinned host memory on a 64-byte line of its own, so a line is
// only ever written from one side of PCIe.
struct alignas(64) PinnedWord {
  uint32_t value;
};

enum class Wait : uint32_t { kReady, kStopped, kOutOfTime };

// Spins until ready(). The clock and the stop flag are looked at only every
// 256 spins: a prompt answer never pays for them, and the stop flag lives in
// host memory, so each read of it is a PCIe round trip. `budget_ns` counts
// from the first look at the clock.
template <typename Ready>
__device__ Wait wait_until(Ready ready, uint32_t* stop, uint64_t budget_ns) {
  bool timing = false;
  uint64_t start = 0;
  for (uint32_t spins = 1;; ++spins) {
    if (ready()) return Wait::kReady;
    if (spins % 256 != 0) continue;
    const uint64_t now = globaltimer_ns();
    if (!timing) {
      timing = true;
      start = now;
    } else if (now - start > budget_ns) {
      return Wait::kOutOfTime;
    }
    if (SystemRef(*stop).load(kRelaxed) != 0) return Wait::kStopped;
  }
}

__device__ void leave(ExitRecord* exit, Exit why, uint32_t seq) {
  SystemRef(exit->seq).store(seq, kRelaxed);
  SystemRef(exit->reason).store(uint32_t(why), kRelease);
}

__device__ Exit exit_for(Wait w) { return w == Wait::kStopped ? Exit::kStopped : Exit::kOutOfTime; }

uint64_t budget_ns(double timeout_s) { return uint64_t(timeout_s * 1e9); }

// One thread of a persistent kernel, as the host sees it: a name for
// messages and the record the thread leaves behind.
struct KernelThread {
  const char* name;
  ExitRecord* exit;  // host address, in pinned memory
};

std::string describe_exit(const KernelThread& t, int64_t iterations, double timeout_s) {
  const uint32_t reason = SystemRef(t.exit->reason).load(kAcquire);
  const std::string what =
      detail::iteration_name(SystemRef(t.exit->seq).load(kRelaxed), iterations);
  switch (Exit(reason)) {
    case Exit::kDone: return std::string(t.name) + " finished";
    case Exit::kStopped: return std::string(t.name) + " was stopped waiting for " + what;
    case Exit::kOutOfTime:
      return std::string(t.name) + " gave up waiting for " + what + " after " +
             detail::seconds_text(timeout_s);
    case Exit::kRunning: return std::string(t.name) + " left no exit record";
  }
  return std::string(t.name) + " left exit reason " + std::to_string(reason);
}

// Stops a persistent kernel on every path out of a floor. The normal path
// calls finish(); any other path (an exception) reaches the destructor, which
// raises the stop flag and waits, bounded, for the kernel to leave. If it
// does not leave, its memory is abandoned rather than freed.
class PersistentKernel {
 public:
  PersistentKernel(const Cuda& cuda, Resources& res, uint32_t* stop,
                   std::vector<KernelThread> threads, int64_t iterations, double timeout_s)
      : cuda_(cuda),
        res_(res),
        stop_(stop),
        threads_(std::move(threads)),
        iterations_(iterations),
        timeout_s_(timeout_s) {}
  ~PersistentKernel() {
    if (!finished_) stop_and_wait();
  }
  PersistentKernel(const PersistentKernel&) = delete;
  PersistentKernel& operator=(const PersistentKernel&) = delete;

  // Waits up to `limit` for the kernel to end by itself. Throws if it did
  // not (the message adds `outstanding`: the work it was given), faulted, or
  // any of its threads left before finishing.
  void finish(FloorClock::duration limit, const std::string& outstanding) {
    const cudaError_t err = wait_for_stream(limit);
    if (err == cudaErrorNotReady) {
      const bool stopped = stop_and_wait();
      finished_ = true;
      cuda_.fail("kernel did not end within " +
                 detail::seconds_text(std::chrono::duration<double>(limit).count()) + " (" +
                 outstanding +
                 (stopped ? "); stopped it" : "); it did not stop when asked (memory leaked)"));
    }
    finished_ = true;
    cuda_(err, "persistent kernel");
    for (const KernelThread& t : threads_)
      if (Exit(SystemRef(t.exit->reason).load(kAcquire)) != Exit::kDone)
        cuda_.fail("kernel ended early: " + state_of_threads());
  }

  // For a message about a missed answer: whether the kernel still runs and,
  // if it ended, how each of its threads left.
  std::string state() const {
    const cudaError_t err = cudaStreamQuery(res_.stream());
    if (err == cudaErrorNotReady) return "the kernel is still running";
    if (err != cudaSuccess)
      return std::string("the kernel failed: ") + cudaGetErrorName(err) + " (" +
             cudaGetErrorString(err) + ")";
    return "the kernel has ended: " + state_of_threads();
  }

 private:
  std::string state_of_threads() const {
    std::string s;
    for (const KernelThread& t : threads_)
      s += (s.empty() ? "" : "; ") + describe_exit(t, iterations_, timeout_s_);
    return s;
  }

  // cudaSuccess or the kernel's error once the stream is idle, or
  // cudaErrorNotReady if it was still busy after `limit`. Polls every 20 us:
  // cheap for the host, and prompt enough for a deadline in seconds.
  cudaError_t wait_for_stream(FloorClock::duration limit) const {
    const auto start = FloorClock::now();
    for (;;) {
      const cudaError_t err = cudaStreamQuery(res_.stream());
      if (err != cudaErrorNotReady) return err;
      if (FloorClock::now() - start > limit) return cudaErrorNotReady;
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }

  // Raises stop and waits up to timeout_s for the kernel to leave; if it
  // does not, abandons its memory. True if it left.
  bool stop_and_wait() {
    SystemRef(*stop_).store(1, kRelease);
    if (wait_for_stream(to_duration(timeout_s_)) != cudaErrorNotReady) return true;
    res_.abandon();
    return false;
  }

  Cuda cuda_;
  Resources& res_;
  uint32_t* stop_;  // host address, in pinned memory
  std::vector<KernelThread> threads_;
  int64_t iterations_;
  double timeout_s_;
  bool finished_ = false;
};

// ---- pinned_pingpong ----------------------------------------------------------------------

struct PinnedPingPong {
  PinnedWord ping;              // written by the host, polled by the kernel
  PinnedWord pong;              // written by the kernel, polled by the host
  PinnedWord stop;              // written by the host
  alignas(64) ExitRecord exit;  // written by the kernel as it leaves
};

// One thread: answers ping `seq` with pong `seq`, for seq = 1..total.
__global__ void pinned_responder(PinnedPingPong* w, uint32_t total, uint64_t budget) {
  SystemRef ping(w->ping.value), pong(w->pong.value);
  for (uint32_t seq = 1; seq <= total; ++seq) {
    const Wait got = wait_until([&] { return ping.load(kAcquire) == seq; }, &w->stop.value, budget);
    if (got != Wait::kReady) {
      leave(&w->exit, exit_for(got), seq);
      return;
    }
    pong.store(seq, kRelease);
  }
  leave(&w->exit, Exit::kDone, total);
}

// ---- device_block_pingpong ----------------------------------------------------------------

// A device-memory word on a 128-byte line of its own (the L2's line size).
struct alignas(128) DeviceWord {
  uint32_t value;
};

struct DeviceBlockWords {
  DeviceWord ping;  // written by block 0 (initiator), polled by block 1
  DeviceWord pong;  // written by block 1 (responder), polled by block 0
};

struct DeviceBlockControl {
  PinnedWord stop;                 // written by the host
  alignas(64) ExitRecord exit[2];  // exit[b] written by block b as it leaves
};

// Two blocks of one thread. Block 0 times each round trip in its SM's cycles
// (cycles[i] for measured iteration i); span[0] and span[1] receive the
// %globaltimer ns and the cycles of its whole run, warm-up included, which
// converts cycles to ns even where %globaltimer ticks coarsely.
__global__ void device_block_kernel(DeviceBlockWords* words, DeviceBlockControl* ctl,
                                    uint32_t total, uint32_t warmup, uint64_t budget,
                                    uint64_t* cycles, uint64_t* span) {
  DeviceRef ping(words->ping.value), pong(words->pong.value);
  if (blockIdx.x == 1) {
    for (uint32_t seq = 1; seq <= total; ++seq) {
      const Wait got =
          wait_until([&] { return ping.load(kAcquire) == seq; }, &ctl->stop.value, budget);
      if (got != Wait::kReady) {
        leave(&ctl->exit[1], exit_for(got), seq);
        return;
      }
      pong.store(seq, kRelease);
    }
    leave(&ctl->exit[1], Exit::kDone, total);
    return;
  }
  const uint64_t ns0 = globaltimer_ns();
  const uint64_t c0 = sm_cycles();
  for (uint32_t seq = 1; seq <= total; ++seq) {
    const uint64_t t0 = sm_cycles();
    ping.store(seq, kRelease);
    const Wait got =
        wait_until([&] { return pong.load(kAcquire) == seq; }, &ctl->stop.value, budget);
    const uint64_t t1 = sm_cycles();
    if (got != Wait::kReady) {
      leave(&ctl->exit[0], exit_for(got), seq);
      return;
    }
    if (seq > warmup) cycles[seq - warmup - 1] = t1 - t0;
  }
  span[0] = globaltimer_ns() - ns0;
  span[1] = sm_cycles() - c0;
  leave(&ctl->exit[0], Exit::kDone, total);
}

// ---- launch_per_message -------------------------------------------------------------------

// The echo moves 16 bytes per thread per step, one step per thread for
// messages up to 4 KiB; longer ones spread over more blocks. Each step is a
// read across PCIe, so the bytes must move in parallel, not one by one.
constexpr uint32_t kEchoThreads = 256;
constexpr uint32_t kEchoMaxBlocks = 256;

uint32_t echo_blocks(uint32_t n) {
  const uint32_t chunks = (n + 15) / 16;
  const uint32_t blocks = (chunks + kEchoThreads - 1) / kEchoThreads;
  return blocks < kEchoMaxBlocks ? blocks : kEchoMaxBlocks;
}

// in and out come from cudaHostAlloc, so they are 16-byte aligned (page
// aligned in fact).
__global__ void echo_kernel(const uint8_t* in, uint8_t* out, uint32_t n) {
  const uint32_t stride = gridDim.x * blockDim.x;
  const uint32_t first = blockIdx.x * blockDim.x + threadIdx.x;
  const uint32_t whole = n / 16;
  const auto* in16 = reinterpret_cast<const uint4*>(in);
  auto* out16 = reinterpret_cast<uint4*>(out);
  for (uint32_t i = first; i < whole; i += stride) out16[i] = in16[i];
  for (uint32_t i = whole * 16 + first; i < n; i += stride) out[i] = in[i];
}

struct GraphHandle {
  cudaGraph_t g = nullptr;
  GraphHandle() = default;
  GraphHandle(const GraphHandle&) = delete;
  GraphHandle& operator=(const GraphHandle&) = delete;
  ~GraphHandle() {
    if (g) cudaGraphDestroy(g);
  }
};
struct GraphExecHandle {
  cudaGraphExec_t g = nullptr;
  GraphExecHandle() = default;
  GraphExecHandle(const GraphExecHandle&) = delete;
  GraphExecHandle& operator=(const GraphExecHandle&) = delete;
  ~GraphExecHandle() {
    if (g) cudaGraphExecDestroy(g);
  }
};

// echo_kernel captured once into an executable graph on `stream`.
struct EchoGraph {
  GraphHandle graph;
  GraphExecHandle exec;

  EchoGraph(const Cuda& cuda, cudaStream_t stream, const uint8_t* in, uint8_t* out, uint32_t n) {
    cuda(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal),
         "cudaStreamBeginCapture");
    echo_kernel<<<echo_blocks(n), kEchoThreads, 0, stream>>>(in, out, n);
    const cudaError_t launched = cudaGetLastError();
    // Ended even when the launch failed, so the stream leaves capture mode.
    const cudaError_t ended = cudaStreamEndCapture(stream, &graph.g);
    cuda(launched, "echo_kernel launch (captured)");
    cuda(ended, "cudaStreamEndCapture");
    cuda(cudaGraphInstantiate(&exec.g, graph.g, 0), "cudaGraphInstantiate");
  }
};

// ---- plain_pass ---------------------------------------------------------------------------

struct PlainPassCounts {
  unsigned long long good, bad, bytes;
};

// Where a decoded packet's payload goes in the region, or null if the header checks
// refuse it: stream_kind's checks, with a range of QPs and one region for the engine's.
__device__ uint8_t* plain_pass_dst(const DecodeResult& r, const PlainPassTarget& t,
                                   uint8_t* region) {
  if (!r.ok()) return nullptr;
  const FrameView& f = r.frame;
  if (!(f.op.flags & kWrite) || !f.op.is(kOnly) || !f.op.has(kReth)) return nullptr;
  // Unsigned: a QP below qpn_first wraps far above the count.
  if (f.bth_hdr().dest_qp.get() - t.qpn_first >= t.qpn_count) return nullptr;
  const Reth& reth = f.ext_hdr<Reth>(kReth);
  const uint64_t va = reth.va.get();
  const uint32_t dma_len = reth.dma_len.get();
  if (reth.rkey.get() != t.rkey || f.payload_len > dma_len) return nullptr;
  if (va < t.region_va || va - t.region_va > t.region_bytes ||
      dma_len > t.region_bytes - (va - t.region_va))
    return nullptr;
  return region + (va - t.region_va);
}

// A thread a packet. The counts go to shared words, then one global atomic a block, so the
// floor's bookkeeping costs the launch next to nothing.
__global__ void __launch_bounds__(kPlainPassMaxThreads)
    plain_pass_kernel(const uint8_t* ring, const uint32_t* lens, uint32_t n, uint32_t slot_bytes,
                      PlainPassTarget target, uint8_t* region, PlainPassCounts* counts) {
  __shared__ PlainPassCounts block;
  if (threadIdx.x == 0) block = {0, 0, 0};
  crc32_tables_to_shared();  // ends with __syncthreads(): block is zeroed too
  unsigned long long good = 0, bad = 0, bytes = 0;
  const uint32_t stride = gridDim.x * blockDim.x;
  for (uint32_t k = blockIdx.x * blockDim.x + threadIdx.x; k < n; k += stride) {
    const DecodeResult r = decode(ByteSpan(ring + size_t(k) * slot_bytes, lens[k]));
    uint8_t* dst = plain_pass_dst(r, target, region);
    uint32_t raw = 0;  // the page CRC's share: the floor has no page CRC to fold it into
    if (dst && engine_detail::icrc_place(r.frame, dst, r.frame.payload_len, &raw)) {
      ++good;
      bytes += r.frame.payload_len;
    } else {
      ++bad;
    }
  }
  atomicAdd(&block.good, good);
  atomicAdd(&block.bad, bad);
  atomicAdd(&block.bytes, bytes);
  __syncthreads();
  if (threadIdx.x == 0) {
    atomicAdd(&counts->good, block.good);
    atomicAdd(&counts->bad, block.bad);
    atomicAdd(&counts->bytes, block.bytes);
  }
}

}  // namespace

// ---- the floors ---------------------------------------------------------------------------

std::vector<double> pinned_pingpong(int64_t iterations, double timeout_s) {
  const Cuda cuda{"pinned_pingpong"};
  detail::check_iterations(cuda.floor, iterations);
  detail::check_timeout(cuda.floor, timeout_s);
  require_gpu(cuda);
  const uint32_t total = uint32_t(kFloorWarmup + iterations);
  const FloorClock::duration timeout = to_duration(timeout_s);
  std::vector<double> samples;
  samples.reserve(size_t(iterations));

  Resources res(cuda);
  PinnedPingPong* dev = nullptr;
  PinnedPingPong* w = res.pinned<PinnedPingPong>(1, &dev);
  PersistentKernel kernel(cuda, res, &w->stop.value, {{"the responder thread", &w->exit}},
                          iterations, timeout_s);
  pinned_responder<<<1, 1, 0, res.stream()>>>(dev, total, budget_ns(timeout_s));
  cuda(cudaGetLastError(), "pinned_responder launch");

  SystemRef ping(w->ping.value), pong(w->pong.value);
  for (uint32_t seq = 1; seq <= total; ++seq) {
    const auto t0 = FloorClock::now();
    ping.store(seq, kRelease);
    const bool answered = spin_until([&] { return pong.load(kAcquire) == seq; }, t0, timeout);
    const auto t1 = FloorClock::now();
    if (!answered)
      cuda.fail("kernel did not answer " + detail::iteration_name(seq, iterations) + " within " +
                detail::seconds_text(timeout_s) + " (" + kernel.state() + ")");
    if (seq > uint32_t(kFloorWarmup)) samples.push_back(elapsed_ns(t0, t1));
  }
  kernel.finish(to_duration(timeout_s),
                "all " + std::to_string(total) + " round trips were answered");
  return samples;
}

std::vector<double> device_block_pingpong(int64_t iterations, double timeout_s) {
  const Cuda cuda{"device_block_pingpong"};
  detail::check_iterations(cuda.floor, iterations);
  detail::check_timeout(cuda.floor, timeout_s);
  require_gpu(cuda);
  const uint32_t total = uint32_t(kFloorWarmup + iterations);

  Resources res(cuda);
  DeviceBlockControl* ctl_dev = nullptr;
  DeviceBlockControl* ctl = res.pinned<DeviceBlockControl>(1, &ctl_dev);
  DeviceBlockWords* words = res.device<DeviceBlockWords>(1);
  uint64_t* cycles = res.device<uint64_t>(size_t(iterations));
  uint64_t* span = res.device<uint64_t>(2);
  PersistentKernel kernel(
      cuda, res, &ctl->stop.value,
      {{"the initiator block", &ctl->exit[0]}, {"the responder block", &ctl->exit[1]}}, iterations,
      timeout_s);
  device_block_kernel<<<2, 1, 0, res.stream()>>>(words, ctl_dev, total, uint32_t(kFloorWarmup),
                                                 budget_ns(timeout_s), cycles, span);
  cuda(cudaGetLastError(), "device_block_kernel launch");
  // The kernel ends by itself: after its round trips, or once a wait outlasts
  // its budget. This deadline only catches a kernel that ignores its budget;
  // it allows ten times the round trip GPU.md reports, plus the budget twice.
  const auto limit = to_duration(2 * timeout_s) + std::chrono::microseconds(10) * total;
  kernel.finish(limit, std::to_string(total) + " round trips, " + std::to_string(kFloorWarmup) +
                           " of them warm-up");

  std::vector<uint64_t> host_cycles(static_cast<size_t>(iterations));
  uint64_t host_span[2] = {0, 0};
  cuda(cudaMemcpyAsync(host_cycles.data(), cycles, host_cycles.size() * sizeof(uint64_t),
                       cudaMemcpyDeviceToHost, res.stream()),
       "cudaMemcpyAsync (cycles)");
  cuda(cudaMemcpyAsync(host_span, span, sizeof(host_span), cudaMemcpyDeviceToHost, res.stream()),
       "cudaMemcpyAsync (span)");
  cuda(cudaStreamSynchronize(res.stream()), "cudaStreamSynchronize");
  if (host_span[0] == 0 || host_span[1] == 0)
    cuda.fail("the run's span is " + std::to_string(host_span[0]) + " ns, " +
              std::to_string(host_span[1]) + " cycles: cannot convert cycles to ns");
  const double ns_per_cycle = double(host_span[0]) / double(host_span[1]);
  std::vector<double> samples(host_cycles.size());
  for (size_t i = 0; i < samples.size(); ++i) samples[i] = double(host_cycles[i]) * ns_per_cycle;
  return samples;
}

std::vector<double> launch_per_message(int64_t iterations, size_t size, bool graph) {
  const Cuda cuda{graph ? "launch_per_message(graph)" : "launch_per_message"};
  detail::check_iterations(cuda.floor, iterations);
  detail::check_message_size(cuda.floor, size);
  require_gpu(cuda);
  const uint32_t total = uint32_t(kFloorWarmup + iterations);
  const uint32_t n = uint32_t(size);
  const uint32_t blocks = echo_blocks(n);
  std::vector<double> samples;
  samples.reserve(size_t(iterations));

  Resources res(cuda);
  uint8_t* in_dev = nullptr;
  uint8_t* out_dev = nullptr;
  uint8_t* in = res.pinned<uint8_t>(size, &in_dev);
  const uint8_t* out = res.pinned<uint8_t>(size, &out_dev);
  const cudaStream_t stream = res.stream();
  std::optional<EchoGraph> echo_graph;  // built before any timing
  if (graph) echo_graph.emplace(cuda, stream, in_dev, out_dev, n);

  std::vector<uint8_t> message(size);
  for (uint32_t seq = 1; seq <= total; ++seq) {
    // Every byte differs from the previous message's, so a stale echo fails the check.
    for (size_t i = 0; i < size; ++i) message[i] = uint8_t(seq + i * 7);
    const auto t0 = FloorClock::now();
    std::memcpy(in, message.data(), size);
    if (graph) {
      cuda(cudaGraphLaunch(echo_graph->exec.g, stream), "cudaGraphLaunch");
    } else {
      echo_kernel<<<blocks, kEchoThreads, 0, stream>>>(in_dev, out_dev, n);
      cuda(cudaGetLastError(), "echo_kernel launch");
    }
    cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    const auto t1 = FloorClock::now();
    if (std::memcmp(out, message.data(), size) != 0) {
      size_t i = 0;
      while (out[i] == message[i]) ++i;
      cuda.fail("the echo of " + detail::iteration_name(seq, iterations) + " differs at byte " +
                std::to_string(i) + ": got " + std::to_string(out[i]) + ", sent " +
                std::to_string(message[i]));
    }
    if (seq > uint32_t(kFloorWarmup)) samples.push_back(elapsed_ns(t0, t1));
  }
  return samples;
}

PlainPassResult plain_pass(const std::vector<std::string>& packets, uint32_t slot_bytes,
                           uint32_t blocks, uint32_t threads, const PlainPassTarget& target,
                           int repeats) {
  const Cuda cuda{"plain_pass"};
  detail::check_plain_pass(packets, slot_bytes, blocks, threads, target, repeats);
  require_gpu(cuda);
  const uint32_t n = uint32_t(packets.size());
  std::vector<uint8_t> ring(size_t(n) * slot_bytes);
  std::vector<uint32_t> lens(n);
  for (uint32_t k = 0; k < n; ++k) {
    std::memcpy(ring.data() + size_t(k) * slot_bytes, packets[k].data(), packets[k].size());
    lens[k] = uint32_t(packets[k].size());
  }

  Resources res(cuda);
  const cudaStream_t stream = res.stream();
  uint8_t* ring_dev = res.device<uint8_t>(ring.size());
  uint32_t* lens_dev = res.device<uint32_t>(n);
  uint8_t* region = res.device<uint8_t>(size_t(target.region_bytes));
  // A set of counts a launch, the warm-up's first: each launch's own, zeroed once.
  const int launches = 1 + repeats;
  PlainPassCounts* counts_dev = res.device<PlainPassCounts>(size_t(launches));
  cuda(cudaMemcpyAsync(ring_dev, ring.data(), ring.size(), cudaMemcpyHostToDevice, stream),
       "cudaMemcpyAsync (ring)");
  cuda(cudaMemcpyAsync(lens_dev, lens.data(), n * sizeof(uint32_t), cudaMemcpyHostToDevice, stream),
       "cudaMemcpyAsync (lengths)");
  std::vector<cudaEvent_t> marks;
  for (int i = 0; i < 2 * launches; ++i) marks.push_back(res.event());
  for (int i = 0; i < launches; ++i) {
    cuda(cudaEventRecord(marks[2 * i], stream), "cudaEventRecord");
    plain_pass_kernel<<<blocks, threads, 0, stream>>>(ring_dev, lens_dev, n, slot_bytes, target,
                                                      region, counts_dev + i);
    cuda(cudaGetLastError(), "plain_pass_kernel launch");
    cuda(cudaEventRecord(marks[2 * i + 1], stream), "cudaEventRecord");
  }
  std::vector<PlainPassCounts> counts(static_cast<size_t>(launches));
  cuda(cudaMemcpyAsync(counts.data(), counts_dev, counts.size() * sizeof(PlainPassCounts),
                       cudaMemcpyDeviceToHost, stream),
       "cudaMemcpyAsync (counts)");
  cuda(cudaStreamSynchronize(stream), "plain_pass_kernel");

  PlainPassResult out;
  out.good = counts[0].good;
  out.bad = counts[0].bad;
  out.bytes = counts[0].bytes;
  for (int i = 0; i < launches; ++i) {
    const PlainPassCounts& c = counts[size_t(i)];
    // Every launch passes the same packets: counts that differ mean a broken kernel.
    if (c.good != out.good || c.bad != out.bad || c.bytes != out.bytes || c.good + c.bad != n)
      cuda.fail("launch " + std::to_string(i) + " counted " + std::to_string(c.good) + " good, " +
                std::to_string(c.bad) + " bad, " + std::to_string(c.bytes) +
                " bytes; the warm-up " + std::to_string(out.good) + ", " + std::to_string(out.bad) +
                ", " + std::to_string(out.bytes) + ", of " + std::to_string(n) + " packets");
    if (i == 0) continue;  // the warm-up: first-touch costs, untimed
    float ms = 0;
    cuda(cudaEventElapsedTime(&ms, marks[2 * i], marks[2 * i + 1]), "cudaEventElapsedTime");
    const double ns = double(ms) * 1e6;
    if (i == 1 || ns < out.ns) out.ns = ns;
  }
  return out;
}

}  // namespace rt::bench
