// The warp paths of the engine on the host: icrc_team, crc32_team, engine_step
// (with its express path) and the frames stream's step run by a 32-lane
// HostWarpTeam (host_warp_team.h), next to the CPU executor's SoloTeam.
//
// Test goals (tests/test_team_emulation.py builds the inputs and checks the
// results against zlib, scapy and the Python decoder):
//   crc  IN OUT     zlib CRC-32 of byte strings at any alignment, by both teams
//   icrc IN OUT     the ICRC of RoCEv2 frames by both teams, with and without
//                   precomputed masks, and two at once (icrc_team2)
//   engine IN OUT key=value...
//                   the frames of IN through engine_step (handler=frames:
//                   the stream step, a crew of one team), the way the CPU
//                   executor runs it (SoloTeam, no staging) and the way the
//                   persistent kernel does (32 lanes, staging buffers, one
//                   frame a pass), plus the two mixed ways; every run's tx
//                   frames, completion records, counters, regions and final
//                   state must equal the CPU executor's, byte for byte. OUT
//                   gets the CPU executor's results for the Python checks.
//   publish IN OUT passes=0101... [batch=N] [comp_log2=N] [drain_after=P,P...]
//                   the completion ring's publication: pass p of engine_step
//                   takes a frame of IN when passes[p] is 1, none when 0 (an
//                   idle pass); the host drains what it was shown after each
//                   pass P. OUT: after each pass, the records the host was shown
//                   (the producer index) and the completion drops, by the CPU
//                   executor's way and the kernel's (which must agree).
// Input records: u32 alignment offset, u32 length, the bytes (little-endian).
// Exit status 0: every comparison held; 1: a difference, printed first.
#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "host_warp_team.h"
#include "rt/engine/stream_batch.h"

namespace {

using rt::Scope;
using rt_test::HostWarp;
using rt_test::HostWarpTeam;
constexpr Scope S = Scope::kSystem;

struct Record {
  uint32_t align;
  std::vector<uint8_t> bytes;
};

std::vector<Record> read_records(const char* path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "%s: cannot open\n", path);
    std::exit(2);
  }
  std::vector<Record> out;
  uint32_t head[2];
  while (in.read(reinterpret_cast<char*>(head), sizeof head)) {
    Record r{head[0], std::vector<uint8_t>(head[1])};
    if (!in.read(reinterpret_cast<char*>(r.bytes.data()), std::streamsize(head[1]))) {
      std::fprintf(stderr, "%s: record %zu truncated (%u bytes announced)\n", path, out.size(),
                   head[1]);
      std::exit(2);
    }
    out.push_back(std::move(r));
  }
  return out;
}

// 64-byte aligned memory (ring slots and staging buffers are).
struct Aligned {
  explicit Aligned(size_t n)
      : p(static_cast<uint8_t*>(std::aligned_alloc(64, (n + 63) / 64 * 64))) {
    std::memset(p, 0, (n + 63) / 64 * 64);
  }
  ~Aligned() { std::free(p); }
  Aligned(const Aligned&) = delete;
  Aligned& operator=(const Aligned&) = delete;
  uint8_t* p;
};

// Every lane of a team returns the same value: check it and keep lane 0's.
struct LaneResults {
  std::vector<uint32_t> v;
  explicit LaneResults(size_t n) : v(n * HostWarp::kLanes) {}
  void put(size_t i, uint32_t lane, uint32_t x) { v[i * HostWarp::kLanes + lane] = x; }
  bool agree(size_t i, uint32_t* out, const char* what) const {
    for (uint32_t l = 1; l < HostWarp::kLanes; ++l) {
      if (v[i * HostWarp::kLanes + l] != v[i * HostWarp::kLanes]) {
        std::printf("case %zu: %s: lane %u got %08x, lane 0 %08x\n", i, what, l,
                    v[i * HostWarp::kLanes + l], v[i * HostWarp::kLanes]);
        return false;
      }
    }
    *out = v[i * HostWarp::kLanes];
    return true;
  }
};

