// The built-in handlers, callable from Python on the host, so tests run the exact code the engine
// runs (rt/handlers/*.h) against the Python reference.
#include <pybind11/pybind11.h>

#include <cstring>
#include <string>
#include <vector>

#include "register.h"
#include "rt/handlers/qec.h"

namespace rt::py {
namespace {

std::string qec_status_text(int status) {
  switch (status) {
    case kQecRequestTooShort: return "request too short";
    case kQecReplyTooSmall: return "reply buffer too small";
  }
  return "status " + std::to_string(status);
}

// What the blob's header says, so a rejection shows the values it was judged on.
std::string header_text(const uint8_t* p, size_t len) {
  if (len < kQecBlobHeaderBytes) return " (shorter than the 16-byte header)";
  std::string magic;
  for (int i = 0; i < 4; ++i) magic += (p[i] >= 0x20 && p[i] < 0x7f) ? char(p[i]) : '?';
  auto u16 = [&](size_t off) {
    return std::to_string(uint32_t(p[off]) | uint32_t(p[off + 1]) << 8);
  };
  return " (magic " + magic + ", version " + u16(4) + ", distance " + u16(6) + ", num_data " +
         u16(8) + ", num_x_checks " + u16(10) + ", num_z_checks " + u16(12) + ", reserved " +
         u16(14) + ")";
}

pybind11::bytes qec_decode_py(const pybind11::bytes& blob, const pybind11::bytes& request) {
  const std::string b = blob;
  const std::string req = request;
  // qec_table_from_blob wants the tables 4-byte aligned; a Python bytes object promises no
  // alignment, so the blob is copied into uint32_t storage first.
  std::vector<uint32_t> aligned((b.size() + 3) / 4);
  if (!b.empty()) std::memcpy(aligned.data(), b.data(), b.size());
  QecTable table;
  const auto* bytes = reinterpret_cast<const uint8_t*>(aligned.data());
  if (!qec_table_from_blob(bytes, b.size(), &table))
    throw pybind11::value_error(
        "qec table blob of " + std::to_string(b.size()) + " bytes rejected" +
        header_text(bytes, b.size()) + ": needs magic QECT, version " +
        std::to_string(kQecBlobVersion) +
        ", num_data = distance^2 <= " + std::to_string(kQecMaxDataQubits) +
        ", num_x_checks + num_z_checks = num_data - 1, at most " +
        std::to_string(kQecMaxChecksPerType) +
        " checks per type, reserved 0, and exactly 16 + 4 * (2^num_z_checks + 2^num_x_checks) "
        "bytes (LookupTableDecoder.table_blob() writes it)");
  uint8_t reply[8];
  const int n = qec_decode(table, reinterpret_cast<const uint8_t*>(req.data()),
                           uint32_t(req.size()), reply, sizeof(reply));
  if (n < 0)
    throw pybind11::value_error("qec_decode: " + qec_status_text(n) + " (request of " +
                                std::to_string(req.size()) + " bytes, distance " +
                                std::to_string(table.distance) + " needs " +
                                std::to_string(table.request_bytes) + ")");
  return pybind11::bytes(reinterpret_cast<const char*>(reply), size_t(n));
}

}  // namespace

void register_handlers(pybind11::module_& m) {
  m.def("qec_decode", &qec_decode_py, pybind11::arg("blob"), pybind11::arg("request"),
        "Decode one qec request with the C++ handler (rt/handlers/qec.h): the reply payload.");
}

}  // namespace rt::py
