// The transceiver as the host owns it: memory for its queues (an rx/tx ring
// pair each, with its own engine state, counters and completions), the
// engines' configuration, the executor that runs them (executor.h: a CPU
// thread or a block of a persistent kernel per queue), and the NIC on the rings'
// far side that steers packets to the queues (nic.h, queues/steering.h).
#pragma once

#include <atomic>
#include <iterator>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "rt/engine/batch.h"
#include "rt/engine/engine.h"
#include "rt/host/custom_library.h"
#include "rt/host/doca_nic.h"
#include "rt/host/executor.h"
#include "rt/host/loopback_nic.h"
#include "rt/host/memory.h"
#include "rt/host/nic.h"
#include "rt/host/socket_nic.h"
#include "rt/queues/steering.h"

namespace rt::host {

struct RegionConfig {
  uint64_t va = 0;
  uint32_t rkey = 0;
  uint32_t length = 0;
};

// What runs the engines, where the loopback's far end runs, what carries the frames: the
// configuration's names for them are the *KeyNames below, in the enums' order.
enum class ExecutorKind : uint8_t { kCpu, kCuda };
enum class FarEndPlace : uint8_t { kCpu, kGpu };  // kGpu: the cuda executor only
enum class NicKind : uint8_t { kLoopback, kSocket, kDoca };

// The configuration as roce_transceiver/config.py's core_config() hands it over, validated
// there (SCHEMA holds each key's default and range, and checks them once): no defaults here,
// and the constructor checks only what it alone knows (the GPU, the compiled handler, the
// fixed arrays' bounds).
struct TransceiverConfig {
  ExecutorKind executor;
  FarEndPlace far_end;  // kGpu: the cuda executor only
  NicKind nic;
  SocketNicConfig socket;  // nic "socket" only; its addresses and QP are filled in
  DocaNicConfig doca;      // nic "doca" only
  uint32_t queues;         // rx/tx ring pairs, an engine each (steering.h)
  SteerBy steer;           // how packets pick a queue
  uint32_t rx_depth;       // powers of two, per queue
  uint32_t tx_depth;
  uint32_t slot_bytes;
  uint32_t host_tx_depth;
  uint32_t completion_depth;
  uint32_t completion_slot_bytes;
  EngineSettings engine;  // the engines' own settings (engine/settings.h)
  QpConfig qp;
  FrameSpec local;  // our addresses (src_*) and the peer's (dst_*), as in our replies
  HandlerKind handler;
  std::vector<uint8_t> qec_blob;
  // handler kCustom: the shared object roce_transceiver/custom_handler.py built (its
  // rt_custom_call trampoline and rt_custom_abi_version), the state each queue keeps and the
  // user's constant parameters. On executor 'cuda', the engine's kernels with the handler
  // linked in (a cubin, custom_kernel_image) instead of the shared object.
  std::string custom_library;
  std::vector<uint8_t> custom_kernel_image;
  // handler kFrames: the user handler above is the streams' statistic, run on each frame
  // (its result is the frame's reply, FramesDesc::statistic).
  bool frames_statistic;
  uint32_t custom_state_bytes;
  std::vector<uint8_t> custom_params;
  std::vector<RegionConfig> regions;
  // handler kFrames: the pages are regions[frames_region], page_bytes each.
  uint32_t frames_region;
  uint32_t frames_page_bytes;
  uint32_t frames_pages;
  bool frames_metadata;
  bool frames_check_crc;
  uint32_t frames_slice_bytes;  // a slice record per this many bytes of a frame; 0: none
  uint32_t frames_page_bits;    // hsb.page_bits as resolved (config.py): 8 or 12
  int cpu_core;                 // pin the cpu executor's thread; -1: no pinning
  double stop_timeout_s;
  // cuda executor: the persistent kernel's epochs (cuda/engine_launch.h); 0: one launch.
  uint32_t cuda_epoch_us;
  uint32_t cuda_epochs_in_flight;
  uint32_t cuda_warps;  // 1: one warp; more: a crew (engine/batch.h)
  int cuda_device;      // the GPU the cuda executor runs on, its memory there
};

// What a flat key holds where the member's type alone does not say it (the others: strings,
// bools, the integer types, double, the QEC blob's bytes, regions).
struct MacKey {
  uint8_t* bytes;  // 6
};
struct IpKey {
  uint8_t* bytes;          // 4 for IPv4, 16 for IPv6
  const uint8_t* version;  // ip_version, read before the addresses
};
struct OptionalU16Key {  // None: absent (vlan: untagged)
  bool* present;
  uint16_t* value;
};
template <class E>
struct NamedKey {  // one of the names: names[i] is E(i)
  E* value;
  const char* const* names;
  uint32_t count;
  template <size_t N>
  NamedKey(E& v, const char* const (&n)[N]) : value(&v), names(n), count(uint32_t(N)) {}
};
inline constexpr const char* kTransportKeyNames[] = {"RC", "UC"};  // what a QP of ours can be
inline constexpr const char* kExecutorKeyNames[] = {"cpu", "cuda"};
inline constexpr const char* kFarEndKeyNames[] = {"cpu", "gpu"};
inline constexpr const char* kNicKeyNames[] = {"loopback", "socket", "doca"};
inline constexpr const char* kSteerKeyNames[] = {"qp", "udp_sport"};
static_assert(uint32_t(SteerBy::kQp) == 0 && uint32_t(SteerBy::kUdpSport) == 1);
inline constexpr const char* kHandlerKeyNames[] = {"echo", "sink", "qec", "frames", "custom"};
static_assert(uint32_t(Transport::RC) == 0 && uint32_t(Transport::UC) == 1);
static_assert(std::size(kHandlerKeyNames) == uint32_t(HandlerKind::kCustom) + 1,
              "a key name for every handler, in HandlerKind's order");

// The flat configuration as roce_transceiver/config.py's core_config() hands it over: every
// key and the member it sets, here once. A key that is a schema leaf has the leaf's dotted
// name, and core_config() copies its value across by that name; the others are what
// config.py's COMPUTED derives (addresses as bytes, the QEC blob, the regions with the
// frames' pages). register_engine.cpp derives from this list the keys it takes (none
// missing, none unknown), how each is read, and _core.engine_config_keys(), which
// tests/test_config_mapping.py holds core_config() to. Keys are read in this order:
// ip_version before the addresses it sizes. local.pkey is qp.pkey, set after.
template <class Visit>
void for_each_config_key(TransceiverConfig& c, Visit&& key) {
  key("executor", NamedKey<ExecutorKind>(c.executor, kExecutorKeyNames));
  key("far_end", NamedKey<FarEndPlace>(c.far_end, kFarEndKeyNames));
  key("nic", NamedKey<NicKind>(c.nic, kNicKeyNames));
  key("socket.mode", c.socket.mode);
  key("socket.interface", c.socket.interface);
  key("socket.capture", c.socket.capture);
  key("socket.batch", c.socket.batch);
  key("socket_rx_path", c.socket.rx_path);
  key("socket_rx_path_reason", c.socket.rx_path_reason);
  key("doca.device", c.doca.device);
  key("doca_sdk_path", c.doca.sdk_path);
  key("doca_sdk_path_chosen", c.doca.sdk_path_chosen);
  key("queues.count", c.queues);
  key("queues.steer", NamedKey<SteerBy>(c.steer, kSteerKeyNames));
  key("queues.rx_depth", c.rx_depth);
  key("queues.tx_depth", c.tx_depth);
  key("queues.slot_bytes", c.slot_bytes);
  key("queues.host_tx_depth", c.host_tx_depth);
  key("queues.completion_depth", c.completion_depth);
  key("queues.completion_slot_bytes", c.completion_slot_bytes);
  for_each_setting(c.engine, key);
  key("qp.qpn", c.qp.qpn);
  key("qp.peer_qpn", c.qp.peer_qpn);
  key("qp.transport", NamedKey<Transport>(c.qp.transport, kTransportKeyNames));
  key("qp.pkey", c.qp.pkey);
  key("qp.rx_psn", c.qp.rx_psn);
  key("qp.tx_psn", c.qp.tx_psn);
  key("local_mac", MacKey{c.local.src_mac});
  key("peer_mac", MacKey{c.local.dst_mac});
  key("ip_version", c.local.ip_version);
  key("local_ip", IpKey{c.local.src_ip, &c.local.ip_version});
  key("peer_ip", IpKey{c.local.dst_ip, &c.local.ip_version});
  key("local.udp_sport", c.local.src_port);
  key("vlan", OptionalU16Key{&c.local.vlan, &c.local.vlan_tci});
  key("handler", NamedKey<HandlerKind>(c.handler, kHandlerKeyNames));
  key("qec_blob", c.qec_blob);
  key("custom_library", c.custom_library);
  key("custom_kernel_image", c.custom_kernel_image);
  key("custom.state_bytes", c.custom_state_bytes);
  key("custom_params", c.custom_params);
  key("regions", c.regions);
  key("frames_region", c.frames_region);
  key("frames.page_bytes", c.frames_page_bytes);
  key("frames.pages", c.frames_pages);
  key("frames.metadata", c.frames_metadata);
  key("frames.check_crc", c.frames_check_crc);
  key("frames.slice_bytes", c.frames_slice_bytes);
  key("frames_page_bits", c.frames_page_bits);
  key("frames_statistic", c.frames_statistic);
  key("cpu_core", c.cpu_core);
  key("stop_timeout_s", c.stop_timeout_s);
  key("cuda.epoch_us", c.cuda_epoch_us);
  key("cuda.epochs_in_flight", c.cuda_epochs_in_flight);
  key("cuda_warps", c.cuda_warps);
  key("cuda.device", c.cuda_device);
}

// A completed message as the host reads it from the completion ring.
struct Completion {
  uint32_t queue = 0;  // the queue whose engine completed it
  CompletionRecord record;
  std::vector<uint8_t> request;  // up to the record slot's half
  std::vector<uint8_t> reply;
};

// One frames page, and a share in the memory it lies in: the region lives while any
// PageMemory does, past stop() too, so a frame (or an array over it) the host still holds
// never views freed memory.
struct PageMemory {
  std::shared_ptr<const Buffer> region;
  size_t offset = 0;  // where the page starts in the region
  size_t bytes = 0;   // the frame's bytes in it
  const uint8_t* host() const { return region->host() ? region->host() + offset : nullptr; }
  uintptr_t device() const {
    return region->placement() == Placement::kDevice
               ? reinterpret_cast<uintptr_t>(region->device()) + offset
               : 0;
  }
  // A copy of the bytes, wherever they lie (cudaMemcpy from device memory).
  std::vector<uint8_t> read() const;
};

// Where one ring sits in its Buffer: descriptors, slots, its two index words.
struct RingOffsets {
  size_t descs, slots, index_a, index_b, end;
};

// One queue as the host keeps it: its rings' memory, its engine's descriptor, and the
// host's private indices of the rings it is the far side of (host_tx, completions).
struct HostQueue {
  Buffer wire;        // rx + tx rings and their indices
  Buffer host_rings;  // host_tx + completions and their indices (pinned or host)
  Buffer scratch;     // msg_buf + reply_scratch
  EngineDesc desc{};
  uint32_t first_page = 0;  // frames handler: the queue's page 0 is the transceiver's this
  uint32_t host_prod = 0;   // host_tx producer index (host private)
  uint32_t comp_ci = 0;     // completions consumer index (host private)
  uint64_t ring_drops = 0;  // the NIC's: its rx ring was full
};

// The configuration's Nic (its `nic`): the only place that picks one.
std::unique_ptr<Nic> make_nic(const TransceiverConfig& config);

class Transceiver {
 public:
  // Validates and allocates; throws on errors. `nic`: the wire, if the caller brings its own
  // (then the configuration's `nic` is not used); else make_nic()'s.
  explicit Transceiver(TransceiverConfig config, std::shared_ptr<Nic> nic = nullptr);
  ~Transceiver();
  Transceiver(const Transceiver&) = delete;
  Transceiver& operator=(const Transceiver&) = delete;

