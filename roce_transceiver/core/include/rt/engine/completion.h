// Completion records: what the engine tells the host about each message it
// completed, through an outbound ring (tx_ring.h) whose slots hold a record
// header, then the request bytes, then the reply bytes (each truncated to
// half of what is left of the slot; the lengths say how much there was).
#pragma once

#include "rt/platform.h"

namespace rt {

enum CompletionFlag : uint8_t {
  kCompletionHasImm = 1 << 0,
  kCompletionHandlerError = 1 << 1,
  kCompletionReplyDropped = 1 << 2,  // the handler answered but the tx ring was full
  kCompletionFrame = 1 << 3,         // a frame (frames.h): a FrameRecord in the data area
  kCompletionSlice = 1 << 4,         // a frame's slice (frames.h): a SliceRecord in the data area
};

struct CompletionRecord {
  uint32_t request_len;  // bytes of the whole request
  int32_t reply_len;     // bytes of the reply; kNoReply (-1) or kHandlerError (-2)
  uint32_t imm;
  uint8_t opcode;
  uint8_t flags;  // CompletionFlag
  uint16_t reserved;
  uint32_t psn;  // PSN of the packet that completed the message
  uint32_t reserved2;
  uint64_t rx_timestamp_ns;    // producer's clock when the last packet arrived
  uint64_t done_timestamp_ns;  // engine's clock after the reply was submitted
};
static_assert(sizeof(CompletionRecord) == 40, "the host reads this layout");

RT_HD constexpr uint32_t completion_data_bytes(uint32_t slot_bytes) {
  return slot_bytes > sizeof(CompletionRecord)
             ? (slot_bytes - uint32_t(sizeof(CompletionRecord))) / 2
             : 0;
}

}  // namespace rt
