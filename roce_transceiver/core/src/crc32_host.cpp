#include "rt/protocol/crc32_fast.h"

namespace rt {

uint32_t crc32_update_host(uint32_t crc, const uint8_t* p, size_t n) {
  return crc32_update(crc, p, n);
}

const char* crc32_host_impl() { return "slice8"; }

}  // namespace rt
