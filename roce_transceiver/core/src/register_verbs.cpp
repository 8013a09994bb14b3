// Verbs mode from Python: the software ConnectX over host buffers it owns, for tests and
// tools, and the layout constants a test holds against GPUNetIO's headers.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <type_traits>

#include "register.h"
#include "rt/cuda/verbs_launch.h"
#include "rt/host/doca_probe.h"
#include "rt/host/transceiver.h"
#include "rt/host/verbs_port.h"
#include "rt/host/verbs_requester.h"
#include "rt/host/verbs_server.h"
#include "rt/host/wire.h"
#include "rt/verbs/descriptor.h"
#include "rt/verbs/soft_connectx.h"

namespace pb = pybind11;

namespace rt::py {
namespace {

using verbs::SoftConnectX;

// d[key], bytes of exactly `n` (a MAC or an IPv4 address), into dst.
void copy_exact(const pb::dict& d, const char* what, const char* key, uint8_t* dst, size_t n) {
  const std::string b = d[key].cast<pb::bytes>();
  if (b.size() != n)
    throw std::invalid_argument(std::string(what) + ": " + key + " must be " + std::to_string(n) +
                                " bytes");
  std::memcpy(dst, b.data(), n);
}

// The NIC handler by the names doca.nic_handler uses (roce_transceiver/config.py).
verbs::NicHandler nic_handler(const std::string& name) {
  if (name == "cpu_proxy") return verbs::NicHandler::kCpuProxy;
  if (name == "gpu_sm_db") return verbs::NicHandler::kGpuSmDb;
  if (name == "gpu_sm_bf") return verbs::NicHandler::kGpuSmBf;
  throw std::invalid_argument("SoftConnectX: nic_handler '" + name +
                              "': cpu_proxy, gpu_sm_db or gpu_sm_bf");
}

verbs::SoftConnectXConfig nic_config(const pb::dict& d,
                                     std::initializer_list<const char*> extra = {}) {
  verbs::SoftConnectXConfig c;
  auto get = [&](const char* k) -> pb::object {
    return d.contains(k) ? pb::object(d[k]) : pb::object(pb::none());
  };
  for (const auto item : d) {
    static const char* known[] = {"qpn",           "peer_qpn",   "sq_psn",     "rq_psn",
                                  "mtu",           "sq_wqe_num", "cqe_num",    "local_mac",
                                  "peer_mac",      "local_ip",   "peer_ip",    "udp_sport",
                                  "retransmit_ns", "retries",    "nic_handler"};
    const std::string k = pb::str(item.first);
    bool ok = false;
    for (const char* n : known) ok = ok || k == n;
    for (const char* n : extra) ok = ok || k == n;
    if (!ok) throw std::invalid_argument("SoftConnectX: unknown key " + k);
  }
  if (auto v = get("qpn"); !v.is_none()) c.qpn = v.cast<uint32_t>();
  if (auto v = get("peer_qpn"); !v.is_none()) c.peer_qpn = v.cast<uint32_t>();
  if (auto v = get("sq_psn"); !v.is_none()) c.sq_psn = v.cast<uint32_t>();
  if (auto v = get("rq_psn"); !v.is_none()) c.rq_psn = v.cast<uint32_t>();
  if (auto v = get("nic_handler"); !v.is_none()) c.handler = nic_handler(v.cast<std::string>());
  if (auto v = get("mtu"); !v.is_none()) c.mtu = v.cast<uint32_t>();
  if (auto v = get("sq_wqe_num"); !v.is_none()) c.sq_wqe_num = v.cast<uint32_t>();
  if (auto v = get("cqe_num"); !v.is_none()) c.cqe_num = v.cast<uint32_t>();
  if (auto v = get("retransmit_ns"); !v.is_none()) c.retransmit_ns = v.cast<uint64_t>();
  if (auto v = get("retries"); !v.is_none()) c.retries = v.cast<uint32_t>();
  if (auto v = get("udp_sport"); !v.is_none()) c.addressing.src_port = v.cast<uint16_t>();
  auto copy = [&](const char* k, uint8_t* dst, size_t n) {
    if (d.contains(k)) copy_exact(d, "SoftConnectX", k, dst, n);
  };
  copy("local_mac", c.addressing.src_mac, 6);
  copy("peer_mac", c.addressing.dst_mac, 6);
  copy("local_ip", c.addressing.src_ip, 4);
  copy("peer_ip", c.addressing.dst_ip, 4);
  return c;
}

// The software ConnectX's counters, by their field names (both halves).
void nic_stats_into(pb::dict& d, const verbs::SoftConnectXStats& s) {
  d["wqes"] = s.wqes;
  d["bf_wqes"] = s.bf_wqes;
  d["completions"] = s.completions;
  d["errors"] = s.errors;
  d["packets"] = s.packets;
  d["retransmits"] = s.retransmits;
  d["acks"] = s.acks;
  d["naks"] = s.naks;
  d["stale_waits"] = s.stale_waits;
  d["foreign_rings"] = s.foreign_rings;
  d["ignored"] = s.ignored;
  d["requests"] = s.requests;
  d["bytes_placed"] = s.bytes_placed;
  d["atomics"] = s.atomics;
  d["write_imms"] = s.write_imms;
  d["duplicates"] = s.duplicates;
  d["psn_gaps"] = s.psn_gaps;
  d["out_of_range"] = s.out_of_range;
  d["sequence_errors"] = s.sequence_errors;
  d["unsupported"] = s.unsupported;
  d["acks_sent"] = s.acks_sent;
  d["naks_sent"] = s.naks_sent;
  d["last_imm"] = s.last_imm;
}

// A software ConnectX whose rings, doorbell and regions are host memory owned here.
class HostSoftConnectX {
 public:
  explicit HostSoftConnectX(const pb::dict& d)
      : cfg_(nic_config(d)),
        sq_(size_t(cfg_.sq_wqe_num) * verbs::kWqeBytes, 0),
        cq_(size_t(cfg_.cqe_num) * verbs::kCqeBytes, 0),
        nic_(cfg_, memory()) {}