int run_crc(const char* in_path, const char* out_path) {
  const std::vector<Record> cases = read_records(in_path);
  std::vector<std::unique_ptr<Aligned>> bufs;
  for (const Record& r : cases) {
    bufs.push_back(std::make_unique<Aligned>(r.align + r.bytes.size() + 64));
    if (!r.bytes.empty()) std::memcpy(bufs.back()->p + r.align, r.bytes.data(), r.bytes.size());
  }
  LaneResults warp(cases.size());
  HostWarp w;
  w.run([&](const HostWarpTeam& t) {
    for (size_t i = 0; i < cases.size(); ++i)
      warp.put(i, t.lane(),
               rt::crc32_team(t, bufs[i]->p + cases[i].align, uint64_t(cases[i].bytes.size())));
  });
  FILE* out = std::fopen(out_path, "w");
  int status = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const uint8_t* p = bufs[i]->p + cases[i].align;
    const uint32_t solo = rt::crc32_team(rt::SoloTeam{}, p, cases[i].bytes.size());
    uint32_t w32 = 0;
    if (!warp.agree(i, &w32, "crc32_team")) status = 1;
    std::fprintf(out, "%08x %08x\n", solo, w32);
  }
  std::fclose(out);
  return status;
}

// The layout icrc_team needs, as the engine's icrc_verdict finds it.
bool layout_of(const uint8_t* frame, uint32_t len, rt::IcrcLayout* l) {
  const rt::DecodeResult r = rt::decode(rt::ByteSpan(frame, len));
  if (!r.ok()) return false;
  const rt::FrameView& f = r.frame;
  *l = rt::IcrcLayout{f.l3,   f.l3_len, f.ip_version, f.bth + uint32_t(sizeof(rt::Bth)) - f.l3,
                      f.icrc, nullptr};
  return rt::icrc_team_fits(*l);
}

// The frames of a file at their offsets, each with its ICRC layout as found
// (plain) and with its masks worked out (masked); fits: a layout was found.
struct IcrcFrames {
  std::vector<Record> records;
  std::vector<std::unique_ptr<Aligned>> bufs;
  std::vector<rt::IcrcLayout> plain, masked;
  std::vector<std::vector<uint32_t>> masks;
  std::vector<bool> fits;

  explicit IcrcFrames(const char* path) : records(read_records(path)) {
    const size_t n = records.size();
    plain.resize(n);
    masked.resize(n);
    masks.assign(n, std::vector<uint32_t>(rt::kIcrcMaskWords));
    fits.resize(n);
    for (size_t i = 0; i < n; ++i) {
      bufs.push_back(std::make_unique<Aligned>(records[i].align + records[i].bytes.size() + 64));
      uint8_t* p = frame(i);
      if (!records[i].bytes.empty())
        std::memcpy(p, records[i].bytes.data(), records[i].bytes.size());
      fits[i] = layout_of(p, uint32_t(records[i].bytes.size()), &plain[i]);
      masked[i] = plain[i];
      if (fits[i]) {
        rt::icrc_masks_for(plain[i], masks[i].data());
        masked[i].masks = masks[i].data();
      }
    }
  }
  size_t size() const { return records.size(); }
  uint8_t* frame(size_t i) const { return bufs[i]->p + records[i].align; }
};

int run_icrc(const char* in_path, const char* out_path) {
  IcrcFrames in(in_path);
  const size_t n = in.size();
  const auto& plain = in.plain;
  const auto& masked = in.masked;
  const auto& fits = in.fits;
  const auto frame = [&](size_t i) { return in.frame(i); };
  LaneResults one(n), with_masks(n), pair_a(n), pair_b(n);
  HostWarp w;
  w.run([&](const HostWarpTeam& t) {
    for (size_t i = 0; i < n; ++i) {
      if (!fits[i]) continue;
      one.put(i, t.lane(), rt::icrc_team(t, frame(i), plain[i]));
      with_masks.put(i, t.lane(), rt::icrc_team(t, frame(i), masked[i]));
      const size_t j = (i + 1) % n;  // the pair: this frame and the next (another length)
      if (!fits[j]) continue;
      uint32_t a = 0, b = 0;
      rt::icrc_team2(t, frame(i), masked[i], frame(j), plain[j], &a, &b);
      pair_a.put(i, t.lane(), a);
      pair_b.put(i, t.lane(), b);
    }
  });
  FILE* out = std::fopen(out_path, "w");
  int status = 0;
  for (size_t i = 0; i < n; ++i) {
    const size_t j = (i + 1) % n;
    if (!fits[i]) {
      std::fprintf(out, "-\n");
      continue;
    }
    uint32_t solo = rt::icrc_team(rt::SoloTeam{}, frame(i), plain[i]), a = 0, b = 0, x = 0, y = 0;
    const bool ok = one.agree(i, &a, "icrc_team") && with_masks.agree(i, &b, "icrc_team(masks)");
    status |= ok ? 0 : 1;
    if (fits[j] && !(pair_a.agree(i, &x, "icrc_team2 a") && pair_b.agree(i, &y, "icrc_team2 b")))
      status = 1;
    uint32_t solo_a = 0, solo_b = 0;
    if (fits[j])
      rt::icrc_team2(rt::SoloTeam{}, frame(i), masked[i], frame(j), plain[j], &solo_a, &solo_b);
    std::fprintf(out, "%08x %08x %08x", solo, a, b);
    if (fits[j]) std::fprintf(out, " %08x %08x %08x %08x", solo_a, solo_b, x, y);
    std::fprintf(out, "\n");
  }
  std::fclose(out);
  return status;
}

