// Verbs mode from Python: the software ConnectX over host buffers it owns, for tests and
// tools, and the layout constants a test holds against GPUNetIO's headers.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <cstring>
#include <memory>

#include "register.h"
#include "rt/verbs/descriptor.h"
#include "rt/verbs/soft_connectx.h"

namespace pb = pybind11;

namespace rt::py {
namespace {

using verbs::SoftConnectX;

// A software ConnectX whose rings, doorbell and regions are host memory owned here.
class HostSoftConnectX {
 public:
  explicit HostSoftConnectX(const pb::dict& d)
      : cfg_(config(d)),
        sq_(size_t(cfg_.sq_wqe_num) * verbs::kWqeBytes, 0),
        cq_(size_t(cfg_.cqe_num) * verbs::kCqeBytes, 0),
        nic_(cfg_, memory()) {}

  pb::memoryview sq() { return pb::memoryview::from_memory(sq_.data(), sq_.size()); }
  pb::memoryview cq() { return pb::memoryview::from_memory(cq_.data(), cq_.size(), true); }
  void ring(uint64_t producer) { __atomic_store_n(&doorbell_, producer, __ATOMIC_RELEASE); }
  uint64_t doorbell() const { return doorbell_; }

  pb::memoryview add_region(uint32_t key, uint64_t iova, size_t bytes) {
    regions_.emplace_back(new uint8_t[bytes]());
    nic_.add_region(key, regions_.back().get(), iova, bytes);
    return pb::memoryview::from_memory(regions_.back().get(), bytes);
  }

  pb::bytes descriptor() const {
    std::string out(verbs::descriptor_bytes(), '\0');
    nic_.fill_descriptor(reinterpret_cast<uint8_t*>(out.data()), out.size());
    return pb::bytes(out);
  }

  pb::list poll(uint64_t now_ns) {
    pb::list out;
    nic_.poll([&](const uint8_t* p, size_t n) { out.append(bytes_of(p, n)); }, now_ns);
    return out;
  }

  pb::tuple on_frame(const pb::bytes& frame, uint64_t now_ns) {
    const std::string f = frame;
    pb::list out;
    const bool ours = nic_.on_frame(
        reinterpret_cast<const uint8_t*>(f.data()), f.size(),
        [&](const uint8_t* p, size_t n) { out.append(bytes_of(p, n)); }, now_ns);
    return pb::make_tuple(ours, out);
  }

  pb::dict stats() const {
    const verbs::SoftConnectXStats& s = nic_.stats();
    pb::dict d;
    d["wqes"] = s.wqes;
    d["completions"] = s.completions;
    d["errors"] = s.errors;
    d["packets"] = s.packets;
    d["retransmits"] = s.retransmits;
    d["acks"] = s.acks;
    d["naks"] = s.naks;
    d["stale_waits"] = s.stale_waits;
    d["ignored"] = s.ignored;
    d["consumed"] = nic_.consumed();
    d["completed"] = nic_.completed();
    d["in_error"] = nic_.in_error();
    d["last_error"] = nic_.last_error();
    return d;
  }

 private:
  static pb::bytes bytes_of(const uint8_t* p, size_t n) {
    return pb::bytes(reinterpret_cast<const char*>(p), n);
  }

  static verbs::SoftConnectXConfig config(const pb::dict& d) {
    verbs::SoftConnectXConfig c;
    auto get = [&](const char* k) -> pb::object {
      return d.contains(k) ? pb::object(d[k]) : pb::object(pb::none());
    };
    for (const auto item : d) {
      static const char* known[] = {
          "qpn",      "peer_qpn", "sq_psn",  "mtu",       "sq_wqe_num",    "cqe_num", "local_mac",
          "peer_mac", "local_ip", "peer_ip", "udp_sport", "retransmit_ns", "retries"};
      const std::string k = pb::str(item.first);
      bool ok = false;
      for (const char* n : known) ok = ok || k == n;
      if (!ok) throw std::invalid_argument("SoftConnectX: unknown key " + k);
    }
    if (auto v = get("qpn"); !v.is_none()) c.qpn = v.cast<uint32_t>();
    if (auto v = get("peer_qpn"); !v.is_none()) c.peer_qpn = v.cast<uint32_t>();
    if (auto v = get("sq_psn"); !v.is_none()) c.sq_psn = v.cast<uint32_t>();
    if (auto v = get("mtu"); !v.is_none()) c.mtu = v.cast<uint32_t>();
    if (auto v = get("sq_wqe_num"); !v.is_none()) c.sq_wqe_num = v.cast<uint32_t>();
    if (auto v = get("cqe_num"); !v.is_none()) c.cqe_num = v.cast<uint32_t>();
    if (auto v = get("retransmit_ns"); !v.is_none()) c.retransmit_ns = v.cast<uint64_t>();
    if (auto v = get("retries"); !v.is_none()) c.retries = v.cast<uint32_t>();
    if (auto v = get("udp_sport"); !v.is_none()) c.addressing.src_port = v.cast<uint16_t>();
    auto copy = [&](const char* k, uint8_t* dst, size_t n) {
      if (auto v = get(k); !v.is_none()) {
        const std::string b = v.cast<pb::bytes>();
        if (b.size() != n)
          throw std::invalid_argument(std::string("SoftConnectX: ") + k + " must be " +
                                      std::to_string(n) + " bytes");
        std::memcpy(dst, b.data(), n);
      }
    };
    copy("local_mac", c.addressing.src_mac, 6);
    copy("peer_mac", c.addressing.dst_mac, 6);
    copy("local_ip", c.addressing.src_ip, 4);
    copy("peer_ip", c.addressing.dst_ip, 4);
    return c;
  }

  verbs::SoftConnectXMemory memory() {
    const auto addr = [](const void* p) { return uint64_t(reinterpret_cast<uintptr_t>(p)); };
    return {sq_.data(),       cq_.data(),       &doorbell_,
            addr(sq_.data()), addr(cq_.data()), addr(&doorbell_)};
  }

  verbs::SoftConnectXConfig cfg_;
  std::vector<uint8_t> sq_, cq_;
  alignas(8) uint64_t doorbell_ = 0;
  std::vector<std::unique_ptr<uint8_t[]>> regions_;
  SoftConnectX nic_;
};

}  // namespace

void register_verbs(pb::module_& m) {
  pb::class_<HostSoftConnectX>(m, "SoftConnectX")
      .def(pb::init<const pb::dict&>())
      .def_property_readonly("sq", &HostSoftConnectX::sq)
      .def_property_readonly("cq", &HostSoftConnectX::cq)
      .def_property_readonly("doorbell", &HostSoftConnectX::doorbell)
      .def("ring", &HostSoftConnectX::ring)
      .def("add_region", &HostSoftConnectX::add_region)
      .def("descriptor", &HostSoftConnectX::descriptor)
      .def("poll", &HostSoftConnectX::poll, pb::arg("now_ns") = 0)
      .def("on_frame", &HostSoftConnectX::on_frame, pb::arg("frame"), pb::arg("now_ns") = 0)
      .def("stats", &HostSoftConnectX::stats);
}

}  // namespace rt::py
