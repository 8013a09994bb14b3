// echo: the reply is the request, byte for byte (the NVQLink round-trip loop).
#pragma once

#include "rt/handlers/handler.h"

namespace rt {

RT_HD inline int echo_handle(const Message& m, uint8_t* reply, uint32_t capacity) {
  if (m.len > capacity) return kHandlerError;
  if (reply != m.data)
    for (uint32_t i = 0; i < m.len; ++i) reply[i] = m.data[i];
  return int(m.len);
}

}  // namespace rt
