// handle(): the switch over built-in handlers. Kept apart from handler.h so
// each handler's header is included once, where the engine is compiled.
#pragma once

#include "rt/handlers/echo.h"
#include "rt/handlers/handler.h"
#include "rt/handlers/qec.h"

namespace rt {

RT_HD inline int handle(const HandlerDesc& h, const Message& m, uint8_t* reply, uint32_t capacity) {
  switch (h.kind) {
    case HandlerKind::kEcho: return echo_handle(m, reply, capacity);
    case HandlerKind::kSink: return kNoReply;
    case HandlerKind::kQec: {
      const int n = qec_decode(h.qec, m.data, m.len, reply, capacity);
      return n < 0 ? kHandlerError : n;
    }
  }
  return kHandlerError;
}

}  // namespace rt
