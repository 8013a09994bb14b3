// Reading mlx5 WQEs as GPUNetIO's device API lays them out (docs/verbs_mode.md).
#include "rt/verbs/work_request.h"

namespace rt::verbs {

const char* to_string(WqeStatus s) {
  switch (s) {
    case WqeStatus::kOk: return "ok";
    case WqeStatus::kBadSegments: return "segment count does not fit the opcode";
    case WqeStatus::kBadInline: return "inline data longer than its segments";
    case WqeStatus::kUnsupported: return "opcode not supported by the software ConnectX";
  }
  return "?";
}

namespace {

// Data segments from `first` (bytes into the WQE) to the end of the `ds` segments; an
// inline segment instead when its flag is set.
WqeStatus read_data(const uint8_t* bb, uint32_t first, uint8_t ds, WorkRequest& out) {
  const uint32_t end = uint32_t(ds) * kSegBytes;
  if (first >= end || end > kWqeBytes) return WqeStatus::kBadSegments;
  const uint32_t head = load_be32(bb + first);
  if (head & kInlineFlag) {
    const uint32_t n = head & ~kInlineFlag;
    if (n > kMaxInline || first + 4 + n > end) return WqeStatus::kBadInline;
    out.inline_bytes = n;
    for (uint32_t i = 0; i < n; ++i) out.inline_data[i] = bb[first + 4 + i];
    return WqeStatus::kOk;
  }
  const uint32_t count = (end - first) / kSegBytes;
  if (count > 2) return WqeStatus::kBadSegments;
  for (uint32_t i = 0; i < count; ++i) {
    const uint8_t* seg = bb + first + i * kSegBytes;
    out.data[i] = {load_be32(seg + kDataBytes) & kDataByteMask, load_be32(seg + kDataKey),
                   load_be64(seg + kDataAddr)};
  }
  out.data_count = uint8_t(count);
  return WqeStatus::kOk;
}

}  // namespace

WqeStatus decode_wqe(const uint8_t* bb, WorkRequest& out) {
  out = WorkRequest{};
  const uint32_t head = load_be32(bb + kCtrlOpmodIdxOpcode);
  out.opmod = uint8_t(head >> 24);
  out.index = uint16_t(head >> 8);
  out.opcode = uint8_t(head);
  const uint32_t qpn_ds = load_be32(bb + kCtrlQpnDs);
  out.qpn = qpn_ds >> 8;
  out.ds = uint8_t(qpn_ds & 0x3F);
  out.fm_ce_se = bb[kCtrlFmCeSe];
  if (out.ds == 0 || out.ds > kWqeBytes / kSegBytes) return WqeStatus::kBadSegments;
  switch (out.opcode) {
    case kOpNop:
    case kOpWait:
    case kOpDump: return WqeStatus::kOk;  // local: nothing on the wire
    case kOpWriteImm:
    case kOpSendImm: out.imm = load_be32(bb + kCtrlImm); [[fallthrough]];
    case kOpWrite:
    case kOpSend:
    case kOpRead: {
      const bool remote = out.opcode != kOpSend && out.opcode != kOpSendImm;
      if (remote) {
        out.raddr = load_be64(bb + kSegBytes + kRaddrAddr);
        out.rkey = load_be32(bb + kSegBytes + kRaddrKey);
      }
      return read_data(bb, remote ? 2 * kSegBytes : kSegBytes, out.ds, out);
    }
    case kOpAtomicFa:
    case kOpAtomicCs: {
      if (out.ds != 4) return WqeStatus::kBadSegments;
      out.raddr = load_be64(bb + kSegBytes + kRaddrAddr);
      out.rkey = load_be32(bb + kSegBytes + kRaddrKey);
      out.swap_add = load_be64(bb + 2 * kSegBytes + kAtomicSwapAdd);
      out.compare = load_be64(bb + 2 * kSegBytes + kAtomicCompare);
      return read_data(bb, 3 * kSegBytes, out.ds, out);
    }
    default: return WqeStatus::kUnsupported;
  }
}

}  // namespace rt::verbs