  void start();
  // Idempotent. Stops the loop, then frees every buffer (counters stay
  // readable). Throws if the executor failed or would not stop in time.
  void stop();
  bool running() const;
  void check() const;  // throws if the executor failed while running

  // Every queue's counters added up; after stop(): the final values.
  std::vector<uint64_t> counters() const;
  std::vector<uint64_t> queue_counters(uint32_t queue) const;  // one queue's
  uint32_t queue_count() const { return uint32_t(queues_.size()); }
  const TransceiverConfig& config() const { return cfg_; }

  // Queue a payload for queue 0's engine to SEND to its peer. False when the host
  // ring is full (nothing queued).
  bool send(const uint8_t* data, size_t len);
  // Every queue's, queue after queue; a frame's page is the transceiver's page number.
  std::vector<Completion> poll_completions(size_t max);
  // Until a completion record is ready on any queue (true), `timeout_ns` passed or stop()
  // began (false); nothing is taken. Spins (pause, a yield now and then) for the first
  // `spin_ns`, so a record published meanwhile is seen within a look, then looks every 20 us.
  // The binding releases the GIL: the host's other threads run while it waits.
  bool wait_completions(uint64_t timeout_ns, uint64_t spin_ns);

  // The loopback wire's calls (LoopbackNic's, which says what each does), refused for
  // another NIC, and once stop() began; preload() before start() only, run_far_end() after.
  bool inject(const uint8_t* frame, size_t len, bool count_drop = true);
  size_t preload(const std::vector<std::string>& frames);
  std::vector<std::vector<uint8_t>> collect(size_t max);
  FarEndRun run_far_end(const FarEndParams& params);

