#include "rt/protocol/describe.h"

#include <cctype>
#include <cstdarg>
#include <cstdio>

namespace rt {
namespace {

std::string upper(const char* s) {
  std::string out(s ? s : "?");
  for (char& c : out) c = char(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

std::string fmt(const char* f, ...) __attribute__((format(printf, 1, 2)));
std::string fmt(const char* f, ...) {
  char buf[256];
  va_list ap;
  va_start(ap, f);
  std::vsnprintf(buf, sizeof buf, f, ap);
  va_end(ap);
  return buf;
}

}  // namespace

std::string describe(const DecodeError& e) {
  switch (e.status) {
    case DecodeStatus::kOk: return "ok";
    case DecodeStatus::kTruncated:
      return fmt("truncated %s at offset %u: need %u bytes, %u left", upper(e.field).c_str(),
                 e.offset, e.need, e.have);
    case DecodeStatus::kBadValue:
      if (e.have != kNoLimit)
        return fmt("bad %s at offset %u: %u (limit %u)", e.field, e.offset, e.need, e.have);
      return fmt("bad %s at offset %u: 0x%X", e.field, e.offset, e.need);
    case DecodeStatus::kNotRoce:
      if (e.have == kNoLimit)  // the ethertype: two values would do
        return fmt("not RoCEv2: %s at offset %u is 0x%X, expected 0x%X (IPv4) or 0x%X (IPv6)",
                   e.field, e.offset, e.need, kEtherTypeIpv4, kEtherTypeIpv6);
      return fmt("not RoCEv2: %s at offset %u is 0x%X, expected 0x%X", e.field, e.offset, e.need,
                 e.have);
    case DecodeStatus::kUnsupported:
      if (std::string(e.field) == "bth.opcode")
        return fmt("unsupported bth.opcode at offset %u: 0x%02X (%s transport)", e.offset, e.need,
                   transport_name(transport_of(uint8_t(e.need))));
      return fmt("unsupported %s at offset %u: 0x%X", e.field, e.offset, e.need);
  }
  return "unknown decode status";
}

std::string opcode_name(uint8_t opcode) {
  const OpcodeInfo info = opcode_info(opcode);
  if (!info.valid) return "";
  if (info.transport == Transport::CNP) return "CNP";
  return std::string(transport_name(info.transport)) + "_" + info.operation;
}

}  // namespace rt