// icrc_words / icrc_words2 (a word a lane, position tables) by the 32 lanes, for the frames
// short enough (icrc_words_fit, which also wants the masks worked out: exit status 2 if a
// layout without them is taken): a line a frame, "-" for one too long, else its ICRC and the
// pair's (this frame and the next), or "-" for the pair when the next does not fit.
int run_icrc_words(const char* in_path, const char* out_path) {
  IcrcFrames in(in_path);
  const size_t n = in.size();
  const auto& masked = in.masked;
  std::vector<bool> fits(n);
  for (size_t i = 0; i < n; ++i) {
    // Without its masks worked out a layout is refused, whatever its length.
    if (rt::icrc_words_fit(in.plain[i])) return 2;
    fits[i] = in.fits[i] && rt::icrc_words_fit(masked[i]);
  }
  const auto frame = [&](size_t i) { return in.frame(i); };
  LaneResults one(n), pair_a(n), pair_b(n);
  HostWarp w;
  w.run([&](const HostWarpTeam& t) {
    for (size_t i = 0; i < n; ++i) {
      if (!fits[i]) continue;
      one.put(i, t.lane(), rt::icrc_words(t, frame(i), masked[i]));
      const size_t j = (i + 1) % n;
      if (!fits[j]) continue;
      uint32_t a = 0, b = 0;
      rt::icrc_words2(t, frame(i), masked[i], frame(j), masked[j], &a, &b);
      pair_a.put(i, t.lane(), a);
      pair_b.put(i, t.lane(), b);
    }
  });
  FILE* out = std::fopen(out_path, "w");
  int status = 0;
  for (size_t i = 0; i < n; ++i) {
    const size_t j = (i + 1) % n;
    uint32_t a = 0, x = 0, y = 0;
    if (!fits[i]) {
      std::fprintf(out, "-\n");
      continue;
    }
    status |= one.agree(i, &a, "icrc_words") ? 0 : 1;
    std::fprintf(out, "%08x", a);
    if (fits[j]) {
      status |=
          pair_a.agree(i, &x, "icrc_words2 a") && pair_b.agree(i, &y, "icrc_words2 b") ? 0 : 1;
      std::fprintf(out, " %08x %08x\n", x, y);
    } else {
      std::fprintf(out, " -\n");
    }
  }
  std::fclose(out);
  return status;
}

// --- engine_step ---------------------------------------------------------------------------

struct EngineOptions {
  rt::Transport transport = rt::Transport::RC;
  rt::HandlerKind handler = rt::HandlerKind::kEcho;
  bool check_icrc = true;
  bool express = true;
  bool metadata = false;
  uint32_t completion_batch = 0;  // EngineDesc::completion_batch (0: each record)
  uint32_t comp_log2 = 9;         // the completion ring's depth, log2
};

EngineOptions parse_options(int argc, char** argv) {
  EngineOptions o;
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    const size_t eq = a.find('=');
    const std::string k = a.substr(0, eq), v = eq == std::string::npos ? "" : a.substr(eq + 1);
    if (k == "transport" && (v == "RC" || v == "UC")) {
      o.transport = v == "RC" ? rt::Transport::RC : rt::Transport::UC;
    } else if (k == "handler" && (v == "echo" || v == "frames")) {
      o.handler = v == "echo" ? rt::HandlerKind::kEcho : rt::HandlerKind::kFrames;
    } else if ((k == "check_icrc" || k == "express" || k == "metadata") && (v == "0" || v == "1")) {
      (k == "check_icrc" ? o.check_icrc : k == "express" ? o.express : o.metadata) = v == "1";
    } else if (k == "batch" && !v.empty()) {
      o.completion_batch = uint32_t(std::stoul(v));
    } else if (k == "comp_log2" && !v.empty() && std::stoul(v) <= 12) {
      o.comp_log2 = uint32_t(std::stoul(v));
    } else {
      std::fprintf(stderr,
                   "engine option %s: not transport=RC|UC, handler=echo|frames, "
                   "check_icrc=0|1, express=0|1, metadata=0|1, batch=N or comp_log2=0..12\n",
                   a.c_str());
      std::exit(2);
    }
  }
  return o;
}

