// Python view of the engine: the host Transceiver (queues, executor, loopback
// far end) and the counter names. roce_transceiver/transceiver.py wraps it.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <limits>
#include <set>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "register.h"
#include "rt/host/transceiver.h"

namespace rt::py {
namespace {

namespace pb = pybind11;

// The flat config roce_transceiver/config.py's core_config() produces, read as
// host::for_each_config_key lists it. A key missing, unknown or of the wrong kind means
// config.py and this build of _core disagree (a programming error, or a stale build), and
// the message names the key.
[[noreturn]] void refuse(const std::string& key, const pb::handle& v, const std::string& want) {
  std::string value = pb::repr(v).cast<std::string>();
  if (value.size() > 60) value = value.substr(0, 57) + "...";  // a QEC blob is kilobytes
  throw pb::value_error("engine config: " + key + "=" + value + ": must be " + want);
}

template <class T>
T read_integer(const pb::handle& v, const std::string& key) {
  static_assert(std::is_integral_v<T> && !std::is_same_v<T, bool>);
  const auto lo = std::numeric_limits<T>::min();
  const auto hi = std::numeric_limits<T>::max();
  const bool ok = pb::isinstance<pb::int_>(v) && !pb::isinstance<pb::bool_>(v) &&
                  !(v < pb::int_(lo)) && !(pb::int_(hi) < v);
  if (!ok) refuse(key, v, "an integer from " + std::to_string(lo) + " to " + std::to_string(hi));
  return v.cast<T>();
}

std::string read_bytes(const pb::handle& v, const std::string& key, size_t n) {
  if (!pb::isinstance<pb::bytes>(v) || pb::len(v) != n)
    refuse(key, v, std::to_string(n) + " bytes");
  return v.cast<std::string>();
}

// One overload per kind of member for_each_config_key names: read() sets it from a Python
// value, kind() says what it takes (engine_config_keys()).
template <class T, std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool>, int> = 0>
void read(const pb::handle& v, T& out, const std::string& key) {
  out = read_integer<T>(v, key);
}
template <class T, std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool>, int> = 0>
std::string kind(const T&) {
  return (std::is_signed_v<T> ? "int" : "uint") + std::to_string(8 * sizeof(T));
}

void read(const pb::handle& v, bool& out, const std::string& key) {
  if (!pb::isinstance<pb::bool_>(v)) refuse(key, v, "a bool");
  out = v.cast<bool>();
}
std::string kind(const bool&) { return "bool"; }

void read(const pb::handle& v, double& out, const std::string& key) {
  if (pb::isinstance<pb::bool_>(v) ||
      !(pb::isinstance<pb::float_>(v) || pb::isinstance<pb::int_>(v)))
    refuse(key, v, "a number");
  out = v.cast<double>();
}
std::string kind(const double&) { return "float"; }

void read(const pb::handle& v, std::string& out, const std::string& key) {
  if (!pb::isinstance<pb::str>(v)) refuse(key, v, "a str");
  out = v.cast<std::string>();
}
std::string kind(const std::string&) { return "str"; }

void read(const pb::handle& v, std::vector<uint8_t>& out, const std::string& key) {
  if (!pb::isinstance<pb::bytes>(v)) refuse(key, v, "bytes");
  const std::string s = v.cast<std::string>();
  out.assign(s.begin(), s.end());
}
std::string kind(const std::vector<uint8_t>&) { return "bytes"; }

void read(const pb::handle& v, std::vector<host::RegionConfig>& out, const std::string& key) {
  if (!pb::isinstance<pb::list>(v)) refuse(key, v, "a list of (va, rkey, length)");
  out.clear();
  size_t i = 0;
  for (const auto& r : v) {
    const std::string at = key + "[" + std::to_string(i++) + "]";
    if (!pb::isinstance<pb::tuple>(r) || pb::len(r) != 3)
      refuse(at, r, "a tuple (va, rkey, length)");
    const auto t = r.cast<pb::tuple>();
    out.push_back({read_integer<uint64_t>(t[0], at + ".va"),
                   read_integer<uint32_t>(t[1], at + ".rkey"),
                   read_integer<uint32_t>(t[2], at + ".length")});
  }
}
std::string kind(const std::vector<host::RegionConfig>&) { return "regions"; }

void read(const pb::handle& v, const host::MacKey& out, const std::string& key) {
  const std::string s = read_bytes(v, key, 6);
  std::memcpy(out.bytes, s.data(), 6);
}
std::string kind(const host::MacKey&) { return "mac"; }

void read(const pb::handle& v, const host::IpKey& out, const std::string& key) {
  if (*out.version != 4 && *out.version != 6)
    throw pb::value_error("engine config: ip_version=" + std::to_string(*out.version) +
                          ": must be 4 or 6");
  const size_t want = *out.version == 6 ? 16 : 4;
  const std::string s = read_bytes(v, key, want);
  std::memcpy(out.bytes, s.data(), want);
}
std::string kind(const host::IpKey&) { return "ip"; }

void read(const pb::handle& v, const host::OptionalU16Key& out, const std::string& key) {
  *out.present = !v.is_none();
  if (*out.present) *out.value = read_integer<uint16_t>(v, key);
}
std::string kind(const host::OptionalU16Key&) { return "uint16 or None"; }

template <class E>
std::string kind(const host::NamedKey<E>& k) {
  std::string s;
  for (uint32_t i = 0; i < k.count; ++i) s += (i ? "|" : "") + std::string(k.names[i]);
  return s;
}

template <class E>
void read(const pb::handle& v, const host::NamedKey<E>& out, const std::string& key) {
  if (pb::isinstance<pb::str>(v)) {
    const std::string s = v.cast<std::string>();
    for (uint32_t i = 0; i < out.count; ++i)
      if (s == out.names[i]) {
        *out.value = E(i);
        return;
      }
  }
  refuse(key, v, "one of " + kind(out));
}

// Every key with its kind, in for_each_config_key's order.
std::vector<std::pair<std::string, std::string>> config_keys() {
  host::TransceiverConfig scratch;
  std::vector<std::pair<std::string, std::string>> out;
  host::for_each_config_key(
      scratch, [&](const char* key, auto&& member) { out.emplace_back(key, kind(member)); });
  return out;
}

std::string joined(const std::vector<std::string>& keys) {
  std::string s;
  for (const std::string& k : keys) s += (s.empty() ? "'" : ", '") + k + "'";
  return s;
}

host::TransceiverConfig config_from_dict(const pb::dict& d) {
  std::vector<std::string> missing, unknown;
  std::set<std::string> known;
  for (const auto& entry : config_keys()) {
    known.insert(entry.first);
    if (!d.contains(entry.first)) missing.push_back(entry.first);
  }
  for (const auto& item : d) {
    const std::string key = pb::str(item.first).cast<std::string>();
    if (!known.count(key)) unknown.push_back(key);
  }
  if (!missing.empty() || !unknown.empty())
    throw pb::value_error(
        "engine config: " + (missing.empty() ? "" : "keys missing: " + joined(missing)) +
        (missing.empty() || unknown.empty() ? "" : "; ") +
        (unknown.empty() ? "" : "keys unknown: " + joined(unknown)) +
        " (roce_transceiver/config.py's core_config() and this build of _core disagree: "
        "rebuild _core with make install)");
  host::TransceiverConfig c;
  host::for_each_config_key(
      c, [&](const char* key, auto&& member) { read(pb::object(d[key]), member, key); });
  c.local.pkey = c.qp.pkey;  // every BTH we build carries our QP's partition
  return c;
}

// A far end's result (a queue's, or the queues' added up) as the Python RoundTrip's fields.
pb::dict far_end_dict(const FarEndResult& r) {
  pb::dict d;
  d["status"] = far_end_status_name(r.status);
  d["sent"] = r.sent;
  d["received"] = r.received;
  d["wrong"] = r.wrong;
  d["bad_frames"] = r.bad_frames;
  d["ring_full"] = r.ring_full;
  d["elapsed_ns"] = r.elapsed_ns;
  d["late"] = r.late;
  d["dropped"] = r.dropped;
  d["max_lag_ns"] = r.max_lag_ns;
  d["slow_checks"] = r.slow_checks;
  d["send_ns"] = r.send_ns;
  d["check_ns"] = r.check_ns;
  return d;
}

// A frame's record as Python has it: each field's name, kind and value, in the order
// frames.Frame declares them. The one list: the record's dict, Frame (its test), the
// operator's metadata and the distributed app's record tensor all come from it
// (_core.FRAME_RECORD_FIELDS).
struct FrameField {
  const char* name;
  const char* kind;  // "int", "bool", or "int?" (None where the frame has no metadata)
  pb::object (*value)(const FrameRecord&);
};

pb::object flag(const FrameRecord& r, uint32_t f) { return pb::bool_((r.flags & f) != 0); }

const FrameField kFrameFields[] = {
    {"frame_number", "int",
     [](const FrameRecord& r) -> pb::object { return pb::int_(r.frame_number); }},
    {"page", "int", [](const FrameRecord& r) -> pb::object { return pb::int_(r.page); }},
    {"bytes", "int", [](const FrameRecord& r) -> pb::object { return pb::int_(r.bytes); }},
    {"crc32", "int", [](const FrameRecord& r) -> pb::object { return pb::int_(r.crc32); }},
    {"metadata_crc", "int?",
     [](const FrameRecord& r) -> pb::object {
       return (r.flags & kFrameHasMetadata) ? pb::object(pb::int_(r.metadata_crc)) : pb::none();
     }},
    {"has_metadata", "bool", [](const FrameRecord& r) { return flag(r, kFrameHasMetadata); }},
    {"crc_ok", "bool", [](const FrameRecord& r) { return flag(r, kFrameCrcOk); }},
    {"crc_checked", "bool", [](const FrameRecord& r) { return flag(r, kFrameCrcChecked); }},
    {"bytes_ok", "bool", [](const FrameRecord& r) { return flag(r, kFrameBytesOk); }},
    {"page_match", "bool", [](const FrameRecord& r) { return flag(r, kFramePageMatch); }},
    {"psn_first", "int", [](const FrameRecord& r) -> pb::object { return pb::int_(r.psn_first); }},
    {"psn_last", "int", [](const FrameRecord& r) -> pb::object { return pb::int_(r.psn_last); }},
    {"packets", "int", [](const FrameRecord& r) -> pb::object { return pb::int_(r.packets); }},
    {"packets_lost", "int",
     [](const FrameRecord& r) -> pb::object { return pb::int_(r.packets_lost); }},
    {"ptp_s", "int", [](const FrameRecord& r) -> pb::object { return pb::int_(r.ptp_s); }},
    {"ptp_ns", "int", [](const FrameRecord& r) -> pb::object { return pb::int_(r.ptp_ns); }},
    {"rx_first_ns", "int",
     [](const FrameRecord& r) -> pb::object { return pb::int_(r.rx_first_ns); }},
    {"rx_last_ns", "int",
     [](const FrameRecord& r) -> pb::object { return pb::int_(r.rx_last_ns); }},
};

// A slice's record as Python has it (frames.Slice declares these first, in this order;
// _core.SLICE_RECORD_FIELDS).
struct SliceField {
  const char* name;
  const char* kind;  // "int" or "bool"
  pb::object (*value)(const SliceRecord&);
};

const SliceField kSliceFields[] = {
    {"frame_number", "int",
     [](const SliceRecord& r) -> pb::object { return pb::int_(r.frame_number); }},
    {"slice", "int", [](const SliceRecord& r) -> pb::object { return pb::int_(r.slice); }},
    {"page", "int", [](const SliceRecord& r) -> pb::object { return pb::int_(r.page); }},
    {"offset", "int", [](const SliceRecord& r) -> pb::object { return pb::int_(r.offset); }},
    {"bytes", "int", [](const SliceRecord& r) -> pb::object { return pb::int_(r.bytes); }},
    {"whole", "bool",
     [](const SliceRecord& r) -> pb::object { return pb::bool_((r.flags & kSliceWhole) != 0); }},
    {"last", "bool",
     [](const SliceRecord& r) -> pb::object { return pb::bool_((r.flags & kSliceLast) != 0); }},
    {"rx_last_ns", "int",
     [](const SliceRecord& r) -> pb::object { return pb::int_(r.rx_last_ns); }},
};

bool is_frame(const host::Completion& c) {
  return (c.record.flags & kCompletionFrame) && c.request.size() >= sizeof(FrameRecord);
}

// A frame's completion as the host takes it, a tuple, not a dict (one is made for each frame a
// graph takes, and its names are known once): (its record's values in FRAME_RECORD_FIELDS'
// order, done_timestamp_ns, queue, the statistic's result or None, handler_error).
pb::tuple frame_completion(const host::Completion& c) {
  FrameRecord r;
  std::memcpy(&r, c.request.data(), sizeof r);
  pb::tuple record(std::size(kFrameFields));
  for (size_t i = 0; i < std::size(kFrameFields); ++i) record[i] = kFrameFields[i].value(r);
  pb::object result = pb::none();  // a statistic's result (frames with custom.source): the reply
  if (c.record.reply_len >= 0)
    result = pb::bytes(reinterpret_cast<const char*>(c.reply.data()), c.reply.size());
  return pb::make_tuple(record, c.record.done_timestamp_ns, c.queue, result,
                        bool(c.record.flags & kCompletionHandlerError));
}

pb::dict completion_dict(const host::Completion& c) {
  pb::dict d;
  d["queue"] = c.queue;
  d["request_len"] = c.record.request_len;
  d["reply_len"] = c.record.reply_len;
  d["imm"] = (c.record.flags & kCompletionHasImm) ? pb::object(pb::int_(c.record.imm)) : pb::none();
  d["opcode"] = c.record.opcode;
  d["handler_error"] = bool(c.record.flags & kCompletionHandlerError);
  d["reply_dropped"] = bool(c.record.flags & kCompletionReplyDropped);
  d["psn"] = c.record.psn;
  d["rx_timestamp_ns"] = c.record.rx_timestamp_ns;
  d["done_timestamp_ns"] = c.record.done_timestamp_ns;
  d["slice"] = pb::none();
  if ((c.record.flags & kCompletionSlice) && c.request.size() >= sizeof(SliceRecord)) {
    SliceRecord r;
    std::memcpy(&r, c.request.data(), sizeof r);
    pb::dict f;
    for (const SliceField& field : kSliceFields) f[field.name] = field.value(r);
    d["slice"] = f;
  }
  d["request"] = pb::bytes(reinterpret_cast<const char*>(c.request.data()), c.request.size());
  d["reply"] = pb::bytes(reinterpret_cast<const char*>(c.reply.data()), c.reply.size());
  return d;
}

// The executor's figures by name, in their order: a count, or a tuple of a count a part.
pb::dict executor_stats(const host::ExecutorStats& stats) {
  pb::dict d;
  for (const auto& [name, value] : stats) {
    if (const auto* parts = std::get_if<std::vector<uint64_t>>(&value))
      d[name.c_str()] = pb::tuple(pb::cast(*parts));
    else
      d[name.c_str()] = std::get<uint64_t>(value);
  }
  return d;
}

}  // namespace

void register_engine(pb::module_& m) {
  // What the engine's configuration takes: [(key, kind)] (tests/test_config_mapping.py).
  m.def("engine_config_keys", [] {
    pb::list out;
    for (const auto& entry : config_keys()) out.append(pb::make_tuple(entry.first, entry.second));
    return out;
  });
  // The bounds of the core's fixed arrays: the schema's maxima for these keys (config.py).
  pb::dict limits;
  limits["queues"] = kMaxQueues;
  limits["regions"] = kMaxRegions;
  limits["pages"] = kMaxPages;
  m.attr("LIMITS") = limits;

  {
    pb::list fields;
    for (const FrameField& f : kFrameFields) fields.append(pb::make_tuple(f.name, f.kind));
    m.attr("FRAME_RECORD_FIELDS") = pb::tuple(fields);
  }
  {
    pb::list fields;
    for (const SliceField& f : kSliceFields) fields.append(pb::make_tuple(f.name, f.kind));
    m.attr("SLICE_RECORD_FIELDS") = pb::tuple(fields);
  }

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
      .def(pb::init([](const pb::dict& cfg, std::shared_ptr<host::Nic> nic) {
             return std::make_unique<Transceiver>(config_from_dict(cfg), std::move(nic));
           }),
           pb::arg("config"), pb::arg("nic") = nullptr, pb::keep_alive<1, 3>())
      .def("start", &Transceiver::start, pb::call_guard<pb::gil_scoped_release>())
      .def("stop", &Transceiver::stop, pb::call_guard<pb::gil_scoped_release>())
      .def("running", &Transceiver::running)
      .def("check", &Transceiver::check)
      .def("release_page", &Transceiver::release_page)
      .def("page_memory", &Transceiver::page_memory, pb::arg("page"), pb::arg("bytes"))
      .def("nic_stats", [](const Transceiver& t) { return nic_fields(t.nic_stats()); })
      .def("nic_info", [](const Transceiver& t) { return nic_fields(t.nic_info()); })
      .def_property_readonly("nic_name", [](const Transceiver& t) { return t.nic().name(); })
      .def("epoch_stats", [](const Transceiver& t) { return executor_stats(t.epoch_stats()); })
      .def("counters",
           [](const Transceiver& t) {
             const std::vector<uint64_t> v = t.counters();
             pb::dict d;
             for (uint32_t i = 0; i < kNumCounters; ++i) d[kCounterNames[i]] = v[i];
             return d;
           })
      .def("queue_counters",
           [](const Transceiver& t, uint32_t queue) {
             const std::vector<uint64_t> v = t.queue_counters(queue);
             pb::dict d;
             for (uint32_t i = 0; i < kNumCounters; ++i) d[kCounterNames[i]] = v[i];
             return d;
           })
      .def_property_readonly("queue_count", &Transceiver::queue_count)
      .def("send",
           [](Transceiver& t, const pb::bytes& data) {
             const std::string s = data;
             return t.send(reinterpret_cast<const uint8_t*>(s.data()), s.size());
           })
      .def("poll_completions",
           [](Transceiver& t, size_t max) {
             pb::list out;
             for (const host::Completion& c : t.poll_completions(max))
               out.append(is_frame(c) ? pb::object(frame_completion(c))
                                      : pb::object(completion_dict(c)));
             return out;
           })
      .def("wait_completions", &Transceiver::wait_completions, pb::arg("timeout_ns"),
           pb::arg("spin_ns"), pb::call_guard<pb::gil_scoped_release>())
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
             uint64_t interval_ns, double timeout_s, bool seq_in_payload, uint32_t queues,
             uint64_t late_ns, uint64_t drop_ns) {
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
            p.queues = queues;
            p.late_ns = late_ns;
            p.drop_ns = drop_ns;
            host::FarEndRun run;
            {
              pb::gil_scoped_release nogil;
              run = t.run_far_end(p);
            }
            pb::dict d = far_end_dict(run.result);
            pb::list per_queue;
            for (const FarEndResult& r : run.queues) per_queue.append(far_end_dict(r));
            d["per_queue"] = per_queue;
            d["rtt_ns"] = pb::bytes(reinterpret_cast<const char*>(run.rtt_ns.data()),
                                    run.rtt_ns.size() * sizeof(uint64_t));
            return d;
          },
          pb::arg("payloads"), pb::arg("payload_len"), pb::arg("expected"), pb::arg("expected_len"),
          pb::arg("count"), pb::arg("window"), pb::arg("interval_ns"), pb::arg("timeout_s"),
          pb::arg("seq_in_payload"), pb::arg("queues") = 1, pb::arg("late_ns") = 0,
          pb::arg("drop_ns") = 0)
      .def("read_region", [](const Transceiver& t, size_t index, size_t offset, size_t len) {
        const std::vector<uint8_t> b = t.read_region(index, offset, len);
        return pb::bytes(reinterpret_cast<const char*>(b.data()), b.size());
      });
}

}  // namespace rt::py
