// _core.Nic and _core.NicPort: a NIC written in Python plugs into a Transceiver (rt/host/nic.h).
// A Nic subclass gets the queues' rings as NicPorts at attach(), before start(); it produces
// frames into their rx rings and takes what the engines sent from their tx rings.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>
#include <utility>
#include <vector>

#include "register.h"
#include "rt/host/nic.h"
#include "rt/platform.h"

namespace rt::py {

namespace pb = pybind11;
using rt::host::Nic;
using rt::host::NicFields;
using rt::host::NicQueue;
using rt::host::NicValue;

namespace {

NicFields fields_from(const pb::handle& v, const char* what) {
  NicFields out;
  if (v.is_none()) return out;
  if (!pb::isinstance<pb::dict>(v))
    throw pb::type_error(std::string("Nic.") + what + "(): must return a dict of name: int or str");
  for (const auto& kv : v.cast<pb::dict>()) {
    const std::string name = pb::str(kv.first);
    if (pb::isinstance<pb::str>(kv.second))
      out.emplace_back(name, kv.second.cast<std::string>());
    else
      out.emplace_back(name, kv.second.cast<uint64_t>());
  }
  return out;
}

// The trampoline: a Python subclass overrides what it needs; name() it must.
class PyNic : public Nic {
 public:
  std::string name() const override { PYBIND11_OVERRIDE_PURE(std::string, Nic, name); }
  // A Python NIC gets the ports; how frames pick a queue is the configuration's
  // queues.steer, which it reads from the Transceiver's config.
  void attach(std::vector<NicQueue> queues, const rt::Steering&) override {
    pb::gil_scoped_acquire gil;
    const pb::function f = pb::get_override(static_cast<const Nic*>(this), "attach");
    if (f) f(std::move(queues));
  }
  void start() override { PYBIND11_OVERRIDE(void, Nic, start); }
  void stop() override { PYBIND11_OVERRIDE(void, Nic, stop); }
  std::string error() const override { PYBIND11_OVERRIDE(std::string, Nic, error); }
  void detach() override { PYBIND11_OVERRIDE(void, Nic, detach); }
  NicFields stats() const override { return fields("stats"); }
  NicFields info() const override { return fields("info"); }

 private:
  NicFields fields(const char* what) const {
    pb::gil_scoped_acquire gil;
    const pb::function f = pb::get_override(static_cast<const Nic*>(this), what);
    return f ? fields_from(f(), what) : NicFields{};
  }
};

}  // namespace

pb::dict nic_fields(const NicFields& fields) {
  pb::dict d;
  for (const auto& [name, value] : fields)
    std::visit([&, key = name.c_str()](const auto& v) { d[key] = v; }, value);
  return d;
}

void register_nic(pb::module_& m) {
  pb::class_<NicQueue>(m, "NicPort",
                       "One queue's rings as a NIC meets them: it produces frames into the rx "
                       "ring and takes what the engine sent from the tx ring. Valid from the "
                       "Nic's attach() until the Transceiver stops.")
      .def(
          "produce",
          [](NicQueue& q, const pb::bytes& frame) {
            const std::string f = frame;
            if (f.size() > q.rx.slot_bytes)
              throw std::invalid_argument("NicPort.produce(): a " + std::to_string(f.size()) +
                                          "-byte frame exceeds the rx slots' " +
                                          std::to_string(q.rx.slot_bytes) + " bytes");
            return rt::rx_produce<rt::Scope::kSystem>(
                       q.rx, q.rx_prod, reinterpret_cast<const uint8_t*>(f.data()),
                       uint32_t(f.size()), rt::now_ns()) == rt::ProduceResult::kOk;
          },
          pb::arg("frame"), "Puts a frame on the rx ring; False when the ring is full.")
      .def(
          "take",
          [](NicQueue& q, size_t max) {
            pb::list out;
            while (pb::len(out) < max) {
              const rt::TxDesc* d = rt::tx_poll<rt::Scope::kSystem>(q.tx, q.tx_ci);
              if (!d) break;
              const uint8_t* slot = q.tx.slot(q.tx_ci);
              out.append(pb::bytes(reinterpret_cast<const char*>(slot), d->len));
              ++q.tx_ci;
              rt::tx_consume<rt::Scope::kSystem>(q.tx, q.tx_ci);
            }
            return out;
          },
          pb::arg("max") = 64, "What the engine sent since the last take(), in order.");
  pb::class_<Nic, PyNic, std::shared_ptr<Nic>>(
      m, "Nic",
      "A NIC for a Transceiver (rt/host/nic.h): subclass it and override name(), and what "
      "else it needs: attach(ports) before start(), start(), stop(), detach() (after stop(): the "
      "ports go), error(), stats(), info() "
      "(dicts of name: int or str).")
      .def(pb::init<>())
      .def("name", &Nic::name)
      .def(
          "attach", [](Nic&, const pb::list&) {}, pb::arg("ports"))
      .def("start", &Nic::start)
      .def("stop", &Nic::stop)
      .def("error", &Nic::error)
      .def("detach", &Nic::detach)
      .def("stats", [](const Nic& n) { return nic_fields(n.stats()); })
      .def("info", [](const Nic& n) { return nic_fields(n.info()); });
}

}  // namespace rt::py