// The addresses and sizes of the Python configuration's defaults (config.py):
// frames built by protocol.build for its Peer reach this queue pair.
constexpr uint32_t kSlotBytes = 2048;
constexpr uint32_t kRxLog2 = 8, kTxLog2 = 10, kHostLog2 = 4;
constexpr uint32_t kCompSlotBytes = 1024;
constexpr uint32_t kSettlePasses = 8;  // the schema's queues.settle_passes default
constexpr uint32_t kMsgBufBytes = 65536;
constexpr uint64_t kRegionVa = 0x10000;
constexpr uint32_t kRegionRkey = 0x100, kRegionBytes = 8192;
constexpr uint64_t kPagesVa = 0x100000000ull;
constexpr uint32_t kPagesRkey = 0x46524D53, kPageBytes = 4096, kPages = 4;

// One engine with its rings and memory, as the CPU executor lays them out.
struct Engine {
  explicit Engine(const EngineOptions& o)
      : rx_slots(kSlotBytes << kRxLog2),
        rx_descs(sizeof(rt::RxDesc) << kRxLog2),
        tx_slots(kSlotBytes << kTxLog2),
        tx_descs(sizeof(rt::TxDesc) << kTxLog2),
        host_slots(kSlotBytes << kHostLog2),
        host_descs(sizeof(rt::RxDesc) << kHostLog2),
        comp_slots(kCompSlotBytes << o.comp_log2),
        comp_descs(sizeof(rt::TxDesc) << o.comp_log2),
        indices(64),
        counters(sizeof(rt::Counters)),
        region(kRegionBytes),
        pages(size_t(kPageBytes) * kPages),
        page_free(sizeof(uint32_t) * kPages),
        scratch(kMsgBufBytes + kSlotBytes),
        staging(2 * kSlotBytes) {
    rt::EngineDesc& e = d;
    e = rt::EngineDesc{};
    e.qp = rt::QpConfig{0x11, 0x12, o.transport, 0xFFFF, 0, 0};
    e.reply_spec = rt::FrameSpec{};  // 02:..:01 10.0.0.1 -> 02:..:02 10.0.0.2, port 49152
    e.regions[0] = rt::MemRegion{kRegionVa, kRegionRkey, kRegionBytes, region.p};
    e.regions[1] = rt::MemRegion{kPagesVa, kPagesRkey, kPageBytes * kPages, pages.p};
    e.num_regions = 2;
    e.handler.kind = o.handler;
    auto* free_words = reinterpret_cast<uint32_t*>(page_free.p);
    for (uint32_t i = 0; i < kPages; ++i) free_words[i] = 1;
    e.frames = rt::FramesDesc{1, kPageBytes, kPages, o.metadata, true, false, 12, free_words, 0};
    e.msg_buf = scratch.p;
    e.msg_buf_bytes = kMsgBufBytes;
    e.reply_scratch = scratch.p + kMsgBufBytes;
    e.reply_scratch_bytes = kSlotBytes;
    e.batch = 32;
    e.settle_passes = kSettlePasses;
    e.completion_batch = o.completion_batch;
    e.check_icrc = o.check_icrc;
    e.record_completions = true;
    e.express = o.express;
    auto* idx = reinterpret_cast<uint32_t*>(indices.p);
    e.rx = rt::RxRing{rx_slots.p, reinterpret_cast<rt::RxDesc*>(rx_descs.p), &idx[0], kRxLog2,
                      kSlotBytes};
    e.tx =
        rt::TxRing{tx_slots.p, reinterpret_cast<rt::TxDesc*>(tx_descs.p), &idx[1], &idx[2], kTxLog2,
                   kSlotBytes};
    e.host_tx = rt::RxRing{host_slots.p, reinterpret_cast<rt::RxDesc*>(host_descs.p), &idx[3],
                           kHostLog2, kSlotBytes};
    e.completions = rt::TxRing{comp_slots.p, reinterpret_cast<rt::TxDesc*>(comp_descs.p),
                               &idx[4],      &idx[5],
                               o.comp_log2,  kCompSlotBytes};
    e.counters = reinterpret_cast<rt::Counters*>(counters.p);
    rt::engine_init(d, &st);
  }