  pb::memoryview sq() { return pb::memoryview::from_memory(sq_.data(), sq_.size()); }
  pb::memoryview cq() { return pb::memoryview::from_memory(cq_.data(), cq_.size(), true); }
  // The doorbell page (mlx5_layout.h): written by tests the way each NIC handler's device code
  // writes it.
  pb::memoryview doorbell_page() {
    return pb::memoryview::from_memory(page_, verbs::kDoorbellPageBytes);
  }
  void ring(uint64_t producer) {  // CPU proxy: the producer count
    __atomic_store_n(reinterpret_cast<uint64_t*>(page_), producer, __ATOMIC_RELEASE);
  }
  uint64_t doorbell() const { return *reinterpret_cast<const uint64_t*>(page_); }

  pb::memoryview add_region(uint32_t key, uint64_t iova, size_t bytes) {
    regions_.emplace_back(new uint64_t[(bytes + 7) / 8]());
    uint8_t* base = reinterpret_cast<uint8_t*>(regions_.back().get());
    nic_.add_region(key, base, iova, bytes);
    return pb::memoryview::from_memory(base, bytes);
  }

  // A region the peer may WRITE into and run atomics on (8-byte aligned memory).
  pb::memoryview add_remote_region(uint32_t rkey, uint64_t va, uint32_t bytes) {
    regions_.emplace_back(new uint64_t[(bytes + 7) / 8]());
    uint8_t* base = reinterpret_cast<uint8_t*>(regions_.back().get());
    nic_.add_remote_region(rkey, base, va, bytes);
    return pb::memoryview::from_memory(base, bytes);
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
    nic_stats_into(d, s);
    d["consumed"] = nic_.consumed();
    d["completed"] = nic_.completed();
    d["expected_psn"] = nic_.expected_psn();
    d["in_error"] = nic_.in_error();
    d["last_error"] = nic_.last_error();
    return d;
  }

 private:
  static pb::bytes bytes_of(const uint8_t* p, size_t n) {
    return pb::bytes(reinterpret_cast<const char*>(p), n);
  }

  verbs::SoftConnectXMemory memory() {
    const auto addr = [](const void* p) { return uint64_t(reinterpret_cast<uintptr_t>(p)); };
    return {sq_.data(), cq_.data(), page_, addr(sq_.data()), addr(cq_.data()), addr(page_)};
  }

