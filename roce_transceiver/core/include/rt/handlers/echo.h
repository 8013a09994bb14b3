// echo: the reply is the request, byte for byte (the NVQLink round-trip loop).
#pragma once

#include "rt/byte_copy.h"
#include "rt/handlers/handler.h"

namespace rt {

RT_HD inline int echo_handle(const Message& m, uint8_t* reply, uint32_t capacity) {
  if (m.len > capacity) return kHandlerError;
  if (reply != m.data) copy_bytes(reply, m.data, m.len);
  return int(m.len);
}

}  // namespace rt
