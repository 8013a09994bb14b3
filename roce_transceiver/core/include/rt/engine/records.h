// The engine's records for the host: a completion record a message (request and
// reply bytes, as much as fits) on the completion ring, reserved, written in wide
// stores and published in batches. The frames stream's record of a frame is
// frame_stream.h's; both go through the ring's reserve and submit here.
#pragma once

#include "rt/byte_copy.h"
#include "rt/engine/state.h"
#include "rt/queues/copy_wide.h"

namespace rt {
namespace engine_detail {

// The handler's answer to one message, and where its reply frame is built.
struct HandlerReply {
  uint8_t* slot;   // the tx slot reserved for the reply, or null: the ring is full
  uint8_t* frame;  // where the reply frame is built: the slot, or the staging buffer
  uint8_t* out;    // the reply payload (in `frame`, or the scratch buffer)
  int n;           // what the handler returned
  uint8_t flags;   // the completion's flags so far
};

// How many loop passes share one reading of the host's consumer index while the completion
// ring is full: each reading is a bus round trip (~1 us from a GPU), which a full ring would
// otherwise put on every message while the host is behind. After the host has made room, the
// records of at most this many passes are dropped (and counted) before the loop sees it.
constexpr uint32_t kCompletionRetryPasses = 32;

// Leader: the slot for the next completion record, or null when the host has not made room
// (the caller counts the drop). A full ring publishes what is written first, so the host can
// drain it, and reads the consumer index again at its first full call and then once every
// `retry_passes` passes (1: at every call) until there is room.
RT_HD inline uint8_t* reserve_completion(const EngineDesc& d, EngineState& st,
                                         uint32_t retry_passes) {
  const TxRing& r = d.completions;
  if (st.comp_pi - st.comp_ci_seen >= r.depth()) {
    publish_completions(d, st);
    // Signed: comp_read_at is never far from passes (it follows them while there is room).
    if (retry_passes > 1 && int32_t(st.passes - st.comp_read_at) < 0) return nullptr;
    st.comp_read_at = st.passes + retry_passes;
    st.comp_ci_seen = load_acquire<Scope::kSystem>(r.consumer);
    if (st.comp_pi - st.comp_ci_seen >= r.depth()) return nullptr;
  }
  st.comp_read_at = st.passes;  // room: the next full ring reads at once
  return r.slot(st.comp_pi);
}

// Leader: the record at comp_pi is written; the host sees it once published, after at most
// completion_batch records or when the loop settles (end_pass). No fence here: a system-scope
// release waits for every write across the bus before it, and one per message put it between
// a reply and the next request (issue 16: 9.37 against 6.88 us p50 in the roundtrip app).
RT_HD inline void submit_completion(const EngineDesc& d, EngineState& st, uint32_t len,
                                    uint64_t timestamp_ns) {
  tx_prepare(d.completions, st.comp_pi, len, 0, timestamp_ns);
  if (st.comp_pi - st.comp_published >= d.completion_batch) publish_completions(d, st);
}

// The record's 40-byte header in three stores (16 + 16 + 8 bytes) instead of a store a field:
// across PCIe each store is a bus write. `rec` is a completion slot (16-byte aligned).
RT_HD inline void store_record_header(uint8_t* rec, const CompletionRecord& c) {
#if RT_HOST_FUNCTIONS  // NVRTC 13.0 has no offsetof; the host and nvcc builds check it
  static_assert(
      offsetof(CompletionRecord, reply_len) == 4 && offsetof(CompletionRecord, imm) == 8 &&
          offsetof(CompletionRecord, opcode) == 12 && offsetof(CompletionRecord, flags) == 13 &&
          offsetof(CompletionRecord, psn) == 16 &&
          offsetof(CompletionRecord, rx_timestamp_ns) == 24 &&
          offsetof(CompletionRecord, done_timestamp_ns) == 32,
      "the packing below follows the layout the host reads");
#endif
  auto* out = reinterpret_cast<Chunk16*>(rec);
  out[0] = Chunk16{
      uint64_t(c.request_len) | uint64_t(uint32_t(c.reply_len)) << 32,
      uint64_t(c.imm) |
          uint64_t(uint32_t(c.opcode) | uint32_t(c.flags) << 8 | uint32_t(c.reserved) << 16) << 32};
  out[1] = Chunk16{uint64_t(c.psn) | uint64_t(c.reserved2) << 32, c.rx_timestamp_ns};
  *reinterpret_cast<uint64_t*>(rec + 32) = c.done_timestamp_ns;
}

// Team-wide: n bytes of a record's data. A warp's lanes store neighbouring bytes together,
// so a request of a few dozen bytes is one or two bus writes, not one a byte; the source is
// memory next to the team (the staged frame and reply). A team of one copies exactly n
// bytes from wherever they are (the assembled message, the reply scratch).
template <class Team>
RT_HD inline void copy_record_bytes(const Team& t, uint8_t* dst, const uint8_t* src, uint32_t n) {
  if constexpr (Team::kLanes == 1)
    copy_bytes(dst, src, n);
  else
    copy_bytes_team(t, dst, src, n);
}

// Team-wide: the host's record of one message, request and reply bytes, as much as fits
// (each truncated to half the slot's data area). Written after the reply went out.
template <class Team>
RT_HD RT_COLD inline void record_completion(const Team& t, const EngineDesc& d, EngineState& st,
                                            const Message& m, const HandlerReply& r, uint32_t psn,
                                            uint64_t rx_ts) {
  if (!d.record_completions) return;
  uint64_t slot = 0;
  uint64_t done_ts = 0;
  if (t.leader()) {
    slot = reinterpret_cast<uintptr_t>(reserve_completion(d, st, kCompletionRetryPasses));
    if (slot)
      done_ts = now_ns();
    else
      count(st.tally, Counter::kCompletionDrops);
  }
  auto* rec = reinterpret_cast<uint8_t*>(t.from_leader(slot));
  if (!rec) return;  // every lane: the same verdict
  const uint32_t half = completion_data_bytes(d.completions.slot_bytes);
  const uint32_t req_n = m.len < half ? m.len : half;
  const uint32_t rep_n = r.n > 0 ? (uint32_t(r.n) < half ? uint32_t(r.n) : half) : 0;
  if (t.leader()) {
    CompletionRecord c{};
    c.request_len = m.len;
    c.reply_len = r.n;
    c.imm = m.imm;
    c.opcode = m.opcode;
    c.flags = r.flags;
    c.psn = psn;
    c.rx_timestamp_ns = rx_ts;
    c.done_timestamp_ns = done_ts;
    store_record_header(rec, c);
  }
  copy_record_bytes(t, rec + sizeof(CompletionRecord), m.data, req_n);
  copy_record_bytes(t, rec + sizeof(CompletionRecord) + half, r.out, rep_n);
  t.sync();  // every lane's stores before the leader's publication
  if (t.leader()) submit_completion(d, st, uint32_t(sizeof(CompletionRecord)) + 2 * half, done_ts);
}

}  // namespace engine_detail
}  // namespace rt
