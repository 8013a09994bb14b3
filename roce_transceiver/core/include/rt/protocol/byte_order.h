// Big-endian wire fields that refuse arithmetic.
//
// Headers are overlaid on packet bytes, which have no alignment guarantee,
// so every field is a byte array and every access goes byte by byte. The
// compilers turn these loops into a load plus bswap where alignment allows.
#pragma once

#include "rt/platform.h"

namespace rt {

template <int N, typename T>
struct BeField {
  static_assert(N >= 1 && N <= 8, "1 to 8 bytes");
  uint8_t b[N];

  RT_HD constexpr T get() const {
    T v = 0;
    for (int i = 0; i < N; ++i) v = static_cast<T>((v << 8) | b[i]);
    return v;
  }
  RT_HD constexpr void set(T v) {
    for (int i = N - 1; i >= 0; --i) {
      b[i] = static_cast<uint8_t>(v & 0xFF);
      v = static_cast<T>(v >> 8);
    }
  }
};

using Be16 = BeField<2, uint16_t>;
using Be24 = BeField<3, uint32_t>;
using Be32 = BeField<4, uint32_t>;
using Be48 = BeField<6, uint64_t>;
using Be64 = BeField<8, uint64_t>;

static_assert(sizeof(Be24) == 3, "wire fields have no padding");
static_assert(sizeof(Be64) == 8, "wire fields have no padding");

// Little-endian loads and stores, for the one little-endian field on the
// wire (the ICRC) and for CRC arithmetic.
RT_HD constexpr uint32_t load_le32(const uint8_t* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}
RT_HD constexpr void store_le32(uint8_t* p, uint32_t v) {
  p[0] = uint8_t(v);
  p[1] = uint8_t(v >> 8);
  p[2] = uint8_t(v >> 16);
  p[3] = uint8_t(v >> 24);
}

}  // namespace rt
