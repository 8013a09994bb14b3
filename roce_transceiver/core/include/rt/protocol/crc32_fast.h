// The fastest CRC-32 each target has, with zlib.crc32 semantics.
//
// Host: crc32_update_host() picks carry-less multiplication (PCLMULQDQ) when
// the CPU has it, else the portable slicing-by-8 of crc32.h. Device: the
// portable path, one thread per packet (crc32_warp.cuh has the warp version).
#pragma once

#include "rt/protocol/crc32.h"

namespace rt {

#if RT_HOST_FUNCTIONS
// Defined in src/crc32_host.cpp; safe to call from any host thread.
uint32_t crc32_update_host(uint32_t crc, const uint8_t* p, size_t n);

// Which implementation crc32_update_host uses on this CPU ("pclmul" or "slice8").
const char* crc32_host_impl();
#endif

RT_HD inline uint32_t crc32_update_fast(uint32_t crc, const uint8_t* p, size_t n) {
#if RT_DEVICE_CODE
  return crc32_update(crc, p, n);
#else
  return crc32_update_host(crc, p, n);
#endif
}

}  // namespace rt