  Aligned rx_slots, rx_descs, tx_slots, tx_descs, host_slots, host_descs, comp_slots, comp_descs;
  Aligned indices, counters, region, pages, page_free, scratch, staging;
  rt::EngineDesc d;
  rt::EngineState st;
};

// What a run leaves behind, timestamps of the engine's clock taken out.
struct Outcome {
  std::vector<std::vector<uint8_t>> tx, completions;
  std::vector<uint64_t> counters;
  std::vector<uint8_t> region, pages;
  std::map<std::string, uint64_t> state;
};

// Passes in a row with nothing done before a run is over: past the settling
// passes, and past the pass that polls the host ring (every 16th).
constexpr uint32_t kQuietPasses = kSettlePasses + 64;
constexpr uint32_t kMaxPasses = 1u << 20;

// A crew of one team: the frames stream's step (stream_batch.h) on the emulated warp, as
// the kernel's crew of one warp runs it, or on the CPU thread's team of one.
template <class T>
struct TeamCrew {
  using Team = T;
  T t;
  uint32_t teams() const { return 1; }
  uint32_t team_index() const { return 0; }
  Team team() const { return t; }
  bool leader() const { return t.leader(); }
  void sync() const { t.sync(); }
};

// What the frames stream's crew shares (a block's shared memory on the GPU).
struct StreamBatch {
  explicit StreamBatch(const rt::EngineDesc& d, uint32_t rx_ci) : packets(rt::stream_depth(d)) {
    rt::batch_init(b, rt::stream_depth(d), nullptr, rx_ci, packets.data());
  }
  rt::Batch b{};
  std::vector<rt::StreamPacket> packets;
};

// Requests take engine_step (the request queues' step); frames (`stream` set) the crew's
// stream step.
template <class Team>
void drive(const Team& t, Engine& e, bool staged, uint32_t max_rx, StreamBatch* stream) {
  rt::Staging stg{e.staging.p, e.staging.p + kSlotBytes};
  const auto pass = [&] {
    if (stream) return rt::stream_step<S>(TeamCrew<Team>{t}, e.d, e.st, stream->b, &stg);
    return rt::engine_step<S>(t, e.d, e.st, staged ? &stg : nullptr, max_rx);
  };
  uint32_t quiet = 0;
  for (uint32_t k = 0; k < kMaxPasses && quiet < kQuietPasses; ++k) quiet = pass() ? 0 : quiet + 1;
  if (t.leader()) rt::publish<Scope::kSystem>(e.st.tally, e.d.counters);
  t.sync();
}

// A crew of host warps, BlockCrew's interface (rt/crew.h): team `index` of `count`.
struct HostCrew {
  using Team = HostWarpTeam;
  HostWarpTeam t;
  uint32_t index, count;
  rt_test::Barrier* barrier;
  uint32_t teams() const { return count; }
  uint32_t team_index() const { return index; }
  Team team() const { return t; }
  bool leader() const { return index == 0 && t.leader(); }
  void sync() const { barrier->wait(index * HostWarp::kLanes + t.lane(), "crew sync"); }
};

// The crew kernel's loop: crew_pass (express batches, or the batch step with express off),
// warp 0's staging for a lone request, the batch's next to the crew.
void drive_crew(const HostCrew& c, Engine& e, rt::Batch& b) {
  rt::Staging stg{e.staging.p, e.staging.p + kSlotBytes};
  uint32_t quiet = 0;
  for (uint32_t k = 0; k < kMaxPasses && quiet < kQuietPasses; ++k)
    quiet = rt::crew_pass<S>(c, e.d, e.st, b, &stg) ? 0 : quiet + 1;
  if (c.leader()) rt::publish<Scope::kSystem>(e.st.tally, e.d.counters);
  c.sync();
}

// The crew's staging room: an express batch's 16 requests, a frame and a reply each.
constexpr size_t kCrewStaging = 16 * 2 * size_t(kSlotBytes);

void run_crew(Engine& e, uint32_t warps) {
  rt_test::Barrier barrier(warps * HostWarp::kLanes);
  std::vector<std::unique_ptr<HostWarp>> teams;
  for (uint32_t k = 0; k < warps; ++k) teams.push_back(std::make_unique<HostWarp>());
  auto batch = std::make_unique<rt::Batch>();
  Aligned staging(kCrewStaging);
  rt::batch_init(*batch, rt::batch_depth(e.d, kCrewStaging, true), staging.p, e.st.rx_ci);
  std::vector<std::thread> threads;
  for (uint32_t k = 0; k < warps; ++k)
    threads.emplace_back([&, k] {
      teams[k]->run([&](const HostWarpTeam& t) {
        drive_crew(HostCrew{t, k, warps, &barrier}, e, *batch);
      });
    });
  for (auto& t : threads) t.join();
}