  verbs::SoftConnectXConfig cfg_;
  std::vector<uint8_t> sq_, cq_;
  alignas(64) uint8_t page_[verbs::kDoorbellPageBytes] = {};
  std::vector<std::unique_ptr<uint64_t[]>> regions_;
  SoftConnectX nic_;
};

pb::dict port_stats(const host::VerbsPort& port) {
  const host::VerbsPortStats s = port.stats();
  pb::dict d;
  nic_stats_into(d, s.nic);
  d["expected_psn"] = s.expected_psn;
  d["consumed"] = s.consumed;
  d["completed"] = s.completed;
  d["in_error"] = s.in_error;
  d["last_error"] = s.last_error;
  return d;
}

host::VerbsPortConfig port_config(const pb::dict& d) {
  host::VerbsPortConfig c;
  c.nic = nic_config(d, {"gpu", "local_bytes", "lkey", "regions"});
  if (d.contains("gpu")) c.gpu = d["gpu"].cast<bool>();
  if (d.contains("local_bytes")) c.local_bytes = d["local_bytes"].cast<uint32_t>();
  if (d.contains("lkey")) c.lkey = d["lkey"].cast<uint32_t>();
  if (d.contains("regions")) {
    for (const pb::handle item : d["regions"].cast<pb::list>()) {
      const pb::dict r = item.cast<pb::dict>();
      for (const auto kv : r) {
        const std::string k = pb::str(kv.first);
        if (k != "va" && k != "rkey" && k != "length")
          throw std::invalid_argument("VerbsPort: regions: unknown key " + k);
      }
      c.regions.push_back(
          {r["va"].cast<uint64_t>(), r["rkey"].cast<uint32_t>(), r["length"].cast<uint32_t>()});
    }
  }
  return c;
}

uint64_t address(const uint8_t* p) { return uint64_t(reinterpret_cast<uintptr_t>(p)); }

// A dict's keys, all of them known: a misspelt key is an error, not a silent default.
void only_keys(const pb::dict& d, const char* what, std::initializer_list<const char*> known) {
  for (const auto item : d) {
    const std::string k = pb::str(item.first);
    bool ok = false;
    for (const char* n : known) ok = ok || k == n;
    if (!ok) throw std::invalid_argument(std::string(what) + ": unknown key " + k);
  }
}

host::VerbsServeConfig serve_config(const pb::dict& d) {
  only_keys(d, "VerbsServer",
            {"handler", "qec_blob", "custom_library", "custom_kernel_image", "custom_state_bytes",
             "custom_params", "request_region", "signal_region", "slots", "slot_bytes", "peer_ring",
             "peer_ring_rkey", "peer_signal", "peer_signal_rkey", "max_requests",
             "completion_timeout_s", "stop_timeout_s", "epoch_us", "epochs_in_flight"});
  host::VerbsServeConfig c;
  if (d.contains("handler")) {
    const std::string h = d["handler"].cast<std::string>();
    if (h == "echo")
      c.handler = HandlerKind::kEcho;
    else if (h == "qec")
      c.handler = HandlerKind::kQec;
    else if (h == "custom")
      c.handler = HandlerKind::kCustom;
    else
      throw std::invalid_argument("VerbsServer: handler '" + h + "': echo, qec or custom");
  }
  if (d.contains("qec_blob")) {
    const std::string blob = d["qec_blob"].cast<pb::bytes>();
    c.qec_blob.assign(blob.begin(), blob.end());
  }
  if (d.contains("custom_params")) {
    const std::string params = d["custom_params"].cast<pb::bytes>();
    c.custom_params.assign(params.begin(), params.end());
  }
  if (d.contains("custom_kernel_image")) {
    const std::string image = d["custom_kernel_image"].cast<pb::bytes>();
    c.custom_kernel_image.assign(image.begin(), image.end());
  }
  const auto set = [&](const char* k, auto& field) {
    if (d.contains(k)) field = d[k].cast<std::decay_t<decltype(field)>>();
  };
  set("custom_library", c.custom_library);
  set("custom_state_bytes", c.custom_state_bytes);
  set("request_region", c.request_region);
  set("signal_region", c.signal_region);
  set("slots", c.slots);
  set("slot_bytes", c.slot_bytes);
  set("peer_ring", c.peer_ring);
  set("peer_ring_rkey", c.peer_ring_rkey);
  set("peer_signal", c.peer_signal);
  set("peer_signal_rkey", c.peer_signal_rkey);
  set("max_requests", c.max_requests);
  set("completion_timeout_s", c.completion_timeout_s);
  set("stop_timeout_s", c.stop_timeout_s);
  set("epoch_us", c.epoch_us);
  set("epochs_in_flight", c.epochs_in_flight);
  return c;
}

host::VerbsRequestParams request_params(const pb::dict& d) {
  only_keys(d, "run_verbs_requests",
            {"payloads",    "payload_len", "expected",   "expected_len", "count",
             "timeout_s",   "dest_qp",     "peer_qpn",   "src_mac",      "dst_mac",
             "src_ip",      "dst_ip",      "ring_va",    "ring_rkey",    "signal_va",
             "signal_rkey", "slots",       "slot_bytes", "first_psn",    "first_request"});
  host::VerbsRequestParams p;
  const std::string pl = d["payloads"].cast<pb::bytes>();
  p.far.payloads.assign(pl.begin(), pl.end());
  p.far.payload_len = d["payload_len"].cast<uint32_t>();
  if (d.contains("expected")) {
    const std::string ex = d["expected"].cast<pb::bytes>();
    p.far.expected.assign(ex.begin(), ex.end());
    p.far.expected_len = d["expected_len"].cast<uint32_t>();
  }
  p.far.count = d["count"].cast<uint32_t>();
  p.far.timeout_s = d["timeout_s"].cast<double>();
  p.spec.dest_qp = d["dest_qp"].cast<uint32_t>();
  p.peer_qpn = d["peer_qpn"].cast<uint32_t>();
  copy_exact(d, "run_verbs_requests", "src_mac", p.spec.src_mac, 6);
  copy_exact(d, "run_verbs_requests", "dst_mac", p.spec.dst_mac, 6);
  copy_exact(d, "run_verbs_requests", "src_ip", p.spec.src_ip, 4);
  copy_exact(d, "run_verbs_requests", "dst_ip", p.spec.dst_ip, 4);
  p.ring_va = d["ring_va"].cast<uint64_t>();
  p.ring_rkey = d["ring_rkey"].cast<uint32_t>();
  p.signal_va = d["signal_va"].cast<uint64_t>();
  p.signal_rkey = d["signal_rkey"].cast<uint32_t>();
  p.slots = d["slots"].cast<uint32_t>();
  p.slot_bytes = d["slot_bytes"].cast<uint32_t>();
  p.first_psn = d["first_psn"].cast<uint32_t>();
  p.first_request = d["first_request"].cast<uint64_t>();
  return p;
}

}  // namespace

void register_verbs(pb::module_& m) {
  pb::class_<host::VerbsServer>(m, "VerbsServer")
      .def(pb::init([](host::VerbsPort& port, const pb::dict& d) {
             return std::make_unique<host::VerbsServer>(port, serve_config(d));
           }),
           pb::keep_alive<1, 2>())
      .def("start", &host::VerbsServer::start)
      .def("stop", &host::VerbsServer::stop, pb::call_guard<pb::gil_scoped_release>())
      .def_property_readonly("on_gpu", &host::VerbsServer::on_gpu)
      .def("stats", [](const host::VerbsServer& s) {
        const verbs::ServeShared v = s.stats();
        pb::dict out;
        out["served"] = v.served;
        out["completed"] = v.completed;
        out["handler_errors"] = v.handler_errors;
        out["state"] = host::serve_state_name(v.state);
        out["cq_status"] = v.cq_status;
        out["epochs"] = s.epochs();
        return out;
      });
  // A wire a port or the Verbs requester sends on: the loopback far end of a Transceiver, the
  // two ends of a split loopback facing a peer Transceiver, or a packet socket (its fd, owned
  // from here on) captured to a pcap.
  pb::class_<host::Wire, std::shared_ptr<host::Wire>>(m, "Wire")
      .def_static(
          "loopback",
          [](host::Transceiver& t) -> std::shared_ptr<host::Wire> {
            return std::make_shared<host::LoopbackWire>(t);
          },
          pb::keep_alive<0, 1>())
      .def_static(
          "split_loopback",
          [](pb::object peer) {
            const host::SplitLoopback ends = host::split_loopback(peer.cast<host::Transceiver&>());
            pb::object port = pb::cast(ends.port), requester = pb::cast(ends.requester);
            pb::detail::keep_alive_impl(port, peer);  // both ends feed the peer's engine
            pb::detail::keep_alive_impl(requester, peer);
            return pb::make_tuple(port, requester);
          },
          "(port end, requester end) of a loopback facing the peer Transceiver: the port's "
          "requests go into the peer's engine, its answers to the requester.")
      .def_static(
          "over_socket",
          [](int fd, const std::string& capture) {
            return std::shared_ptr<host::Wire>(std::make_shared<host::PacketWire>(fd, capture));
          })
      .def(
          "send",
          [](host::Wire& w, const pb::bytes& frame) {
            const std::string f = frame;
            return w.send(reinterpret_cast<const uint8_t*>(f.data()), f.size());
          },
          "One frame; False: no room now (nothing sent, try again).")
      .def(
          "receive",
          [](host::Wire& w, size_t max) {
            std::vector<std::vector<uint8_t>> frames;
            w.receive(frames, max);
            pb::list out;
            for (const std::vector<uint8_t>& f : frames)
              out.append(pb::bytes(reinterpret_cast<const char*>(f.data()), f.size()));
            return out;
          },
          pb::arg("max") = 64, "Up to `max` frames that arrived; never waits.");
  m.def(
      "run_verbs_requests",
      [](host::Wire& to_ours, host::Transceiver& peer, const pb::dict& d) {
        host::VerbsRequestParams p = request_params(d);
        host::VerbsRequestRun run;
        {
          pb::gil_scoped_release nogil;
          run = host::run_verbs_requests(to_ours, peer, p);
        }
        const FarEndResult& r = run.run.result;
        pb::dict out;
        out["status"] = far_end_status_name(r.status);
        out["sent"] = r.sent;
        out["received"] = r.received;
        out["wrong"] = r.wrong;
        out["bad_frames"] = r.bad_frames;
        out["ring_full"] = r.ring_full;
        out["elapsed_ns"] = r.elapsed_ns;
        out["rtt_ns"] = pb::bytes(reinterpret_cast<const char*>(run.run.rtt_ns.data()),
                                  run.run.rtt_ns.size() * sizeof(uint64_t));
        out["landed_ns"] = pb::bytes(reinterpret_cast<const char*>(run.landed_ns.data()),
                                     run.landed_ns.size() * sizeof(uint64_t));
        out["next_psn"] = run.next_psn;
        out["reply_errors"] = run.reply_errors;
        return out;
      },
      "Verbs mode's loopback peer: `count` ping-pong requests (WRITE + FETCH_ADD into ours), "
      "each reply seen on the peer's signal word.");
  m.def("doca_probe", [](const std::string& sdk_path) {
    // Without the GIL: a dlopen that never returns (a FIFO where a library should be) must
    // leave doctor's time limit able to end the run.
    const host::DocaProbe p = [&] {
      pb::gil_scoped_release nogil;
      return host::probe_doca(sdk_path);
    }();
    pb::dict d;
    d["sdk_path"] = p.sdk_path;
    d["libraries_found"] = p.libraries_found;
    d["libraries_missing"] = p.libraries_missing;
    d["symbols_missing"] = p.symbols_missing;
    d["ibverbs_loaded"] = p.ibverbs_loaded;
    d["ibverbs_error"] = p.ibverbs_error;
    d["rdma_devices"] = p.rdma_devices;
    return d;
  });
  m.attr("doca_required_symbols") = host::doca_required_symbols();
  m.def(
      "doca_sdk_problem",
      [](const pb::dict& d, bool hint_doca_path) {
        host::DocaProbe p;  // the SDK's part of doca_probe()'s dict
        p.sdk_path = d["sdk_path"].cast<std::string>();
        p.libraries_found = d["libraries_found"].cast<std::vector<std::string>>();
        p.libraries_missing = d["libraries_missing"].cast<std::vector<std::string>>();
        p.symbols_missing = d["symbols_missing"].cast<std::vector<std::string>>();
        return host::doca_sdk_problem(p, hint_doca_path);
      },
      pb::arg("probe"), pb::arg("hint_doca_path"),
      "What doca_probe()'s result says the SDK lacks, in words; '' where nothing.");
  m.def(
      "doca_refusal",
      [](const std::string& sdk_path, const std::string& device, bool hint_doca_path) {
        const host::DocaProbe p = [&] {
          pb::gil_scoped_release nogil;  // as doca_probe(): a dlopen may hang
          return host::probe_doca(sdk_path);
        }();
        return host::doca_refusal(p, device, hint_doca_path);
      },
      pb::arg("sdk_path"), pb::arg("device"), pb::arg("hint_doca_path"),
      "Why nic 'doca' on RDMA device `device` cannot start here: the DocaNic's refusal.");
  pb::class_<host::VerbsPort>(m, "VerbsPort")
      .def(pb::init([](host::Transceiver& wire, const pb::dict& d) {
             return std::make_unique<host::VerbsPort>(port_config(d),
                                                      std::make_shared<host::LoopbackWire>(wire));
           }),
           pb::keep_alive<1, 2>())
      .def_static(
          "over_wire",
          [](std::shared_ptr<host::Wire> wire, const pb::dict& d) {
            return std::make_unique<host::VerbsPort>(port_config(d), std::move(wire));
          },
          pb::arg("wire"), pb::arg("config"),
          "A port whose packets travel on `wire` (e.g. the port end of Wire.split_loopback).")
      .def_static(
          "over_socket",
          [](int fd, const std::string& capture, const pb::dict& d) {
            // The socket is the port's from here on: a failure below must still close it.
            auto wire = std::make_shared<host::PacketWire>(fd, capture);
            return std::make_unique<host::VerbsPort>(port_config(d), std::move(wire));
          },
          pb::arg("fd"), pb::arg("capture"), pb::arg("config"),
          "A port whose packets go out on a bound AF_PACKET socket (its fd, which the port "
          "owns from here on), captured to `capture` (empty: none).")
      .def("start", &host::VerbsPort::start)
      .def("stop", &host::VerbsPort::stop, pb::call_guard<pb::gil_scoped_release>())
      .def("ring", &host::VerbsPort::ring)
      .def("send_ring",
           [](host::VerbsPort& p, size_t bytes) {
             return pb::memoryview::from_memory(p.send_ring(), bytes);
           })
      .def("local",
           [](host::VerbsPort& p) {
             return pb::memoryview::from_memory(p.local().host(), p.local().size());
           })
      .def("local_address",
           [](host::VerbsPort& p) {
             const host::Buffer& b = p.local();
             return address(b.device() ? b.device() : b.host());
           })
      .def("doorbell_page",
           [](host::VerbsPort& p) {
             return pb::memoryview::from_memory(p.doorbell_page(), verbs::kDoorbellPageBytes);
           })
      .def(
          "region",
          [](host::VerbsPort& p, size_t i) {
            const host::Buffer& b = p.region(i);  // host memory: plain, or pinned and mapped
            return pb::memoryview::from_memory(b.host(), b.size());
          },
          "A remote-access region's bytes, as the peer's WRITEs and atomics left them.")
      .def("stats", &port_stats)
      .def("put_signal_loop", [](host::VerbsPort& p, const pb::dict& d) {
        cuda::PutSignalParams q;
        q.qp = p.descriptor();
        q.raddr = d["raddr"].cast<uint64_t>();
        q.rkey = d["rkey"].cast<uint32_t>();
        q.slot_bytes = d["slot_bytes"].cast<uint32_t>();
        q.slots = d["slots"].cast<uint32_t>();
        q.laddr = d["laddr"].cast<uint64_t>();
        q.lkey = d["lkey"].cast<uint32_t>();
        q.size = d["size"].cast<uint32_t>();
        q.sig_raddr = d["sig_raddr"].cast<uint64_t>();
        q.sig_rkey = d["sig_rkey"].cast<uint32_t>();
        q.sink_laddr = d["sink_laddr"].cast<uint64_t>();
        q.count = d["count"].cast<uint32_t>();
        q.timeout_s = d["timeout_s"].cast<double>();
        q.handler = p.config().nic.handler;
        cuda::PutSignalResult r;
        {
          pb::gil_scoped_release nogil;
          r = cuda::put_signal_loop(q);
        }
        pb::dict out;
        out["completed"] = r.completed;
        out["errors"] = r.errors;
        out["elapsed_ns"] = r.elapsed_ns;
        out["timed_out"] = r.timed_out;
        return out;
      });
  pb::class_<HostSoftConnectX>(m, "SoftConnectX")
      .def(pb::init<const pb::dict&>())
      .def_property_readonly("sq", &HostSoftConnectX::sq)
      .def_property_readonly("cq", &HostSoftConnectX::cq)
      .def_property_readonly("doorbell", &HostSoftConnectX::doorbell)
      .def_property_readonly("doorbell_page", &HostSoftConnectX::doorbell_page)
      .def("ring", &HostSoftConnectX::ring)
      .def("add_region", &HostSoftConnectX::add_region)
      .def("add_remote_region", &HostSoftConnectX::add_remote_region)
      .def("descriptor", &HostSoftConnectX::descriptor)
      .def("poll", &HostSoftConnectX::poll, pb::arg("now_ns") = 0)
      .def("on_frame", &HostSoftConnectX::on_frame, pb::arg("frame"), pb::arg("now_ns") = 0)
      .def("stats", &HostSoftConnectX::stats);
}

}  // namespace rt::py
