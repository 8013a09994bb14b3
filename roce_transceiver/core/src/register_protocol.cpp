// Python view of the protocol core: decode, encode, ICRC, the opcode table,
// PSN arithmetic and the HSB codecs. The Python package wraps these in typed
// classes (roce_transceiver/protocol.py); nothing here is public API.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <string>
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
  static const char* names[kNumHdrs] = {"DETH", "RETH",  "AtomicETH", "AETH",
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
  if (op.has(kAtomicAckEth)) d["atomic_ack_eth"] = f.ext_hdr<AtomicAckEth>(kAtomicAckEth).orig.get();
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

FrameSpec spec_from_dict(const pybind11::dict& fields) {
  FrameSpec s;
  // IP addresses are copied after ip_version is known.
  pybind11::object src_ip, dst_ip;
  for (const auto& item : fields) {
    const std::string key = item.first.cast<std::string>();
    const pybind11::handle v = item.second;
    const char* k = key.c_str();
    if (key == "eth_dst") copy_bytes(v, s.dst_mac, 6, k);
    else if (key == "eth_src") copy_bytes(v, s.src_mac, 6, k);
    else if (key == "vlan") {
      s.vlan = !v.is_none();
      if (s.vlan) s.vlan_tci = checked_int<uint16_t>(v, k, 0xFFFF);
    } else if (key == "ip_version") s.ip_version = checked_int<uint8_t>(v, k, 0xFF);
    else if (key == "ip_src") src_ip = pybind11::reinterpret_borrow<pybind11::object>(v);
    else if (key == "ip_dst") dst_ip = pybind11::reinterpret_borrow<pybind11::object>(v);
    else if (key == "ip_id") s.ip_id = checked_int<uint16_t>(v, k, 0xFFFF);
    else if (key == "ip_tos") s.tos = checked_int<uint8_t>(v, k, 0xFF);
    else if (key == "ip_ttl") s.ttl = checked_int<uint8_t>(v, k, 0xFF);
    else if (key == "ip_flow_label") s.flow_label = checked_int<uint32_t>(v, k, 0xFFFFF);
    else if (key == "ip_dont_fragment") s.dont_fragment = v.cast<bool>();
    else if (key == "ip_checksum") {
      s.ip_checksum_given = true;
      s.ip_checksum = checked_int<uint16_t>(v, k, 0xFFFF);
    } else if (key == "udp_sport") s.src_port = checked_int<uint16_t>(v, k, 0xFFFF);
    else if (key == "udp_dport") s.dst_port = checked_int<uint16_t>(v, k, 0xFFFF);
    else if (key == "udp_checksum") s.udp_checksum = checked_int<uint16_t>(v, k, 0xFFFF);
    else if (key == "opcode") s.opcode = checked_int<uint8_t>(v, k, 0xFF);
    else if (key == "se") s.se = v.cast<bool>();
    else if (key == "mig_req") s.mig_req = v.cast<bool>();
    else if (key == "tver") s.tver = checked_int<uint8_t>(v, k, 0xF);
    else if (key == "pkey") s.pkey = checked_int<uint16_t>(v, k, 0xFFFF);
    else if (key == "fecn") s.fecn = v.cast<bool>();
    else if (key == "becn") s.becn = v.cast<bool>();
    else if (key == "dest_qp") s.dest_qp = checked_int<uint32_t>(v, k, 0xFFFFFF);
    else if (key == "ack_req") s.ack_req = v.cast<bool>();
    else if (key == "psn") s.psn = checked_int<uint32_t>(v, k, 0xFFFFFF);
    else if (key == "va") s.va = checked_int<uint64_t>(v, k, ~0ull);
    else if (key == "rkey") s.rkey = checked_int<uint32_t>(v, k, 0xFFFFFFFF);
    else if (key == "dma_len") s.dma_len = checked_int<uint32_t>(v, k, 0xFFFFFFFF);
    else if (key == "imm") s.imm = checked_int<uint32_t>(v, k, 0xFFFFFFFF);
    else if (key == "syndrome") s.syndrome = checked_int<uint8_t>(v, k, 0xFF);
    else if (key == "msn") s.msn = checked_int<uint32_t>(v, k, 0xFFFFFF);
    else if (key == "swap_add") s.swap_add = checked_int<uint64_t>(v, k, ~0ull);
    else if (key == "compare") s.compare = checked_int<uint64_t>(v, k, ~0ull);
    else if (key == "atomic_ack_orig") s.orig = checked_int<uint64_t>(v, k, ~0ull);
    else if (key == "qkey") s.qkey = checked_int<uint32_t>(v, k, 0xFFFFFFFF);
    else if (key == "src_qp") s.src_qp = checked_int<uint32_t>(v, k, 0xFFFFFF);
    else if (key == "ieth_rkey") s.inval_rkey = checked_int<uint32_t>(v, k, 0xFFFFFFFF);
    else if (key == "pad_count") s.pad_count = checked_int<int16_t>(v, k, 3);
    else if (key == "icrc") {
      s.icrc_given = true;
      s.icrc = checked_int<uint32_t>(v, k, 0xFFFFFFFF);
    } else
      throw pybind11::value_error("unknown field '" + key + "'");
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
    case EncodeStatus::kOk:
      break;
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

pybind11::bytes hsb_metadata_pack(const pybind11::dict& d) {
  HsbMetadataFields f;
  for (const auto& item : d) {
    const std::string key = item.first.cast<std::string>();
    const char* k = key.c_str();
    const pybind11::handle v = item.second;
    if (key == "flags") f.flags = checked_int<uint32_t>(v, k, 0xFFFFFFFF);
    else if (key == "psn") f.psn = checked_int<uint32_t>(v, k, 0xFFFFFFFF);
    else if (key == "crc32") f.crc32 = checked_int<uint32_t>(v, k, 0xFFFFFFFF);
    else if (key == "ptp_s") f.ptp_s = checked_int<uint64_t>(v, k, 0xFFFFFFFFFFFFull);
    else if (key == "ptp_ns") f.ptp_ns = checked_int<uint32_t>(v, k, 0xFFFFFFFF);
    else if (key == "bytes_written") f.bytes_written = checked_int<uint64_t>(v, k, ~0ull);
    else if (key == "frame_number") f.frame_number = checked_int<uint32_t>(v, k, 0xFFFFFFFF);
    else if (key == "meta_ptp_s") f.meta_ptp_s = checked_int<uint64_t>(v, k, 0xFFFFFFFFFFFFull);
    else if (key == "meta_ptp_ns") f.meta_ptp_ns = checked_int<uint32_t>(v, k, 0xFFFFFFFF);
    else throw pybind11::value_error("unknown metadata field '" + key + "'");
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
  const HsbMetadataFields f = hsb_metadata_decode(*reinterpret_cast<const HsbFrameMetadata*>(s.data));
  pybind11::dict d;
  d["flags"] = f.flags;
  d["psn"] = f.psn;
  d["crc32"] = f.crc32;
  d["ptp_s"] = f.ptp_s;
  d["ptp_ns"] = f.ptp_ns;
  d["bytes_written"] = f.bytes_written;
  d["frame_number"] = f.frame_number;
  d["meta_ptp_s"] = f.meta_ptp_s;
  d["meta_ptp_ns"] = f.meta_ptp_ns;
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
  m.def("psn_add", &psn_add);
  m.def("psn_diff", &psn_diff);
  m.def("psn_before", &psn_before);
  m.def("hsb_imm_encode", &hsb_imm_encode, pybind11::arg("psn"), pybind11::arg("page"));
  m.def("hsb_imm_decode",
        [](uint32_t imm) { return pybind11::make_tuple(hsb_imm_psn(imm), hsb_imm_page(imm)); });
  m.def("hsb_metadata_pack", &hsb_metadata_pack);
  m.def("hsb_metadata_unpack", &hsb_metadata_unpack);
}

}  // namespace rt::py
