// qec: surface-code decoding by table lookup (syndrome bits in, correction bits out).
//
// The tables are built in Python at configuration time (roce_transceiver/qec.py, which also
// documents the blob and wire layouts; docs/handlers.md has a worked example). Host code copies
// the blob to memory the executor reads, fills a QecTable with qec_table_from_blob, and the
// engine calls qec_decode once per message: two loads from the tables and a few shifts, no
// data-dependent loops, so a thread of the persistent kernel spends the same time on every
// syndrome.
#pragma once

#include "rt/platform.h"

// The tables are read in place as uint32_t; the blob is little-endian.
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "rt/handlers/qec.h reads the little-endian table blob in place: big-endian hosts need a swap"
#endif

namespace rt {

constexpr uint32_t kQecBlobVersion = 1;
constexpr uint32_t kQecBlobHeaderBytes = 16;
// A correction is a uint32 mask over the data qubits (d <= 5 needs 25 bits), so a request
// (num_data - 1 syndrome bits) and a reply (2 * num_data bits) each fit one uint64_t.
constexpr uint32_t kQecMaxDataQubits = 32;
// 2^16 entries (256 KiB) per table at most; d=5 needs 2^12.
constexpr uint32_t kQecMaxChecksPerType = 16;

// qec_decode's errors. Neither is -1, which handlers use for "no reply" (handler.h kNoReply),
// so a caller that passes the value through cannot mistake an error for a silent consume.
constexpr int kQecRequestTooShort = -3;
constexpr int kQecReplyTooSmall = -4;

// A decoder's tables and sizes. Plain data: host code fills it from the blob, the kernel
// receives it by value or pointer. The pointers point into the blob, which must outlive it.
struct QecTable {
  const uint32_t* x_corrections = nullptr;  // [1 << num_z_checks], indexed by the Z syndrome
  const uint32_t* z_corrections = nullptr;  // [1 << num_x_checks], indexed by the X syndrome
  uint32_t distance = 0;
  uint32_t num_data = 0;      // data qubits, d*d
  uint32_t num_x_checks = 0;  // X-type checks: the first syndrome bits of a request
  uint32_t num_z_checks = 0;  // Z-type checks: the bits after them
  // Derived once here so qec_decode does no arithmetic on the sizes.
  uint32_t request_bytes = 0;  // ceil((num_x_checks + num_z_checks) / 8)
  uint32_t reply_bytes = 0;    // ceil(2 * num_data / 8)
  uint32_t x_syndrome_mask = 0;
  uint32_t z_syndrome_mask = 0;
  uint32_t data_mask = 0;  // keeps a stray high table bit out of the Z half of the reply
};

namespace detail {
RT_HD constexpr uint32_t qec_le16(const uint8_t* p) { return uint32_t(p[0]) | uint32_t(p[1]) << 8; }
RT_HD constexpr uint32_t qec_low_bits(uint32_t n) { return n >= 32 ? ~0u : (1u << n) - 1u; }
}  // namespace detail

// Checks the header (magic "QECT", version, sizes within the limits above, one logical qubit:
// num_x_checks + num_z_checks == num_data - 1), that `len` is exactly header plus both tables,
// and that the tables are 4-byte aligned (device loads of uint32_t must be). Fills *out and
// returns true only when all hold; *out is untouched otherwise.
RT_HD inline bool qec_table_from_blob(const uint8_t* blob, size_t len, QecTable* out) {
  if (blob == nullptr || out == nullptr || len < kQecBlobHeaderBytes) return false;
  if (blob[0] != 'Q' || blob[1] != 'E' || blob[2] != 'C' || blob[3] != 'T') return false;
  if (detail::qec_le16(blob + 4) != kQecBlobVersion) return false;
  const uint32_t distance = detail::qec_le16(blob + 6);
  const uint32_t num_data = detail::qec_le16(blob + 8);
  const uint32_t nx = detail::qec_le16(blob + 10);
  const uint32_t nz = detail::qec_le16(blob + 12);
  if (detail::qec_le16(blob + 14) != 0) return false;
  if (num_data == 0 || num_data > kQecMaxDataQubits || distance * distance != num_data)
    return false;
  if (nx > kQecMaxChecksPerType || nz > kQecMaxChecksPerType || nx + nz + 1 != num_data)
    return false;
  const size_t x_entries = size_t(1) << nz;
  const size_t z_entries = size_t(1) << nx;
  if (len != kQecBlobHeaderBytes + 4 * (x_entries + z_entries)) return false;
  if (reinterpret_cast<uintptr_t>(blob) % 4 != 0) return false;

  QecTable t;
  t.x_corrections = reinterpret_cast<const uint32_t*>(blob + kQecBlobHeaderBytes);
  t.z_corrections = t.x_corrections + x_entries;
  t.distance = distance;
  t.num_data = num_data;
  t.num_x_checks = nx;
  t.num_z_checks = nz;
  t.request_bytes = (nx + nz + 7) / 8;
  t.reply_bytes = (2 * num_data + 7) / 8;
  t.x_syndrome_mask = detail::qec_low_bits(nx);
  t.z_syndrome_mask = detail::qec_low_bits(nz);
  t.data_mask = detail::qec_low_bits(num_data);
  *out = t;
  return true;
}

// Points a table checked by qec_table_from_blob at a byte-identical copy of its blob, without
// reading the copy: host code checks the host blob, copies it to device memory, and relocates
// onto the device address it cannot read. The copy must be 4-byte aligned too (cudaMalloc's is).
RT_HD inline void qec_table_relocate(QecTable* t, const uint8_t* blob_copy) {
  t->x_corrections = reinterpret_cast<const uint32_t*>(blob_copy + kQecBlobHeaderBytes);
  t->z_corrections = t->x_corrections + (size_t(1) << t->num_z_checks);
}

// Decodes one request (X-check bits then Z-check bits, little-endian bit order) into a reply
// (X-correction bits then Z-correction bits over the data qubits, same order, padding bits 0).
// Bytes past t.request_bytes are ignored. Returns t.reply_bytes, kQecRequestTooShort or
// kQecReplyTooSmall. Both loops run at most 8 times (the limits qec_table_from_blob enforces).
RT_HD inline int qec_decode(const QecTable& t, const uint8_t* request, uint32_t request_len,
                            uint8_t* reply, uint32_t reply_capacity) {
  if (request_len < t.request_bytes) return kQecRequestTooShort;
  if (reply_capacity < t.reply_bytes) return kQecReplyTooSmall;
  uint64_t syndrome = 0;
  for (uint32_t i = 0; i < t.request_bytes; ++i) syndrome |= uint64_t(request[i]) << (8 * i);
  const uint32_t sx = uint32_t(syndrome) & t.x_syndrome_mask;
  const uint32_t sz = uint32_t(syndrome >> t.num_x_checks) & t.z_syndrome_mask;
  const uint64_t correction = uint64_t(t.x_corrections[sz] & t.data_mask) |
                              uint64_t(t.z_corrections[sx] & t.data_mask) << t.num_data;
  for (uint32_t i = 0; i < t.reply_bytes; ++i) reply[i] = uint8_t(correction >> (8 * i));
  return int(t.reply_bytes);
}

}  // namespace rt