// warp: 32 lanes (a crew of `crew` warps when above 0), else one.
Outcome run_engine(const EngineOptions& o, const std::vector<Record>& frames, bool warp,
                   bool staged, uint32_t crew = 0) {
  Engine e(o);
  uint32_t prod = 0;
  for (size_t i = 0; i < frames.size(); ++i) {
    const Record& f = frames[i];
    const auto r = rt::rx_produce<S>(e.d.rx, prod, f.bytes.data(), uint32_t(f.bytes.size()),
                                     1000000 + 1000 * uint64_t(i));
    if (r != rt::ProduceResult::kOk) {
      std::fprintf(stderr, "frame %zu (%zu bytes): does not fit the rx ring of %u slots of %u\n", i,
                   f.bytes.size(), 1u << kRxLog2, kSlotBytes);
      std::exit(2);
    }
  }
  std::unique_ptr<StreamBatch> stream;
  if (e.d.handler.kind == rt::HandlerKind::kFrames)
    stream = std::make_unique<StreamBatch>(e.d, e.st.rx_ci);
  if (crew) {
    run_crew(e, crew);  // as the crew kernel runs it
  } else if (warp) {
    HostWarp w;  // as the kernel runs it
    w.run([&](const HostWarpTeam& t) { drive(t, e, staged, 1, stream.get()); });
  } else {
    drive(rt::SoloTeam{}, e, staged, 0xFFFFFFFFu, stream.get());  // as the CPU thread runs it
  }
  Outcome out;
  const uint32_t sent = *e.d.tx.producer;
  for (uint32_t i = 0; i < sent; ++i) {
    const rt::TxDesc& desc = e.d.tx.descs[i & e.d.tx.mask()];
    std::vector<uint8_t> f(e.d.tx.slot(i), e.d.tx.slot(i) + desc.len);
    f.insert(f.begin(), reinterpret_cast<const uint8_t*>(&desc.flags),
             reinterpret_cast<const uint8_t*>(&desc.flags) + 4);
    out.tx.push_back(std::move(f));
  }
  const uint32_t recorded = *e.d.completions.producer;
  for (uint32_t i = 0; i < recorded; ++i) {
    const rt::TxDesc& desc = e.d.completions.descs[i & e.d.completions.mask()];
    std::vector<uint8_t> c(e.d.completions.slot(i), e.d.completions.slot(i) + desc.len);
    std::memset(c.data() + offsetof(rt::CompletionRecord, done_timestamp_ns), 0, 8);
    out.completions.push_back(std::move(c));
  }
  out.counters.assign(e.d.counters->v, e.d.counters->v + rt::kNumCounters);
  out.region.assign(e.region.p, e.region.p + kRegionBytes);
  out.pages.assign(e.pages.p, e.pages.p + size_t(kPageBytes) * kPages);
  const rt::EngineState& st = e.st;
  out.state = {{"rx_ci", st.rx_ci},
               {"tx_pi", st.tx_pi},
               {"comp_pi", st.comp_pi},
               {"expected_psn", st.expected_psn},
               {"send_psn", st.send_psn},
               {"msn", st.msn},
               {"in_message", st.in_message},
               {"resync", st.resync},
               {"nak_sent", st.nak_sent},
               {"msg_len", st.msg_len},
               {"write_next_va", st.write.next_va},
               {"write_remaining", st.write.remaining},
               {"frames.completed", st.frames.completed},
               {"frames.open", st.frames.open},
               {"pred.expect.len", st.pred.expect.len}};
  for (uint32_t i = 0; i < kPages; ++i)
    out.state["page_free[" + std::to_string(i) + "]"] =
        reinterpret_cast<const uint32_t*>(e.page_free.p)[i];
  return out;
}

// The first difference between two byte strings, or -1.
long first_difference(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  const size_t n = std::min(a.size(), b.size());
  for (size_t i = 0; i < n; ++i)
    if (a[i] != b[i]) return long(i);
  return a.size() == b.size() ? -1 : long(n);
}

