// The BTH opcode table (IBA 9.2.1, table 35).
//
// An opcode is transport (bits 7:5) x operation (bits 4:0). One row per
// operation says which extension headers follow the BTH and where the packet
// sits in a message; the transport decides which operations exist and adds
// its own headers (UD: DETH). Parsing, building and the engine ask the row,
// never a list of opcodes.
#pragma once

#include "rt/protocol/aeth.h"
#include "rt/protocol/atomic_eth.h"
#include "rt/protocol/deth.h"
#include "rt/protocol/ieth.h"
#include "rt/protocol/immdt.h"
#include "rt/protocol/reth.h"

namespace rt {

enum class Transport : uint8_t { RC = 0, UC = 1, RD = 2, UD = 3, CNP = 4, XRC = 5 };

// Extension headers, declared in the order they appear on the wire (IBA 9.2:
// BTH, RDETH, DETH, RETH, AtomicETH, AETH, AtomicAckETH, ImmDt, IETH).
enum Hdr : uint16_t {
  kDeth = 1 << 0,
  kReth = 1 << 1,
  kAtomicEth = 1 << 2,
  kAeth = 1 << 3,
  kAtomicAckEth = 1 << 4,
  kImmDt = 1 << 5,
  kIeth = 1 << 6,
};
constexpr int kNumHdrs = 7;

RT_HD constexpr uint32_t hdr_bytes(int bit) {
  constexpr uint32_t sizes[kNumHdrs] = {sizeof(Deth), sizeof(Reth),         sizeof(AtomicEth),
                                        sizeof(Aeth), sizeof(AtomicAckEth), sizeof(ImmDt),
                                        sizeof(Ieth)};
  return sizes[bit];
}

// Bytes of all extension headers in `mask` that precede `hdr` on the wire.
RT_HD constexpr uint32_t hdr_offset(uint16_t mask, Hdr hdr) {
  uint32_t off = 0;
  for (int bit = 0; bit < kNumHdrs && (1u << bit) != uint32_t(hdr); ++bit)
    if (mask & (1u << bit)) off += hdr_bytes(bit);
  return off;
}

// Bytes of all extension headers in `mask`.
RT_HD constexpr uint32_t ext_bytes(uint16_t mask) {
  uint32_t n = 0;
  for (int bit = 0; bit < kNumHdrs; ++bit)
    if (mask & (1u << bit)) n += hdr_bytes(bit);
  return n;
}

// Where a packet sits in its message, and what it carries.
enum OpFlag : uint16_t {
  kFirst = 1 << 0,
  kMiddle = 1 << 1,
  kLast = 1 << 2,
  kOnly = kFirst | kLast,
  kPayload = 1 << 3,   // carries a payload (possibly empty)
  kRequest = 1 << 4,   // requester -> responder
  kResponse = 1 << 5,  // responder -> requester (ACKs, read responses)
  kSend = 1 << 6,
  kWrite = 1 << 7,
  kRead = 1 << 8,
  kAtomic = 1 << 9,
  kImm = 1 << 10,
};

struct OpRow {
  const char* name;  // operation name as in IBA and Wireshark, e.g. "RDMA_WRITE_ONLY"
  uint16_t hdrs;     // Hdr mask
  uint16_t flags;    // OpFlag mask
};

constexpr int kNumOperations = 0x18;

// Operation rows, indexed by opcode bits 4:0 (IBA table 35).
RT_HD constexpr OpRow operation_row(uint8_t operation) {
  constexpr uint16_t kSendReq = kRequest | kSend | kPayload;
  constexpr uint16_t kWriteReq = kRequest | kWrite | kPayload;
  constexpr uint16_t kReadResp = kResponse | kRead | kPayload;
  switch (operation) {
    case 0x00: return {"SEND_FIRST", 0, kSendReq | kFirst};
    case 0x01: return {"SEND_MIDDLE", 0, kSendReq | kMiddle};
    case 0x02: return {"SEND_LAST", 0, kSendReq | kLast};
    case 0x03: return {"SEND_LAST_WITH_IMMEDIATE", kImmDt, kSendReq | kLast | kImm};
    case 0x04: return {"SEND_ONLY", 0, kSendReq | kOnly};
    case 0x05: return {"SEND_ONLY_WITH_IMMEDIATE", kImmDt, kSendReq | kOnly | kImm};
    case 0x06: return {"RDMA_WRITE_FIRST", kReth, kWriteReq | kFirst};
    case 0x07: return {"RDMA_WRITE_MIDDLE", 0, kWriteReq | kMiddle};
    case 0x08: return {"RDMA_WRITE_LAST", 0, kWriteReq | kLast};
    case 0x09: return {"RDMA_WRITE_LAST_WITH_IMMEDIATE", kImmDt, kWriteReq | kLast | kImm};
    case 0x0A: return {"RDMA_WRITE_ONLY", kReth, kWriteReq | kOnly};
    case 0x0B: return {"RDMA_WRITE_ONLY_WITH_IMMEDIATE", kReth | kImmDt, kWriteReq | kOnly | kImm};
    case 0x0C: return {"RDMA_READ_REQUEST", kReth, kRequest | kRead | kOnly};
    case 0x0D: return {"RDMA_READ_RESPONSE_FIRST", kAeth, kReadResp | kFirst};
    case 0x0E: return {"RDMA_READ_RESPONSE_MIDDLE", 0, kReadResp | kMiddle};
    case 0x0F: return {"RDMA_READ_RESPONSE_LAST", kAeth, kReadResp | kLast};
    case 0x10: return {"RDMA_READ_RESPONSE_ONLY", kAeth, kReadResp | kOnly};
    case 0x11: return {"ACKNOWLEDGE", kAeth, kResponse | kOnly};
    case 0x12: return {"ATOMIC_ACKNOWLEDGE", kAeth | kAtomicAckEth, kResponse | kAtomic | kOnly};
    case 0x13: return {"COMPARE_SWAP", kAtomicEth, kRequest | kAtomic | kOnly};
    case 0x14: return {"FETCH_ADD", kAtomicEth, kRequest | kAtomic | kOnly};
    case 0x16: return {"SEND_LAST_WITH_INVALIDATE", kIeth, kSendReq | kLast};
    case 0x17: return {"SEND_ONLY_WITH_INVALIDATE", kIeth, kSendReq | kOnly};
    default: return {nullptr, 0, 0};
  }
}

RT_HD constexpr const char* transport_name(Transport t) {
  switch (t) {
    case Transport::RC: return "RC";
    case Transport::UC: return "UC";
    case Transport::RD: return "RD";
    case Transport::UD: return "UD";
    case Transport::CNP: return "CNP";
    case Transport::XRC: return "XRC";
  }
  return "?";
}

// Which operations a transport allows (IBA table 35, and RoCEv2 annex A17.9.3
// for the congestion notification packet).
RT_HD constexpr bool transport_allows(Transport t, uint8_t operation) {
  switch (t) {
    case Transport::RC: return operation <= 0x14 || operation == 0x16 || operation == 0x17;
    case Transport::UC: return operation <= 0x0B;
    case Transport::UD: return operation == 0x04 || operation == 0x05;
    default: return false;
  }
}

constexpr uint8_t kOpcodeCnp = 0x81;
constexpr uint32_t kCnpReservedBytes = 16;  // CNP: BTH, 16 reserved bytes, ICRC

struct OpcodeInfo {
  bool valid;
  Transport transport;
  const char* operation;  // nullptr for an invalid opcode; "CNP" for the CNP
  uint16_t hdrs;
  uint16_t flags;