  std::vector<uint8_t> read_region(size_t index, size_t offset, size_t len) const;
  // Where region `index` lies for the executor (device memory on the cuda executor), and its
  // length: what another loop of the same executor reads the peer's writes from (Verbs mode).
  uint8_t* region_data(size_t index) const;
  size_t region_bytes(size_t index) const;
  // Frames handler: give page `page` back to the engine (the host is done
  // with the frame in it). A page not held is left as it is.
  void release_page(uint32_t page);
  // Frames handler: the first `bytes` bytes of page `page`, holding the region's memory
  // alive for as long as the result lives. Throws for a page or length out of range, and
  // after stop() (frames taken before stop() keep theirs).
  PageMemory page_memory(uint32_t page, size_t bytes) const;
  // The NIC's counters by name (none for the loopback); after stop(), final.
  NicFields nic_stats() const { return nic_->stats(); }
  const Nic& nic() const { return *nic_; }
  // What the executor's loops cost so far (executor.h's stats(): the cuda executor's epochs,
  // a crew's batches); after stop(), the final figures.
  ExecutorStats epoch_stats() const;
  // What the NIC is and how it runs (the socket NIC's receive buffer, path and capture
  // error; nothing for the loopback); after stop(), final (a capture error at close included).
  NicFields nic_info() const { return nic_->info(); }

