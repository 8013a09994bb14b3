// Python view of the engine: the host Transceiver (queues, executor, loopback
// far end) and the counter names. roce_transceiver/transceiver.py wraps it.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <set>
#include <string>

#include "register.h"
#include "rt/host/transceiver.h"

namespace rt::py {
namespace {

namespace pb = pybind11;

template <size_t N>
void take_bytes(const pb::handle& v, uint8_t (&dst)[N], size_t want, const std::string& key) {
  const std::string s = v.cast<std::string>();
  if (s.size() != want)
    throw pb::value_error(key + ": need " + std::to_string(want) + " bytes, got " +
                          std::to_string(s.size()));
  std::memcpy(dst, s.data(), want);
}

// The flat config roce_transceiver/config.py produces; an unknown key is a
// programming error on the Python side and is reported as such.
host::TransceiverConfig config_from_dict(const pb::dict& d) {
  static const std::set<std::string> known = {"executor",
                                              "far_end",
                                              "rx_depth",
                                              "tx_depth",
                                              "slot_bytes",
                                              "host_tx_depth",
                                              "completion_depth",
                                              "completion_slot_bytes",
                                              "batch",
                                              "msg_buf_bytes",
                                              "check_icrc",
                                              "record_completions",
                                              "qpn",
                                              "peer_qpn",
                                              "transport",
                                              "pkey",
                                              "rx_psn",
                                              "tx_psn",
                                              "local_mac",
                                              "peer_mac",
                                              "ip_version",
                                              "local_ip",
                                              "peer_ip",
                                              "udp_sport",
                                              "vlan",
                                              "handler",
                                              "qec_blob",
                                              "regions",
                                              "cpu_core",
                                              "stop_timeout_s",
                                              "cuda_epoch_us",
                                              "cuda_epochs_in_flight",
                                              "express",
                                              "nic",
                                              "socket_mode",
                                              "socket_interface",
                                              "socket_capture",
                                              "socket_batch",
                                              "socket_rx_path",
                                              "socket_rx_path_reason",
                                              "frames_region",
                                              "frames_page_bytes",
                                              "frames_pages",
                                              "frames_metadata",
                                              "frames_check_crc"};
  for (const auto& item : d) {
    const std::string key = item.first.cast<std::string>();
    if (!known.count(key)) throw pb::value_error("engine config: unknown key '" + key + "'");
  }
  host::TransceiverConfig c;
  auto get = [&](const char* key) { return d.contains(key) ? d[key] : pb::object(); };
  if (auto v = get("executor")) c.executor = v.cast<std::string>();
  if (auto v = get("far_end")) c.far_end = v.cast<std::string>();
  if (auto v = get("nic")) c.nic = v.cast<std::string>();
  if (auto v = get("frames_region")) c.frames_region = v.cast<uint32_t>();
  if (auto v = get("frames_page_bytes")) c.frames_page_bytes = v.cast<uint32_t>();
  if (auto v = get("frames_pages")) c.frames_pages = v.cast<uint32_t>();
  if (auto v = get("frames_metadata")) c.frames_metadata = v.cast<bool>();
  if (auto v = get("frames_check_crc")) c.frames_check_crc = v.cast<bool>();
  if (auto v = get("socket_mode")) c.socket.mode = v.cast<std::string>();
  if (auto v = get("socket_interface")) c.socket.interface = v.cast<std::string>();
  if (auto v = get("socket_capture")) c.socket.capture = v.cast<std::string>();
  if (auto v = get("socket_batch")) c.socket.batch = v.cast<uint32_t>();
  if (auto v = get("socket_rx_path")) c.socket.rx_path = v.cast<std::string>();
  if (auto v = get("socket_rx_path_reason")) c.socket.rx_path_reason = v.cast<std::string>();
  if (auto v = get("rx_depth")) c.rx_depth = v.cast<uint32_t>();
  if (auto v = get("tx_depth")) c.tx_depth = v.cast<uint32_t>();
  if (auto v = get("slot_bytes")) c.slot_bytes = v.cast<uint32_t>();
  if (auto v = get("host_tx_depth")) c.host_tx_depth = v.cast<uint32_t>();
  if (auto v = get("completion_depth")) c.completion_depth = v.cast<uint32_t>();
  if (auto v = get("completion_slot_bytes")) c.completion_slot_bytes = v.cast<uint32_t>();
  if (auto v = get("batch")) c.batch = v.cast<uint32_t>();
  if (auto v = get("msg_buf_bytes")) c.msg_buf_bytes = v.cast<uint32_t>();
  if (auto v = get("check_icrc")) c.check_icrc = v.cast<bool>();
  if (auto v = get("record_completions")) c.record_completions = v.cast<bool>();
  if (auto v = get("express")) c.express = v.cast<bool>();
  if (auto v = get("qpn")) c.qp.qpn = v.cast<uint32_t>();
  if (auto v = get("peer_qpn")) c.qp.peer_qpn = v.cast<uint32_t>();
  c.qp.transport = Transport::RC;
  if (auto v = get("transport")) {
    const std::string t = v.cast<std::string>();
    if (t == "UC")
      c.qp.transport = Transport::UC;
    else if (t != "RC")
      throw pb::value_error("transport='" + t + "': must be RC or UC");
  }
  c.qp.pkey = 0xFFFF;
  if (auto v = get("pkey")) c.qp.pkey = v.cast<uint16_t>();
  if (auto v = get("rx_psn")) c.qp.rx_psn = v.cast<uint32_t>();
  if (auto v = get("tx_psn")) c.qp.tx_psn = v.cast<uint32_t>();
  FrameSpec& s = c.local;
  if (auto v = get("local_mac")) take_bytes(v, s.src_mac, 6, "local_mac");
  if (auto v = get("peer_mac")) take_bytes(v, s.dst_mac, 6, "peer_mac");
  if (auto v = get("ip_version")) s.ip_version = v.cast<uint8_t>();
  const size_t ip_len = s.ip_version == 6 ? 16 : 4;
  if (auto v = get("local_ip")) take_bytes(v, s.src_ip, ip_len, "local_ip");
  if (auto v = get("peer_ip")) take_bytes(v, s.dst_ip, ip_len, "peer_ip");
  if (auto v = get("udp_sport")) s.src_port = v.cast<uint16_t>();
  if (auto v = get("vlan"); v && !v.is_none()) {
    s.vlan = true;
    s.vlan_tci = v.cast<uint16_t>();
  }
  s.pkey = c.qp.pkey;
  if (auto v = get("handler")) {
    const std::string h = v.cast<std::string>();
    if (h == "echo")
      c.handler = HandlerKind::kEcho;
    else if (h == "sink")
      c.handler = HandlerKind::kSink;
    else if (h == "qec")
      c.handler = HandlerKind::kQec;
    else if (h == "frames")
      c.handler = HandlerKind::kFrames;
    else
      throw pb::value_error("handler='" + h + "': must be echo, sink, qec or frames");
  }
  if (auto v = get("qec_blob")) {
    const std::string b = v.cast<std::string>();
    c.qec_blob.assign(b.begin(), b.end());
  }
  if (auto v = get("regions")) {
    for (const auto& r : v) {
      const auto t = r.cast<pb::tuple>();
      c.regions.push_back({t[0].cast<uint64_t>(), t[1].cast<uint32_t>(), t[2].cast<uint32_t>()});
    }
  }
  if (auto v = get("cpu_core")) c.cpu_core = v.cast<int>();
  if (auto v = get("stop_timeout_s")) c.stop_timeout_s = v.cast<double>();
  if (auto v = get("cuda_epoch_us")) c.cuda_epoch_us = v.cast<uint32_t>();
  if (auto v = get("cuda_epochs_in_flight")) c.cuda_epochs_in_flight = v.cast<uint32_t>();
  return c;
}

pb::dict completion_dict(const host::Completion& c) {
  pb::dict d;
  d["request_len"] = c.record.request_len;
  d["reply_len"] = c.record.reply_len;
  d["imm"] = (c.record.flags & kCompletionHasImm) ? pb::object(pb::int_(c.record.imm)) : pb::none();
  d["opcode"] = c.record.opcode;
  d["handler_error"] = bool(c.record.flags & kCompletionHandlerError);
  d["reply_dropped"] = bool(c.record.flags & kCompletionReplyDropped);
  d["psn"] = c.record.psn;
  d["rx_timestamp_ns"] = c.record.rx_timestamp_ns;
  d["done_timestamp_ns"] = c.record.done_timestamp_ns;
  d["frame"] = pb::none();
  if ((c.record.flags & kCompletionFrame) && c.request.size() >= sizeof(FrameRecord)) {
    FrameRecord r;
    std::memcpy(&r, c.request.data(), sizeof r);
    pb::dict f;
    f["frame_number"] = r.frame_number;
    f["page"] = r.page;
    f["bytes"] = r.bytes;
    f["crc32"] = r.crc32;
    f["metadata_crc"] =
        (r.flags & kFrameHasMetadata) ? pb::object(pb::int_(r.metadata_crc)) : pb::none();
    f["psn_first"] = r.psn_first;
    f["psn_last"] = r.psn_last;
    f["packets"] = r.packets;
    f["packets_lost"] = r.packets_lost;
    f["has_metadata"] = bool(r.flags & kFrameHasMetadata);
    f["crc_ok"] = bool(r.flags & kFrameCrcOk);
    f["crc_checked"] = bool(r.flags & kFrameCrcChecked);
    f["bytes_ok"] = bool(r.flags & kFrameBytesOk);
    f["page_match"] = bool(r.flags & kFramePageMatch);
    f["ptp_s"] = r.ptp_s;
    f["ptp_ns"] = r.ptp_ns;
    f["rx_first_ns"] = r.rx_first_ns;
    f["rx_last_ns"] = r.rx_last_ns;
    d["frame"] = f;
  }
  d["request"] = pb::bytes(reinterpret_cast<const char*>(c.request.data()), c.request.size());
  d["reply"] = pb::bytes(reinterpret_cast<const char*>(c.reply.data()), c.reply.size());
  return d;
}

}  // namespace

void register_engine(pb::module_& m) {
  m.def("counter_names", [] {
    pb::list names;
    for (const char* n : kCounterNames) names.append(n);
    return names;
  });

  // A frame's bytes where they lie, owning a share of their region: numpy's view through the
  // buffer protocol, and cupy's UnownedMemory (owner=), keep it, and so the memory, alive.
  pb::class_<host::PageMemory>(m, "PageMemory", pb::buffer_protocol())
      .def_property_readonly("bytes", [](const host::PageMemory& p) { return p.bytes; })
      .def_property_readonly("on_device", [](const host::PageMemory& p) { return p.device() != 0; })
      .def_property_readonly("device_ptr", &host::PageMemory::device)
      .def("read",
           [](const host::PageMemory& p) {
             const std::vector<uint8_t> b = p.read();
             return pb::bytes(reinterpret_cast<const char*>(b.data()), b.size());
           })
      .def_buffer([](const host::PageMemory& p) {
        if (!p.host())  // a BufferError for Python: device memory has no host address
          throw std::logic_error("the page is in GPU memory: read() copies it, device_ptr is it");
        return pb::buffer_info(p.host(), pb::ssize_t(p.bytes));  // read-only
      });

  using host::Transceiver;
  pb::class_<Transceiver>(m, "Transceiver")
      .def(pb::init([](const pb::dict& cfg) {
             return std::make_unique<Transceiver>(config_from_dict(cfg));
           }),
           pb::arg("config"))
      .def("start", &Transceiver::start, pb::call_guard<pb::gil_scoped_release>())
      .def("stop", &Transceiver::stop, pb::call_guard<pb::gil_scoped_release>())
      .def("running", &Transceiver::running)
      .def("check", &Transceiver::check)
      .def("release_page", &Transceiver::release_page)
      .def("page_memory", &Transceiver::page_memory, pb::arg("page"), pb::arg("bytes"))
      .def("nic_stats",
           [](const Transceiver& t) {
             const host::SocketNicStats s = t.nic_stats();
             pb::dict d;
             d["nic_rx_frames"] = s.rx_frames;
             d["nic_rx_bytes"] = s.rx_bytes;
             d["nic_tx_frames"] = s.tx_frames;
             d["nic_tx_bytes"] = s.tx_bytes;
             d["nic_filtered"] = s.filtered;
             d["nic_too_long"] = s.too_long;
             d["nic_rx_ring_full"] = s.rx_ring_full;
             d["nic_tx_errors"] = s.tx_errors;
             d["nic_kernel_drops"] = s.kernel_drops;
             d["nic_capture_errors"] = s.capture_errors;
             return d;
           })
      .def("nic_info",
           [](const Transceiver& t) {
             const host::SocketNicInfo i = t.nic_info();
             pb::dict d;
             d["rx_buffer_bytes"] = i.rx_buffer_bytes;
             d["rx_buffer_asked"] = i.rx_buffer_asked;
             d["capture_error"] = i.capture_error;
             d["rx_path"] = i.rx_path;
             d["rx_path_reason"] = i.rx_path_reason;
             d["rx_fallback"] = i.rx_fallback;
             d["rx_ring_bytes"] = i.rx_ring_bytes;
             d["rx_ring_block_bytes"] = i.rx_ring_block_bytes;
             d["rx_ring_blocks"] = i.rx_ring_blocks;
             d["rx_ring_block_timeout_ms"] = i.rx_ring_block_timeout_ms;
             d["rx_ring_freezes"] = i.rx_ring_freezes;
             return d;
           })
      .def("epoch_stats",
           [](const Transceiver& t) {
             const cuda::EpochStats s = t.epoch_stats();
             pb::dict d;
             d["epochs"] = s.epochs;
             d["gap_total_ns"] = s.gap_total_ns;
             d["gap_max_ns"] = s.gap_max_ns;
             d["warmup_total_ns"] = s.warmup_total_ns;
             d["warmup_max_ns"] = s.warmup_max_ns;
             d["first_pass_total_ns"] = s.first_pass_total_ns;
             d["first_pass_max_ns"] = s.first_pass_max_ns;
             return d;
           })
      .def("counters",
           [](const Transceiver& t) {
             const std::vector<uint64_t> v = t.counters();
             pb::dict d;
             for (uint32_t i = 0; i < kNumCounters; ++i) d[kCounterNames[i]] = v[i];
             return d;
           })
      .def("send",
           [](Transceiver& t, const pb::bytes& data) {
             const std::string s = data;
             return t.send(reinterpret_cast<const uint8_t*>(s.data()), s.size());
           })
      .def("poll_completions",
           [](Transceiver& t, size_t max) {
             pb::list out;
             for (const host::Completion& c : t.poll_completions(max))
               out.append(completion_dict(c));
             return out;
           })
      .def("preload", &Transceiver::preload, pb::arg("frames"))
      .def(
          "inject",
          [](Transceiver& t, const pb::bytes& frame, bool count_drop) {
            const std::string s = frame;
            return t.inject(reinterpret_cast<const uint8_t*>(s.data()), s.size(), count_drop);
          },
          pb::arg("frame"), pb::arg("count_drop") = true)
      .def("collect",
           [](Transceiver& t, size_t max) {
             pb::list out;
             for (const auto& f : t.collect(max))
               out.append(pb::bytes(reinterpret_cast<const char*>(f.data()), f.size()));
             return out;
           })
      .def(
          "run_far_end",
          [](Transceiver& t, const pb::bytes& payloads, uint32_t payload_len,
             const pb::bytes& expected, uint32_t expected_len, uint32_t count, uint32_t window,
             uint64_t interval_ns, double timeout_s, bool seq_in_payload) {
            host::FarEndParams p;
            const std::string pl = payloads, ex = expected;
            p.payloads.assign(pl.begin(), pl.end());
            p.payload_len = payload_len;
            p.expected.assign(ex.begin(), ex.end());
            p.expected_len = expected_len;
            p.count = count;
            p.window = window;
            p.interval_ns = interval_ns;
            p.timeout_s = timeout_s;
            p.seq_in_payload = seq_in_payload;
            host::FarEndRun run;
            {
              pb::gil_scoped_release nogil;
              run = t.run_far_end(p);
            }
            pb::dict d;
            d["status"] = far_end_status_name(run.result.status);
            d["sent"] = run.result.sent;
            d["received"] = run.result.received;
            d["wrong"] = run.result.wrong;
            d["bad_frames"] = run.result.bad_frames;
            d["ring_full"] = run.result.ring_full;
            d["elapsed_ns"] = run.result.elapsed_ns;
            d["rtt_ns"] = pb::bytes(reinterpret_cast<const char*>(run.rtt_ns.data()),
                                    run.rtt_ns.size() * sizeof(uint64_t));
            return d;
          },
          pb::arg("payloads"), pb::arg("payload_len"), pb::arg("expected"), pb::arg("expected_len"),
          pb::arg("count"), pb::arg("window"), pb::arg("interval_ns"), pb::arg("timeout_s"),
          pb::arg("seq_in_payload"))
      .def("read_region", [](const Transceiver& t, size_t index, size_t offset, size_t len) {
        const std::vector<uint8_t> b = t.read_region(index, offset, len);
        return pb::bytes(reinterpret_cast<const char*>(b.data()), b.size());
      });
}

}  // namespace rt::py
