// The protocol code as nvcc compiled it for the GPU, exposed so tests can
// compare its bytes with the host build's. Each call runs one short kernel.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "register.h"
#include "rt/cuda/protocol_device.h"

namespace rt::py {
namespace {

std::vector<uint8_t> to_vector(const pybind11::bytes& b) {
  const std::string s = b;
  return std::vector<uint8_t>(s.begin(), s.end());
}

pybind11::bytes to_bytes(const std::vector<uint8_t>& v) {
  return pybind11::bytes(reinterpret_cast<const char*>(v.data()), v.size());
}

}  // namespace

void register_device_checks(pybind11::module_& m) {
  m.def(
      "icrc_on_device",
      [](const pybind11::bytes& frames, const std::vector<uint32_t>& offsets,
         const std::vector<uint32_t>& lengths) {
        const std::vector<uint8_t> in = to_vector(frames);
        std::vector<uint32_t> per_thread, per_warp;
        {
          pybind11::gil_scoped_release nogil;
          cuda::icrc_on_device(in, offsets, lengths, per_thread, per_warp);
        }
        return pybind11::make_tuple(per_thread, per_warp);
      },
      pybind11::arg("frames"), pybind11::arg("offsets"), pybind11::arg("lengths"),
      "ICRC of each frame on the GPU: (one thread per frame, one warp per frame).");
  m.def(
      "reencode_on_device",
      [](const pybind11::bytes& frames, const std::vector<uint32_t>& offsets,
         const std::vector<uint32_t>& lengths) {
        const std::vector<uint8_t> in = to_vector(frames);
        std::vector<uint8_t> out;
        std::vector<uint32_t> out_lengths;
        {
          pybind11::gil_scoped_release nogil;
          cuda::reencode_on_device(in, offsets, lengths, out, out_lengths);
        }
        return pybind11::make_tuple(to_bytes(out), out_lengths);
      },
      pybind11::arg("frames"), pybind11::arg("offsets"), pybind11::arg("lengths"),
      "Decode and re-encode each frame on the GPU: (bytes at the same offsets, lengths).");
  m.def(
      "hsb_psn_on_device",
      [](const pybind11::bytes& records, const std::vector<uint32_t>& a,
         const std::vector<uint32_t>& b) {
        const std::vector<uint8_t> in = to_vector(records);
        std::vector<uint8_t> out;
        std::vector<uint32_t> imm;
        std::vector<int32_t> diff;
        {
          pybind11::gil_scoped_release nogil;
          cuda::hsb_psn_on_device(in, a, b, out, imm, diff);
        }
        return pybind11::make_tuple(to_bytes(out), imm, diff);
      },
      pybind11::arg("records"), pybind11::arg("a"), pybind11::arg("b"),
      "HSB metadata re-encoded, hsb_imm_encode(b, a) and psn_diff(b, a), all on the GPU.");
  m.def(
      "copy_team_on_device",
      [](const pybind11::bytes& src, const std::vector<std::array<uint32_t, 3>>& cases) {
        const std::vector<uint8_t> in = to_vector(src);
        std::vector<uint8_t> out;
        {
          pybind11::gil_scoped_release nogil;
          cuda::copy_team_on_device(in, cases, out);
        }
        return to_bytes(out);
      },
      pybind11::arg("src"), pybind11::arg("cases"),
      "copy_bytes_team by a warp, shared to device memory: each case's 4160-byte result.");
}

}  // namespace rt::py