 private:
  // Where each kind of memory lives: the wire rings, what the host reads while the loop
  // runs (host rings, counters), what only the engine touches (state, regions, scratch).
  struct Placements {
    Placement wire, host_facing, engine_private;
  };
  // The constructor's steps, in order.
  void check_settings();
  Placements placements() const;
  void lay_out_rings(const Placements& at);
  EngineDesc engine_desc(const Placements& at);
  void make_queues(const EngineDesc& d, const Placements& at);
  bool uses_custom() const;

  void require_open(const char* what) const;
  LoopbackNic& loopback(const char* what) const;
  void wait_for_calls(double timeout_s);
  std::vector<uint64_t> read_counters(uint32_t queue) const;
  NicQueue nic_queue(HostQueue& q);

  TransceiverConfig cfg_;
  bool on_gpu_ = false;       // cuda executor
  bool wire_device_ = false;  // rx/tx rings in device memory (GPU far end)
  Steering steering_{};
  std::vector<HostQueue> queues_;
  Buffer counters_;               // Counters, one a queue, host-visible
  Buffer state_;                  // EngineState, one a queue
  Buffer qec_;                    // the QEC table blob
  Buffer custom_state_;           // handler kCustom: each queue's state, one stride a queue
  Buffer custom_params_;          // handler kCustom: the user's parameters
  uint32_t custom_stride_ = 0;    // a user handler: each queue's state's bytes, 64-byte lines
  uint32_t pages_per_queue_ = 0;  // handler kFrames: each queue's share of the pages
  // a user handler on the cpu executor: its shared object, closed after the loop ends.
  std::unique_ptr<CustomLibrary> custom_library_;
  Buffer page_free_;  // frames handler: per page, 1 free / 0 held by the host
  // Shared with the PageMemory of every frame the host holds: stop() lets go of its
  // share, and a region goes when the last frame over it does.
  std::vector<std::shared_ptr<Buffer>> regions_;
  struct Views {
    RingOffsets rx, tx, ht, cp;
    uint32_t rx_log2, tx_log2, ht_log2, cp_log2;
  } desc_views_{};
  // Calls that may run while another thread stops the transceiver (a
  // roundtrip lasts seconds): stop() refuses new ones, asks the far end to
  // end, and frees nothing until the last one has returned.
  class CallGuard;
  std::atomic<bool> closing_{false};
  mutable std::atomic<int> active_calls_{0};
  std::unique_ptr<Executor> executor_;
  std::shared_ptr<Nic> nic_;  // set in the constructor, kept past stop() (its final stats)
  ExecutorStats final_epoch_stats_ = idle_executor_stats();
  Buffer heartbeat_;
  bool started_ = false;
  bool stopped_ = false;
  std::vector<std::vector<uint64_t>> final_counters_;  // a queue's each
};

}  // namespace rt::host
