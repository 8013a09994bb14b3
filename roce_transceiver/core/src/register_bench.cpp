// Timing loops for roce_transceiver.bench: our ICRC and CRC-32 against libz's crc32.
//
// Every candidate runs in the same C++ loop over the same byte ranges with the GIL released, so
// the comparison measures the CRC and not Python's call overhead. libz arrives as a bare function
// address (Python finds it with ctypes) so the core neither links nor loads zlib itself.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "register.h"
#include "rt/protocol/crc32_fast.h"
#include "rt/protocol/describe.h"
#include "rt/protocol/icrc.h"

namespace rt::py {
namespace {

// zlib's crc32() as declared in zlib.h: uLong crc32(uLong crc, const Bytef* buf, uInt len).
using ZlibCrc32 = unsigned long (*)(unsigned long, const unsigned char*, unsigned int);

struct Ranges {
  const uint8_t* base = nullptr;
  std::vector<uint64_t> offsets;
  std::vector<uint64_t> lengths;
};

// Checked once before timing, so the loops themselves never test bounds.
Ranges check_ranges(const pybind11::buffer_info& b, std::vector<uint64_t> offsets,
                    std::vector<uint64_t> lengths, int64_t iterations, uint64_t max_len) {
  const uint64_t size = uint64_t(b.size) * uint64_t(b.itemsize);
  if (offsets.size() != lengths.size())
    throw pybind11::value_error("offsets has " + std::to_string(offsets.size()) +
                                " entries, lengths " + std::to_string(lengths.size()) +
                                ": they must match");
  if (offsets.empty()) throw pybind11::value_error("offsets is empty: nothing to time");
  if (iterations < 1)
    throw pybind11::value_error("iterations=" + std::to_string(iterations) + ": must be >= 1");
  for (size_t i = 0; i < offsets.size(); ++i) {
    if (lengths[i] > max_len)
      throw pybind11::value_error("lengths[" + std::to_string(i) +
                                  "]=" + std::to_string(lengths[i]) + ": above the limit " +
                                  std::to_string(max_len));
    if (offsets[i] > size || lengths[i] > size - offsets[i])
      throw pybind11::value_error("range " + std::to_string(i) + " [" + std::to_string(offsets[i]) +
                                  ", +" + std::to_string(lengths[i]) + ") runs past the data (" +
                                  std::to_string(size) + " bytes)");
  }
  return {static_cast<const uint8_t*>(b.ptr), std::move(offsets), std::move(lengths)};
}

// Where each timing loop leaves its XOR of results; volatile, so the compiler cannot drop the work.
volatile uint32_t g_sink = 0;

// Seconds for `iterations` passes of fn(range) over all ranges.
template <typename Fn>
double time_passes(const Ranges& r, int64_t iterations, Fn fn) {
  pybind11::gil_scoped_release nogil;
  uint32_t acc = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t it = 0; it < iterations; ++it)
    for (size_t i = 0; i < r.offsets.size(); ++i)
      acc ^= fn(r.base + r.offsets[i], size_t(r.lengths[i]));
  const auto t1 = std::chrono::steady_clock::now();
  g_sink = acc;
  return std::chrono::duration<double>(t1 - t0).count();
}

double bench_icrc(const pybind11::buffer& frames, std::vector<uint64_t> offsets,
                  std::vector<uint64_t> lengths, int64_t iterations) {
  const pybind11::buffer_info b = frames.request();
  const Ranges r = check_ranges(b, std::move(offsets), std::move(lengths), iterations,
                                std::numeric_limits<uint32_t>::max());
  // A frame that does not decode would time the error path, not the ICRC.
  for (size_t i = 0; i < r.offsets.size(); ++i) {
    const DecodeResult d = decode(ByteSpan(r.base + r.offsets[i], size_t(r.lengths[i])));
    if (!d.ok())
      throw pybind11::value_error("frame " + std::to_string(i) + ": " + describe(d.error));
  }
  return time_passes(r, iterations, [](const uint8_t* p, size_t n) {
    const DecodeResult d = decode(ByteSpan(p, n));
    return icrc_compute(d.frame);
  });
}

double bench_crc32_ours(const pybind11::buffer& data, std::vector<uint64_t> offsets,
                        std::vector<uint64_t> lengths, int64_t iterations) {
  const pybind11::buffer_info b = data.request();
  const Ranges r = check_ranges(b, std::move(offsets), std::move(lengths), iterations,
                                std::numeric_limits<uint64_t>::max());
  return time_passes(r, iterations,
                     [](const uint8_t* p, size_t n) { return crc32_update_host(0, p, n); });
}

double bench_crc32_fn(uintptr_t fn_address, const pybind11::buffer& data,
                      std::vector<uint64_t> offsets, std::vector<uint64_t> lengths,
                      int64_t iterations) {
  if (fn_address == 0) throw pybind11::value_error("fn_address=0: not a function");
  const pybind11::buffer_info b = data.request();
  // zlib's length parameter is an unsigned int.
  const Ranges r = check_ranges(b, std::move(offsets), std::move(lengths), iterations,
                                std::numeric_limits<unsigned int>::max());
  const auto fn = reinterpret_cast<ZlibCrc32>(fn_address);
  return time_passes(r, iterations, [fn](const uint8_t* p, size_t n) {
    return uint32_t(fn(0, p, static_cast<unsigned int>(n)));
  });
}

}  // namespace

void register_bench(pybind11::module_& m) {
  using pybind11::arg;
  m.def("bench_icrc", &bench_icrc, arg("frames"), arg("offsets"), arg("lengths"), arg("iterations"),
        "Seconds to decode and compute the ICRC of every frame (frames[off:off+len]), "
        "`iterations` times.");
  m.def("bench_crc32_ours", &bench_crc32_ours, arg("data"), arg("offsets"), arg("lengths"),
        arg("iterations"), "Seconds for our CRC-32 over every range, `iterations` times.");
  m.def("bench_crc32_fn", &bench_crc32_fn, arg("fn_address"), arg("data"), arg("offsets"),
        arg("lengths"), arg("iterations"),
        "Seconds for a zlib-style crc32(crc, buf, len) at fn_address over every range, "
        "`iterations` times, in the same loop as bench_crc32_ours.");
}

}  // namespace rt::py
