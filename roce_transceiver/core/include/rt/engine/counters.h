// The engine's counters: one enum, one name table, one array in memory the
// host can read while the loop runs. Each counter has exactly one writer (the
// engine, or the producer for ring drops), so updates are plain relaxed
// stores of the writer's own running value: no read-modify-write across PCIe.
#pragma once

#include "rt/platform.h"

namespace rt {

enum class Counter : uint32_t {
  kRxPackets,  // frames taken from the rx ring
  kRxBytes,
  kTxPackets,  // frames submitted to the tx ring (replies, ACKs, host sends)
  kTxBytes,
  kMessages,         // messages completed and handed to the handler
  kReplies,          // handler replies sent
  kIcrcErrors,       // dropped: ICRC mismatch
  kMalformed,        // dropped: did not decode, or wrong transport for the QP
  kWrongQp,          // dropped: dest QP is not ours
  kBadPkey,          // dropped: P_Key mismatch
  kPsnGaps,          // PSN jumps ahead (UC: counted and resynced; RC: NAKed once)
  kResyncDrops,      // UC, after a gap: Middles and Lasts dropped until a First or Only
  kDuplicates,       // RC: PSN behind the expected one (re-ACKed); UC: dropped
  kOpcodeSequence,   // a Middle/Last without its First, or a First inside a message
  kOutOfRange,       // RETH rkey unknown or [va, va+len) outside its region: nothing written
  kUnsupported,      // opcodes this responder does not serve (READ): RC NAKs them
  kHandlerErrors,    // the handler rejected a message
  kTxRingFull,       // a reply or ACK dropped: the tx ring had no free slot
  kCompletionDrops,  // the host fell behind: a completion record was dropped
  kAcksSent,
  kNaksSent,
  kAcksReceived,  // RC ACKs for what we sent
  kNaksReceived,
  kHostSends,           // messages the host asked to transmit, sent
  kExpress,             // packets taken by the express path (prediction.h: SEND Onlys, WRITE
                        // Onlys with Immediate, RC ACK requests too; with qp.retransmit the
                        // peer's ACKs): a part of rx_packets
  kFrames,              // frames handler: frames recorded for the host
  kFramesDropped,       // frames not recorded, for any of the reasons in frames.h
  kFramesIncomplete,    // a part of frames_dropped: closed by a packet for another page
  kFramesMissing,       // a part of frames_dropped: nothing of them arrived (frames.h)
  kFrameCrcErrors,      // frames whose page CRC differs from their metadata's
  kFramePageBusy,       // packets not written: their page was still held by the host
  kFramesCrcFolded,     // frames whose page CRC came from their packets' own pass (batch.h),
                        // the page not read again: a part of frames and frames_dropped
  kFrameSlices,         // frames.slice_bytes: slices of frames recorded for the host
  kFrameSlicesPartial,  // a part of frame_slices: a packet with some of its bytes was lost
  kAtomics,             // RC FETCH_ADD / COMPARE_SWAP executed (replays of a duplicate not counted)
  kRingDrops,           // written by the producer: rx ring full, packet dropped
  // qp.retransmit, the RC requester (requester.h)
  kRcAcked,          // our packets the peer acknowledged
  kRcRetransmits,    // packets sent again (after a NAK, a timeout or an RNR NAK)
  kRcTimeouts,       // no acknowledgement within qp.ack_timeout_us: sent again from the oldest
  kRnrNaksReceived,  // the peer was not ready: sent again after its timer (also naks_received)
  kRnrNaksSent,      // requests refused with an RNR NAK: the window was full
  kRcErrors,         // the requester went to the error state (retries exhausted, a fatal NAK)
  kRcDropped,        // replies and host sends never acknowledged: lost in the error state
  kCount
};

constexpr uint32_t kNumCounters = uint32_t(Counter::kCount);

constexpr const char* kCounterNames[] = {
    "rx_packets",       "rx_bytes",
    "tx_packets",       "tx_bytes",
    "messages",         "replies",
    "icrc_errors",      "malformed",
    "wrong_qp",         "bad_pkey",
    "psn_gaps",         "resync_drops",
    "duplicates",       "opcode_sequence",
    "out_of_range",     "unsupported",
    "handler_errors",   "tx_ring_full",
    "completion_drops", "acks_sent",
    "naks_sent",        "acks_received",
    "naks_received",    "host_sends",
    "express",          "frames",
    "frames_dropped",   "frames_incomplete",
    "frames_missing",   "frame_crc_errors",
    "frame_page_busy",  "frames_crc_folded",
    "frame_slices",     "frame_slices_partial",
    "atomics",          "ring_drops",
    "rc_acked",         "rc_retransmits",
    "rc_timeouts",      "rnr_naks_received",
    "rnr_naks_sent",    "rc_errors",
    "rc_dropped",
};
static_assert(sizeof(kCounterNames) / sizeof(kCounterNames[0]) == kNumCounters,
              "one name per counter");

// Host-visible counter block, written only by publish().
struct alignas(64) Counters {
  uint64_t v[kNumCounters];
};

// The writer's own tally, in memory close to it (device memory for a kernel):
// counting never reads host memory across PCIe; publish() pushes what changed.
struct CounterTally {
  uint64_t v[kNumCounters];
  uint64_t dirty;  // bit i: v[i] changed since the last publish
};
static_assert(kNumCounters <= 64, "dirty is a 64-bit mask");

RT_HD inline void count(CounterTally& t, Counter which, uint64_t n = 1) {
  t.v[uint32_t(which)] += n;
  t.dirty |= uint64_t(1) << uint32_t(which);
}

// Several counts at once, for a hot path: the adds are independent of one
// another, and the dirty mask is written once (count() after count() is a chain).
struct CountOf {
  Counter which;
  uint64_t n;
};
template <class... Counts>
RT_HD inline void count_all(CounterTally& t, Counts... counts) {
  uint64_t dirty = 0;
  ((t.v[uint32_t(counts.which)] += counts.n, dirty |= uint64_t(1) << uint32_t(counts.which)), ...);
  t.dirty |= dirty;
}

template <Scope S>
RT_HD RT_COLD inline void publish(CounterTally& t, Counters* out) {
  for (uint32_t i = 0; t.dirty; ++i, t.dirty >>= 1)
    if (t.dirty & 1u) store_relaxed<S>(&out->v[i], t.v[i]);
}

}  // namespace rt
