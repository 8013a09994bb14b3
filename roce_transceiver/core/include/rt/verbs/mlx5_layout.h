// The mlx5 work-queue and completion layouts that GPUNetIO's verbs device API writes and
// polls (docs/verbs_mode.md). Our own definitions of hardware facts, stable across GPUNetIO
// releases; a test builds WQEs through GPUNetIO's structures and reads them with these. The
// QP descriptor, whose layout is GPUNetIO's own and changes between its releases, is filled
// through its header (descriptor.h).
#pragma once

#include <cstdint>
#include <cstring>

namespace rt::verbs {

// -- byte order: WQEs and CQEs are big-endian, the doorbell word is native ----------------
inline uint16_t load_be16(const uint8_t* p) { return uint16_t(p[0] << 8 | p[1]); }
inline uint32_t load_be32(const uint8_t* p) {
  return uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | p[3];
}
inline uint64_t load_be64(const uint8_t* p) {
  return uint64_t(load_be32(p)) << 32 | load_be32(p + 4);
}
inline void store_be16(uint8_t* p, uint16_t v) {
  p[0] = uint8_t(v >> 8);
  p[1] = uint8_t(v);
}
inline void store_be32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = uint8_t(v >> (24 - 8 * i));
}
inline void store_be64(uint8_t* p, uint64_t v) {
  store_be32(p, uint32_t(v >> 32));
  store_be32(p + 4, uint32_t(v));
}

// -- work queue entries -----------------------------------------------------------------
constexpr uint32_t kWqeBytes = 64;  // one basic block
constexpr uint32_t kSegBytes = 16;

enum Opcode : uint8_t {
  kOpNop = 0x00,
  kOpWrite = 0x08,
  kOpWriteImm = 0x09,
  kOpSend = 0x0a,
  kOpSendImm = 0x0b,
  kOpWait = 0x0f,
  kOpRead = 0x10,
  kOpAtomicCs = 0x11,
  kOpAtomicFa = 0x12,
  kOpMaskedCs = 0x14,
  kOpMaskedFa = 0x15,
  kOpDump = 0x23,
};

// Control segment, bytes 0-15 of every WQE.
constexpr uint32_t kCtrlOpmodIdxOpcode = 0;  // BE32: opmod 31..24 | index 23..8 | opcode 7..0
constexpr uint32_t kCtrlQpnDs = 4;           // BE32: qpn 31..8 | ds 5..0 (16-byte segments)
constexpr uint32_t kCtrlFmCeSe = 11;         // fence 7..5 | completion 3..2 | solicited 1
constexpr uint32_t kCtrlImm = 12;            // WRITE with immediate: the immediate, raw
constexpr uint8_t kCeAlways = 0x08;          // CQ_UPDATE: a CQE for this WQE
// Remote address segment: raddr BE64, rkey (big-endian mkey).
constexpr uint32_t kRaddrAddr = 0, kRaddrKey = 8;
// Data segment: byte_count BE32, lkey, addr BE64.
constexpr uint32_t kDataBytes = 0, kDataKey = 4, kDataAddr = 8;
constexpr uint32_t kDataByteMask = 0x7FFFFFFF;
// Inline segment: BE32(bytes | kInlineFlag), then the bytes.
constexpr uint32_t kInlineFlag = 0x80000000;
constexpr uint32_t kMaxInline = 28;
// Atomic segment: swap_add BE64, compare BE64.
constexpr uint32_t kAtomicSwapAdd = 0, kAtomicCompare = 8;

// -- doorbells ----------------------------------------------------------------------------
// Who rings: GPUNetIO's NIC handlers (enum doca_gpu_dev_verbs_nic_handler, whose numbers differ
// between its releases: BlueFlame is 3 in the NCCL wheel's, 6 in nvshmem's; the descriptor and
// the kernels map these by name).
enum class NicHandler : uint8_t {
  kCpuProxy,  // the device stores a native 64-bit producer count at sq_db; a CPU thread rings
  kGpuSmDb,   // the device writes the doorbell record (sq_dbrec) and rings the UAR (sq_db)
  kGpuSmBf,   // BlueFlame: the device writes the whole WQE into the window at sq_db
};

// The doorbell page the software ConnectX gives the device (docs/verbs_mode.md): sq_db points
// at byte 0 (the CPU proxy's count, the UAR doorbell word, or the 64-byte BlueFlame window),
// sq_dbrec at kSqDbrOffset, the send CQ's dbrec at kCqDbrOffset (written by no device call the
// software ConnectX is driven with; kept apart so that it can clobber nothing).
constexpr uint32_t kDoorbellPageBytes = 128;
constexpr uint32_t kBlueFlameBytes = 64;
constexpr uint32_t kSqDbrOffset = 64;
constexpr uint32_t kCqDbrOffset = 72;
// A doorbell (the UAR word, and what submit_bf rings over the window's first 8 bytes after the
// BlueFlame write) is the first 8 bytes of a control segment with the producer index where a
// WQE's index would be and no segments (ds 0): a WQE always has ds >= 1.
constexpr uint32_t kDoorbellBytes = 8;
inline uint32_t doorbell_ds(const uint8_t* db) { return db[7] & 0x3F; }

// -- completion queue entries (64 bytes) ------------------------------------------------
constexpr uint32_t kCqeBytes = 64;
constexpr uint32_t kCqeByteCnt = 44;     // BE32
constexpr uint32_t kCqeSyndrome = 55;    // error CQEs
constexpr uint32_t kCqeSopDropQpn = 56;  // BE32: WQE opcode 31..24 | qpn
constexpr uint32_t kCqeWqeCounter = 60;  // BE16
constexpr uint32_t kCqeOpOwn = 63;       // opcode 7..4 | owner 0
constexpr uint8_t kCqeRequester = 0x0, kCqeRequesterError = 0xd, kCqeInvalid = 0xf;
// Error syndromes (as rdma-core names them).
enum Syndrome : uint8_t {
  kSynLocalLength = 0x01,
  kSynLocalQpOperation = 0x02,
  kSynLocalProtection = 0x04,
  kSynFlushed = 0x05,
  kSynRemoteInvalidRequest = 0x12,
  kSynRemoteAccess = 0x13,
  kSynRemoteOperation = 0x14,
  kSynRetryExceeded = 0x15,
};

}  // namespace rt::verbs