// `ref` names the run `want` came from, in what is printed.
bool same_list(const char* run, const char* ref, const char* what,
               const std::vector<std::vector<uint8_t>>& want,
               const std::vector<std::vector<uint8_t>>& got) {
  if (want.size() != got.size()) {
    std::printf("%s: %zu %s, %s %zu\n", run, got.size(), what, ref, want.size());
    return false;
  }
  for (size_t i = 0; i < want.size(); ++i) {
    const long at = first_difference(want[i], got[i]);
    if (at >= 0) {
      std::printf("%s: %s %zu differs at byte %ld (%zu bytes, %s %zu)\n", run, what, i, at,
                  got[i].size(), ref, want[i].size());
      return false;
    }
  }
  return true;
}

bool same_outcome(const char* run, const Outcome& want, const Outcome& got,
                  const char* ref = "the CPU executor's") {
  bool ok = same_list(run, ref, "tx frames", want.tx, got.tx);
  ok = same_list(run, ref, "completion records", want.completions, got.completions) && ok;
  for (uint32_t i = 0; i < rt::kNumCounters; ++i) {
    if (want.counters[i] != got.counters[i]) {
      std::printf("%s: counter %s = %llu, %s %llu\n", run, rt::kCounterNames[i],
                  static_cast<unsigned long long>(got.counters[i]), ref,
                  static_cast<unsigned long long>(want.counters[i]));
      ok = false;
    }
  }
  for (const auto& [name, value] : want.state) {
    if (got.state.at(name) != value) {
      std::printf("%s: state %s = %llu, %s %llu\n", run, name.c_str(),
                  static_cast<unsigned long long>(got.state.at(name)), ref,
                  static_cast<unsigned long long>(value));
      ok = false;
    }
  }
  if (const long at = first_difference(want.region, got.region); at >= 0) {
    std::printf("%s: region differs at byte %ld\n", run, at);
    ok = false;
  }
  if (const long at = first_difference(want.pages, got.pages); at >= 0) {
    std::printf("%s: frame pages differ at byte %ld\n", run, at);
    ok = false;
  }
  return ok;
}

void hex(FILE* out, const std::vector<uint8_t>& b) {
  for (uint8_t x : b) std::fprintf(out, "%02x", x);
}

int run_engine_compare(const char* in_path, const char* out_path, int argc, char** argv) {
  const EngineOptions o = parse_options(argc, argv);
  const std::vector<Record> frames = read_records(in_path);
  const Outcome cpu = run_engine(o, frames, false, false);
  struct Way {
    const char* name;
    bool warp, staged;
    uint32_t crew;
  };
  const Way ways[] = {{"32 lanes, staged (the kernel's way)", true, true, 0},
                      {"32 lanes, unstaged", true, false, 0},
                      {"1 lane, staged", false, true, 0},
                      {"a crew of 3 warps, staged (the crew kernel's way)", true, true, 3}};
  int status = 0;
  for (const Way& w : ways) {
    if (w.crew && o.handler == rt::HandlerKind::kFrames) continue;  // its own step and tests
    if (!same_outcome(w.name, cpu, run_engine(o, frames, w.warp, w.staged, w.crew))) status = 1;
  }
  if (o.express) {
    // The express path is an optimisation only: the general path alone gives the same
    // frames, records, counters (but the express path's own), state and memory.
    EngineOptions alone = o;
    alone.express = false;
    Outcome general = run_engine(alone, frames, false, false);
    const uint32_t taken = uint32_t(rt::Counter::kExpress);
    if (general.counters[taken] != 0) {
      std::printf("the general path alone: counter express = %llu\n",
                  static_cast<unsigned long long>(general.counters[taken]));
      status = 1;
    }
    general.counters[taken] = cpu.counters[taken];
    if (!same_outcome("the express path (1 lane)", general, cpu, "the general path alone's"))
      status = 1;
  }
  FILE* out = std::fopen(out_path, "w");
  for (uint32_t i = 0; i < rt::kNumCounters; ++i)
    std::fprintf(out, "counter %s %llu\n", rt::kCounterNames[i],
                 static_cast<unsigned long long>(cpu.counters[i]));
  for (const auto& [name, value] : cpu.state)
    std::fprintf(out, "state %s %llu\n", name.c_str(), static_cast<unsigned long long>(value));
  for (const auto& f : cpu.tx) {
    std::fprintf(out, "tx ");
    hex(out, f);
    std::fprintf(out, "\n");
  }
  for (const auto& c : cpu.completions) {
    std::fprintf(out, "completion ");
    hex(out, c);
    std::fprintf(out, "\n");
  }
  std::fprintf(out, "region ");
  hex(out, cpu.region);
  std::fprintf(out, "\npages ");
  hex(out, cpu.pages);
  std::fprintf(out, "\n");
  std::fclose(out);
  return status;
}

