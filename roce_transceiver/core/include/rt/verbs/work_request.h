// One WQE as the software ConnectX reads it: the fields of the segments its opcode carries,
// never the bytes the device leaves unwritten (docs/verbs_mode.md, "garbage bytes").
#pragma once

#include <cstdint>

#include "rt/verbs/mlx5_layout.h"

namespace rt::verbs {

struct DataSegment {
  uint32_t bytes = 0;
  uint32_t lkey = 0;
  uint64_t addr = 0;
};

struct WorkRequest {
  uint16_t index = 0;  // the low 16 bits of the WQE index, as the device wrote them
  uint8_t opcode = 0;
  uint8_t opmod = 0;
  uint8_t ds = 0;  // 16-byte segments, control included
  uint8_t fm_ce_se = 0;
  uint32_t qpn = 0;
  uint32_t imm = 0;  // WRITE with immediate only
  uint64_t raddr = 0;
  uint32_t rkey = 0;
  uint32_t inline_bytes = 0;  // > 0: the data is inline
  uint8_t inline_data[kMaxInline] = {};
  DataSegment data[2];
  uint8_t data_count = 0;
  uint64_t swap_add = 0;  // FETCH_ADD: the addend
  uint64_t compare = 0;

  bool signalled() const { return (fm_ce_se & 0x0C) == kCeAlways; }
};

enum class WqeStatus : uint8_t { kOk, kBadSegments, kBadInline, kUnsupported };

const char* to_string(WqeStatus s);

// Reads the WQE in `bb` (one 64-byte basic block: every opcode the device API posts on a
// QP fits one, except the 8-byte masked compare-swap, which is unsupported here).
WqeStatus decode_wqe(const uint8_t* bb, WorkRequest& out);

}  // namespace rt::verbs
