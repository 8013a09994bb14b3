// Python view of the protocol core: decode, encode, ICRC, the opcode table,
// PSN arithmetic and the HSB codecs. The Python package wraps these in typed
// classes (roce_transceiver/protocol.py); nothing here is public API.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "register.h"
#include "rt/protocol/crc32_combine.h"
#include "rt/protocol/describe.h"
#include "rt/protocol/encode.h"
#include "rt/protocol/hsb.h"
#include "rt/protocol/psn.h"

namespace py = pybind11;

namespace rt::py {
namespace {

ByteSpan as_span(const pybind11::buffer_info& b) {
  return ByteSpan(static_cast<const uint8_t*>(b.ptr), size_t(b.size * b.itemsize));
}

pybind11::bytes raw(const uint8_t* p, size_t n) {
  return pybind11::bytes(reinterpret_cast<const char*>(p), n);
}

pybind11::dict error_dict(const DecodeError& e) {
  pybind11::dict d;
  d["message"] = describe(e);
  d["field"] = e.field ? e.field : "";
  d["offset"] = e.offset;
  return d;
}

pybind11::list header_names(uint16_t hdrs) {
  static const char* names[kNumHdrs] = {"DETH",         "RETH",  "AtomicETH", "AETH",
                                        "AtomicAckETH", "ImmDt", "IETH"};
  pybind11::list out;
  for (int bit = 0; bit < kNumHdrs; ++bit)
    if (hdrs & (1u << bit)) out.append(names[bit]);
  return out;
}

// Every field of a decoded frame, flat; the Python layer groups them.
pybind11::dict frame_dict(const FrameView& f) {
  pybind11::dict d;
  const Bth& bth = f.bth_hdr();
  if (f.has_eth) {
    d["eth_dst"] = raw(f.eth_hdr().dst, 6);
    d["eth_src"] = raw(f.eth_hdr().src, 6);
    d["vlan"] = f.has_vlan ? pybind11::object(pybind11::int_(f.vlan_tci)) : pybind11::none();
    d["ip_version"] = f.ip_version;
    if (f.ip_version == 4) {
      const Ipv4Hdr& ip = f.ipv4_hdr();
      d["ip_src"] = raw(ip.src, 4);
      d["ip_dst"] = raw(ip.dst, 4);
      d["ip_id"] = ip.id.get();
      d["ip_tos"] = ip.tos;
      d["ip_ttl"] = ip.ttl;
      d["ip_flow_label"] = pybind11::none();
    } else {
      const Ipv6Hdr& ip = f.ipv6_hdr();
      d["ip_src"] = raw(ip.src, 16);
      d["ip_dst"] = raw(ip.dst, 16);
      d["ip_id"] = pybind11::none();
      d["ip_tos"] = ip.traffic_class();
      d["ip_ttl"] = ip.hop_limit;
      d["ip_flow_label"] = ip.flow_label();
    }
    d["udp_sport"] = f.udp_hdr().src_port.get();
    d["udp_dport"] = f.udp_hdr().dst_port.get();
    d["udp_checksum"] = f.udp_hdr().checksum.get();
    d["icrc_computed"] = icrc_compute(f);
  }
  d["opcode"] = bth.opcode;
  d["opcode_name"] = opcode_name(bth.opcode);
  d["se"] = bth.se();
  d["mig_req"] = bth.mig_req();
  d["pad_count"] = bth.pad_count();
  d["tver"] = bth.tver();
  d["pkey"] = bth.pkey.get();
  d["fecn"] = bth.fecn();
  d["becn"] = bth.becn();
  d["dest_qp"] = bth.dest_qp.get();
  d["ack_req"] = bth.ack_requested();
  d["psn"] = bth.psn.get();
  const OpcodeInfo& op = f.op;
  if (op.has(kDeth)) {
    const Deth& h = f.ext_hdr<Deth>(kDeth);
    d["deth"] = pybind11::make_tuple(h.qkey.get(), h.src_qp.get());
  }
  if (op.has(kReth)) {
    const Reth& h = f.ext_hdr<Reth>(kReth);
    d["reth"] = pybind11::make_tuple(h.va.get(), h.rkey.get(), h.dma_len.get());
  }
  if (op.has(kAtomicEth)) {
    const AtomicEth& h = f.ext_hdr<AtomicEth>(kAtomicEth);
    d["atomic_eth"] =
        pybind11::make_tuple(h.va.get(), h.rkey.get(), h.swap_add.get(), h.compare.get());
  }
  if (op.has(kAeth)) {
    const Aeth& h = f.ext_hdr<Aeth>(kAeth);
    d["aeth"] = pybind11::make_tuple(h.syndrome(), h.msn());
  }
  if (op.has(kAtomicAckEth))
    d["atomic_ack_eth"] = f.ext_hdr<AtomicAckEth>(kAtomicAckEth).orig.get();
  if (op.has(kImmDt)) d["imm"] = f.ext_hdr<ImmDt>(kImmDt).imm.get();
  if (op.has(kIeth)) d["ieth"] = f.ext_hdr<Ieth>(kIeth).rkey.get();
  d["headers"] = header_names(op.hdrs);
  d["payload"] = raw(f.base + f.payload, f.payload_len);
  d["pad"] = raw(f.base + f.payload + f.payload_len, f.pad);
  d["icrc"] = f.icrc_field();
  d["length"] = f.end;
  return d;
}

pybind11::dict decode_frame(const pybind11::buffer& frame, bool transport_only) {
  const pybind11::buffer_info b = frame.request();
  const ByteSpan span = as_span(b);
  const DecodeResult r = transport_only ? decode_transport(span) : decode(span);
  if (!r.ok()) {
    pybind11::dict d;
    d["error"] = error_dict(r.error);
    return d;
  }
  return frame_dict(r.frame);
}

template <size_t N>
void copy_bytes(const pybind11::handle& v, uint8_t (&dst)[N], size_t want, const char* key) {
  const std::string s = v.cast<std::string>();
  if (s.size() != want)
    throw pybind11::value_error(std::string(key) + ": need " + std::to_string(want) +
                                " bytes, got " + std::to_string(s.size()));
  std::memcpy(dst, s.data(), want);
}

// A Python int in 0..max as T; anything else is a ValueError naming the key.
template <typename T>
T checked_int(const pybind11::handle& v, const char* key, uint64_t max) {
  if (!PyLong_Check(v.ptr()))
    throw pybind11::value_error(std::string(key) + "=" + pybind11::repr(v).cast<std::string>() +
                                ": not an integer");
  const unsigned long long x = PyLong_AsUnsignedLongLong(v.ptr());
  if (PyErr_Occurred() || x > max) {
    PyErr_Clear();
    throw pybind11::value_error(std::string(key) + "=" + pybind11::str(v).cast<std::string>() +
                                ": out of range 0.." + std::to_string(max));
  }
  return T(x);
}

// build() keywords, one setter each. Integers are range-checked against
// the field's wire width; an unknown keyword is an error naming it.
using FieldSetter = void (*)(FrameSpec&, pybind11::handle, const char*);

template <auto Member, uint64_t Max>
void set_int(FrameSpec& s, pybind11::handle v, const char* key) {
  using T = std::remove_reference_t<decltype(s.*Member)>;
  s.*Member = checked_int<T>(v, key, Max);
}

template <auto Member>
void set_bool(FrameSpec& s, pybind11::handle v, const char*) {
  s.*Member = v.cast<bool>();
}

// A derived field the caller overrides: store the value, mark it given.
template <auto Member, auto Given, uint64_t Max>
void set_override(FrameSpec& s, pybind11::handle v, const char* key) {
  set_int<Member, Max>(s, v, key);
  s.*Given = true;
}

template <auto Member>
void set_mac(FrameSpec& s, pybind11::handle v, const char* key) {
  copy_bytes(v, s.*Member, 6, key);
}

void set_vlan(FrameSpec& s, pybind11::handle v, const char* key) {
  s.vlan = !v.is_none();
  if (s.vlan) s.vlan_tci = checked_int<uint16_t>(v, key, 0xFFFF);
}

const std::map<std::string, FieldSetter, std::less<>>& frame_fields() {
  static const std::map<std::string, FieldSetter, std::less<>> fields = {
      {"eth_dst", &set_mac<&FrameSpec::dst_mac>},
      {"eth_src", &set_mac<&FrameSpec::src_mac>},
      {"vlan", &set_vlan},
      {"ip_version", &set_int<&FrameSpec::ip_version, 0xFF>},
      {"ip_id", &set_int<&FrameSpec::ip_id, 0xFFFF>},
      {"ip_tos", &set_int<&FrameSpec::tos, 0xFF>},
      {"ip_ttl", &set_int<&FrameSpec::ttl, 0xFF>},
      {"ip_flow_label", &set_int<&FrameSpec::flow_label, 0xFFFFF>},
      {"ip_dont_fragment", &set_bool<&FrameSpec::dont_fragment>},
      {"ip_checksum",
       &set_override<&FrameSpec::ip_checksum, &FrameSpec::ip_checksum_given, 0xFFFF>},
      {"udp_sport", &set_int<&FrameSpec::src_port, 0xFFFF>},
      {"udp_dport", &set_int<&FrameSpec::dst_port, 0xFFFF>},
      {"udp_checksum", &set_int<&FrameSpec::udp_checksum, 0xFFFF>},
      {"opcode", &set_int<&FrameSpec::opcode, 0xFF>},
      {"se", &set_bool<&FrameSpec::se>},
      {"mig_req", &set_bool<&FrameSpec::mig_req>},
      {"tver", &set_int<&FrameSpec::tver, 0xF>},
      {"pkey", &set_int<&FrameSpec::pkey, 0xFFFF>},
      {"fecn", &set_bool<&FrameSpec::fecn>},
      {"becn", &set_bool<&FrameSpec::becn>},
      {"dest_qp", &set_int<&FrameSpec::dest_qp, 0xFFFFFF>},
      {"ack_req", &set_bool<&FrameSpec::ack_req>},
      {"psn", &set_int<&FrameSpec::psn, 0xFFFFFF>},
      {"va", &set_int<&FrameSpec::va, ~0ull>},
      {"rkey", &set_int<&FrameSpec::rkey, 0xFFFFFFFF>},
      {"dma_len", &set_int<&FrameSpec::dma_len, 0xFFFFFFFF>},
      {"imm", &set_int<&FrameSpec::imm, 0xFFFFFFFF>},
      {"syndrome", &set_int<&FrameSpec::syndrome, 0xFF>},
      {"msn", &set_int<&FrameSpec::msn, 0xFFFFFF>},
      {"swap_add", &set_int<&FrameSpec::swap_add, ~0ull>},
      {"compare", &set_int<&FrameSpec::compare, ~0ull>},
      {"atomic_ack_orig", &set_int<&FrameSpec::orig, ~0ull>},
      {"qkey", &set_int<&FrameSpec::qkey, 0xFFFFFFFF>},
      {"src_qp", &set_int<&FrameSpec::src_qp, 0xFFFFFF>},
      {"ieth_rkey", &set_int<&FrameSpec::inval_rkey, 0xFFFFFFFF>},
      {"pad_count", &set_int<&FrameSpec::pad_count, 3>},
      {"icrc", &set_override<&FrameSpec::icrc, &FrameSpec::icrc_given, 0xFFFFFFFF>},
  };
  return fields;
}

FrameSpec spec_from_dict(const pybind11::dict& fields) {
  FrameSpec s;
  // IP addresses are copied after ip_version is known.
  pybind11::object src_ip, dst_ip;
  for (const auto& item : fields) {
    const std::string key = item.first.cast<std::string>();
    if (key == "ip_src" || key == "ip_dst") {
      (key == "ip_src" ? src_ip : dst_ip) =
          pybind11::reinterpret_borrow<pybind11::object>(item.second);
      continue;
    }
    const auto it = frame_fields().find(key);
    if (it == frame_fields().end()) throw pybind11::value_error("unknown field '" + key + "'");
    it->second(s, item.second, key.c_str());
  }
  const size_t ip_len = s.ip_version == 6 ? 16 : 4;
  if (src_ip) copy_bytes(src_ip, s.src_ip, ip_len, "ip_src");
  if (dst_ip) copy_bytes(dst_ip, s.dst_ip, ip_len, "ip_dst");
  return s;
}

pybind11::bytes encode_frame(const pybind11::dict& fields, const pybind11::buffer& payload) {
  const FrameSpec s = spec_from_dict(fields);
  const pybind11::buffer_info b = payload.request();
  const ByteSpan pl = as_span(b);
  if (pl.size > 0xFFFF)
    throw pybind11::value_error("payload: " + std::to_string(pl.size) +
                                " bytes is more than an IP packet can carry");
  std::string out(encoded_size(s, uint32_t(pl.size)), '\0');
  const EncodeResult r =
      encode(s, pl, MutByteSpan(reinterpret_cast<uint8_t*>(out.data()), out.size()));
  switch (r.status) {
    case EncodeStatus::kOk: break;
    case EncodeStatus::kBadOpcode:
      throw pybind11::value_error("opcode 0x" + [&] {
        char h[8];
        std::snprintf(h, sizeof h, "%02X", s.opcode);
        return std::string(h);
      }() + ": not an RC, UC, UD or CNP opcode");
    case EncodeStatus::kBadField:
      if (std::string(r.field) == "payload")
        throw pybind11::value_error("payload: a CNP carries exactly 16 reserved bytes, got " +
                                    std::to_string(pl.size));
      throw pybind11::value_error(std::string(r.field) + ": must be 4 or 6");
    case EncodeStatus::kTooLong:
      throw pybind11::value_error("payload: frame would exceed the 65535-byte IP limit");
    case EncodeStatus::kBufferTooSmall:
      throw std::logic_error("encode: buffer sizing disagrees with encoded_size");
  }
  out.resize(r.len);
  return pybind11::bytes(out);
}

uint32_t icrc_of(const pybind11::buffer& frame) {
  const pybind11::buffer_info b = frame.request();
  const DecodeResult r = decode(as_span(b));
  if (!r.ok()) throw pybind11::value_error(describe(r.error));
  return icrc_compute(r.frame);
}

pybind11::list opcode_table() {
  pybind11::list rows;
  for (int opcode = 0; opcode < 256; ++opcode) {
    const OpcodeInfo info = opcode_info(uint8_t(opcode));
    if (!info.valid) continue;
    pybind11::dict row;
    row["opcode"] = opcode;
    row["name"] = opcode_name(uint8_t(opcode));
    row["transport"] = transport_name(info.transport);
    row["operation"] = info.operation;
    row["headers"] = header_names(info.hdrs);
    row["first"] = info.is(kFirst);
    row["last"] = info.is(kLast);
    row["middle"] = info.is(kMiddle);
    row["payload"] = info.is(kPayload);
    row["immediate"] = info.is(kImm);
    rows.append(row);
  }
  return rows;
}

// The HSB metadata record's fields, their Python names and widths: one list
// drives both pack and unpack.
struct MetadataField {
  const char* name;
  uint64_t max;
  uint64_t (*get)(const HsbMetadataFields&);
  void (*set)(HsbMetadataFields&, uint64_t);
};

template <auto Member>
constexpr MetadataField metadata_field(const char* name, uint64_t max) {
  using T = std::remove_reference_t<decltype(HsbMetadataFields{}.*Member)>;
  return {name, max, [](const HsbMetadataFields& f) { return uint64_t(f.*Member); },
          [](HsbMetadataFields& f, uint64_t v) { f.*Member = T(v); }};
}

constexpr uint64_t kU16 = 0xFFFFull, kU32 = 0xFFFFFFFFull, kU64 = ~0ull;
const MetadataField kMetadataFields[] = {
    metadata_field<&HsbMetadataFields::flags>("flags", kU32),
    metadata_field<&HsbMetadataFields::psn>("psn", kU32),
    metadata_field<&HsbMetadataFields::crc>("crc", kU32),
    metadata_field<&HsbMetadataFields::ptp_s>("ptp_s", kU64),
    metadata_field<&HsbMetadataFields::ptp_ns>("ptp_ns", kU32),
    metadata_field<&HsbMetadataFields::bytes_written>("bytes_written", kU64),
    metadata_field<&HsbMetadataFields::frame_number>("frame_number", kU16),
    metadata_field<&HsbMetadataFields::meta_ptp_s>("meta_ptp_s", kU64),
    metadata_field<&HsbMetadataFields::meta_ptp_ns>("meta_ptp_ns", kU32),
};

pybind11::bytes hsb_metadata_pack(const pybind11::dict& d) {
  HsbMetadataFields f;
  for (const auto& item : d) {
    const std::string key = item.first.cast<std::string>();
    const MetadataField* field = nullptr;
    for (const MetadataField& candidate : kMetadataFields)
      if (key == candidate.name) field = &candidate;
    if (!field) throw pybind11::value_error("unknown metadata field '" + key + "'");
    field->set(f, checked_int<uint64_t>(item.second, field->name, field->max));
  }
  HsbFrameMetadata m;
  hsb_metadata_encode(f, &m);
  return raw(reinterpret_cast<const uint8_t*>(&m), sizeof m);
}

pybind11::dict hsb_metadata_unpack(const pybind11::buffer& buf) {
  const pybind11::buffer_info b = buf.request();
  const ByteSpan s = as_span(b);
  if (s.size < sizeof(HsbFrameMetadata))
    throw pybind11::value_error("truncated HSB metadata at offset 0: need 128 bytes, " +
                                std::to_string(s.size) + " left");
  const HsbMetadataFields f =
      hsb_metadata_decode(*reinterpret_cast<const HsbFrameMetadata*>(s.data));
  pybind11::dict d;
  for (const MetadataField& field : kMetadataFields) d[field.name] = field.get(f);
  return d;
}

}  // namespace

void register_protocol(pybind11::module_& m) {
  m.def("decode", &decode_frame, pybind11::arg("frame"), pybind11::arg("transport_only") = false,
        "Decode a frame: a dict of fields, or {'error': {message, field, offset}}.");
  m.def("encode", &encode_frame, pybind11::arg("fields"), pybind11::arg("payload"),
        "Build a frame from a dict of fields; unknown keys are an error.");
  m.def("icrc", &icrc_of, pybind11::arg("frame"), "ICRC a frame should carry.");
  m.def("opcode_table", &opcode_table, "One row per valid opcode.");
  m.def(
      "crc32",
      [](const pybind11::buffer& data, uint32_t crc) {
        const pybind11::buffer_info b = data.request();
        const ByteSpan s = as_span(b);
        pybind11::gil_scoped_release nogil;
        return crc32_update_host(crc, s.data, s.size);
      },
      pybind11::arg("data"), pybind11::arg("crc") = 0, "zlib-compatible CRC-32.");
  m.def("crc32_impl", &crc32_host_impl);
  m.def("crc32_combine", &crc32_combine, pybind11::arg("crc_a"), pybind11::arg("crc_b"),
        pybind11::arg("len_b"), "CRC of A||B from crc(A), crc(B), len(B) (the warp ICRC's math).");
  m.def(
      "crc32_zeros",
      [](uint32_t raw, uint64_t n, bool table) {
        if (!table) return crc32_zeros(detail::crc32_tables(), raw, n);
        Crc32ZerosTable z;
        crc32_zeros_table(z, n);
        return crc32_zeros_by(z, raw);
      },
      pybind11::arg("raw"), pybind11::arg("n"), pybind11::arg("table") = false,
      "A raw CRC register after n zero bytes, by table shifts (or a table for n), as a "
      "frames page's CRC is folded from its packets'.");
  m.def(
      "crc32_run_shift",
      [](uint32_t raw, uint64_t n, uint32_t m) {
        if (m >> kRunShiftLevels)
          throw std::invalid_argument("m=" + std::to_string(m) + ": at most " +
                                      std::to_string((1u << kRunShiftLevels) - 1));
        auto s = std::make_unique<Crc32RunShifts>();
        for (uint32_t e = 0; e < kRunShiftEntries; ++e)
          (&s->t[0][0][0])[e] = crc32_run_shift_entry(n, e);
        s->n = n;
        return crc32_run_shift(*s, raw, m);
      },
      pybind11::arg("raw"), pybind11::arg("n"), pybind11::arg("m"),
      "A raw CRC register after m * n zero bytes by the run tables for n, as the frames "
      "stream's commit folds a run of m packets of n data bytes at once.");
  m.def("psn_add", &psn_add);
  m.def("psn_diff", &psn_diff);
  m.def("psn_before", &psn_before);
  m.def("hsb_imm_encode", &hsb_imm_encode, pybind11::arg("psn"), pybind11::arg("page"));
  m.def(
      "hsb_imm_decode",
      [](uint32_t imm, uint32_t page_bits) {
        return pybind11::make_tuple(hsb_imm_psn(imm), hsb_imm_page(imm, page_bits));
      },
      pybind11::arg("imm"), pybind11::arg("page_bits") = 12);
  m.def("hsb_metadata_pack", &hsb_metadata_pack);
  m.def("hsb_metadata_unpack", &hsb_metadata_unpack);
}

}  // namespace rt::py