  RT_HD constexpr bool has(Hdr h) const { return hdrs & h; }
  RT_HD constexpr bool is(OpFlag f) const { return (flags & f) == f; }
  RT_HD constexpr uint32_t ext_bytes() const { return rt::ext_bytes(hdrs); }
  RT_HD constexpr uint32_t offset_of(Hdr h) const { return hdr_offset(hdrs, h); }
};

RT_HD constexpr Transport transport_of(uint8_t opcode) { return Transport(opcode >> 5); }

RT_HD constexpr OpcodeInfo opcode_info(uint8_t opcode) {
  const Transport t = transport_of(opcode);
  if (opcode == kOpcodeCnp) return {true, Transport::CNP, "CNP", 0, kPayload};
  const uint8_t op = opcode & 0x1F;
  if (!transport_allows(t, op)) return {false, t, nullptr, 0, 0};
  const OpRow row = operation_row(op);
  const uint16_t hdrs = uint16_t(row.hdrs | (t == Transport::UD ? kDeth : 0));
  return {true, t, row.name, hdrs, row.flags};
}

RT_HD constexpr uint8_t make_opcode(Transport t, uint8_t operation) {
  return uint8_t(uint8_t(t) << 5 | (operation & 0x1F));
}

// Operations a responder names when it answers or executes one (IBA table 35).
constexpr uint8_t kOperationAcknowledge = 0x11;
constexpr uint8_t kOperationAtomicAcknowledge = 0x12;
constexpr uint8_t kOperationCompareSwap = 0x13;
constexpr uint8_t kOperationFetchAdd = 0x14;
static_assert(operation_row(kOperationAtomicAcknowledge).flags & kAtomic, "the atomic's answer");
static_assert(operation_row(kOperationFetchAdd).hdrs == kAtomicEth &&
                  operation_row(kOperationCompareSwap).hdrs == kAtomicEth,
              "both atomics carry an AtomicETH");

// The opcodes of the Holoscan Sensor Bridge contract (DESIGN.md section 3).
constexpr uint8_t kUcRdmaWriteOnly = 0x2A;
constexpr uint8_t kUcRdmaWriteOnlyImm = 0x2B;
constexpr uint8_t kUcSendOnly = 0x24;
constexpr uint8_t kRcAcknowledge = 0x11;
static_assert(opcode_info(kUcRdmaWriteOnly).has(kReth), "HSB data packets carry a RETH");
static_assert(opcode_info(kUcRdmaWriteOnlyImm).has(kReth) &&
                  opcode_info(kUcRdmaWriteOnlyImm).has(kImmDt),
              "HSB end-of-frame carries RETH and immediate");
static_assert(opcode_info(kUcRdmaWriteOnlyImm).offset_of(kImmDt) == sizeof(Reth),
              "ImmDt follows RETH");
static_assert(opcode_info(0x65).has(kDeth) && opcode_info(0x65).offset_of(kImmDt) == sizeof(Deth),
              "UD SEND with immediate: DETH then ImmDt");
static_assert(opcode_info(0x12).ext_bytes() == 12, "ATOMIC ACKNOWLEDGE: AETH + AtomicAckETH");
static_assert(!opcode_info(0x2C).valid, "UC has no RDMA READ");

}  // namespace rt