// One pass's view from the host: the records it was shown, the drops counted so far.
struct Shown {
  uint32_t producer;
  uint64_t drops;
  bool operator==(const Shown& o) const { return producer == o.producer && drops == o.drops; }
};

template <class Team>
std::vector<Shown> drive_passes(const Team& t, Engine& e, bool staged, const std::string& passes,
                                const std::vector<long>& drain_after) {
  rt::Staging stg{e.staging.p, e.staging.p + kSlotBytes};
  std::vector<Shown> out;
  for (size_t p = 0; p < passes.size(); ++p) {
    rt::engine_step<S>(t, e.d, e.st, staged ? &stg : nullptr, passes[p] == '1' ? 1u : 0u);
    if (t.leader()) {
      // The host's view: the producer index as published, the loop's own tally of drops.
      const uint32_t shown = rt::load_acquire<S>(e.d.completions.producer);
      out.push_back({shown, e.st.tally.v[uint32_t(rt::Counter::kCompletionDrops)]});
      if (std::count(drain_after.begin(), drain_after.end(), long(p)))
        rt::tx_consume<S>(e.d.completions, shown);
    }
    t.sync();
  }
  return out;
}

int run_publish(const char* in_path, const char* out_path, int argc, char** argv) {
  std::string passes;
  std::vector<long> drain_after;
  std::vector<char*> rest;
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("passes=", 0) == 0)
      passes = a.substr(7);
    else if (a.rfind("drain_after=", 0) == 0)
      for (size_t at = 12; at < a.size(); at = a.find(',', at) + 1) {
        drain_after.push_back(std::stol(a.substr(at)));
        if (a.find(',', at) == std::string::npos) break;
      }
    else
      rest.push_back(argv[i]);
  }
  const EngineOptions o = parse_options(int(rest.size()), rest.data());
  const std::vector<Record> frames = read_records(in_path);
  if (size_t(std::count(passes.begin(), passes.end(), '1')) > frames.size()) {
    std::fprintf(stderr, "publish: more passes take a frame than IN has frames\n");
    return 2;
  }
  std::vector<Shown> ways[2];
  for (int warp = 0; warp < 2; ++warp) {
    Engine e(o);
    uint32_t prod = 0;
    for (const Record& f : frames)
      rt::rx_produce<S>(e.d.rx, prod, f.bytes.data(), uint32_t(f.bytes.size()), 1000);
    if (warp) {
      HostWarp w;
      w.run([&](const HostWarpTeam& t) {
        std::vector<Shown> shown = drive_passes(t, e, true, passes, drain_after);
        if (t.leader()) ways[1] = std::move(shown);  // the other lanes' are empty
      });
    } else {
      ways[0] = drive_passes(rt::SoloTeam{}, e, false, passes, drain_after);
    }
  }
  int status = 0;
  for (size_t p = 0; p < passes.size(); ++p) {
    if (!(ways[0][p] == ways[1][p])) {
      std::printf(
          "pass %zu: the kernel's way shows %u records and %llu drops, the CPU "
          "executor's %u and %llu\n",
          p, ways[1][p].producer, static_cast<unsigned long long>(ways[1][p].drops),
          ways[0][p].producer, static_cast<unsigned long long>(ways[0][p].drops));
      status = 1;
      break;
    }
  }
  FILE* out = std::fopen(out_path, "w");
  for (const Shown& s : ways[0])
    std::fprintf(out, "%u %llu\n", s.producer, static_cast<unsigned long long>(s.drops));
  std::fclose(out);
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (argc == 4 && mode == "crc") return run_crc(argv[2], argv[3]);
  if (argc == 4 && mode == "icrc") return run_icrc(argv[2], argv[3]);
  if (argc == 4 && mode == "icrc_words") return run_icrc_words(argv[2], argv[3]);
  if (argc >= 4 && mode == "engine")
    return run_engine_compare(argv[2], argv[3], argc - 4, argv + 4);
  if (argc >= 4 && mode == "publish") return run_publish(argv[2], argv[3], argc - 4, argv + 4);
  std::fprintf(stderr,
               "usage: %s crc|icrc|icrc_words IN OUT | engine|publish IN OUT [key=value...]\n",
               argv[0]);
  return 2;
}
