// Bindings of the plain AF_PACKET sender and receiver (rt/bench/packet_tools.h).
#include <pybind11/stl.h>

#include "register.h"
#include "rt/bench/packet_tools.h"

namespace rt::py {

namespace pb = pybind11;
using pb::arg;

namespace {
pb::dict count_dict(const bench::PacketCount& c) {
  pb::dict d;
  d["frames"] = c.frames;
  d["bytes"] = c.bytes;
  d["seconds"] = c.last_ns > c.first_ns ? double(c.last_ns - c.first_ns) * 1e-9 : 0.0;
  return d;
}
}  // namespace

void register_packet_tools(pb::module_& m) {
  m.def(
      "packet_blast",
      [](const std::string& interface, const std::vector<pb::bytes>& frames, uint64_t repeat,
         uint32_t batch) {
        std::vector<std::string> fs;
        for (const pb::bytes& f : frames) fs.emplace_back(f);
        pb::gil_scoped_release nogil;
        const bench::PacketCount c = bench::packet_blast(interface, fs, repeat, batch);
        pb::gil_scoped_acquire gil;
        return count_dict(c);
      },
      arg("interface"), arg("frames"), arg("repeat") = 1, arg("batch") = 32,
      "Send `frames` in order `repeat` times on `interface` with sendmmsg: "
      "{frames, bytes, seconds}.");
  m.def(
      "packet_sink",
      [](int fd, uint64_t expect, double timeout_s, uint32_t batch) {
        pb::gil_scoped_release nogil;
        const bench::PacketCount c = bench::packet_sink(fd, expect, timeout_s, batch);
        pb::gil_scoped_acquire gil;
        return count_dict(c);
      },
      arg("fd"), arg("expect"), arg("timeout_s") = 2.0, arg("batch") = 32,
      "Count UDP 4791 frames on the bound AF_PACKET socket `fd` with recvmmsg until `expect` came "
      "or `timeout_s` "
      "passed without one: {frames, bytes, seconds} (first to last frame).");
  m.def(
      "packet_reflect",
      [](int fd, uint64_t count, uint32_t dest_qp, double timeout_s) {
        pb::gil_scoped_release nogil;
        const bench::PacketCount c = bench::packet_reflect(fd, count, dest_qp, timeout_s);
        pb::gil_scoped_acquire gil;
        return count_dict(c);
      },
      arg("fd"), arg("count"), arg("dest_qp"), arg("timeout_s") = 2.0,
      "Send each RoCEv2 frame on the bound AF_PACKET socket `fd` back with its ends swapped, "
      "addressed to "
      "`dest_qp`, ICRC recomputed (a raw-socket echo): {frames, bytes, seconds}.");
}

}  // namespace rt::py
