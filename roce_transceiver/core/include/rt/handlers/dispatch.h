// handle(): the switch over built-in handlers. Kept apart from handler.h so
// each handler's header is included once, where the engine is compiled.
#pragma once

#include "rt/handlers/echo.h"
#include "rt/handlers/handler.h"
#include "rt/handlers/qec.h"
#include "rt/team.h"

namespace rt {

// kCustom on the cpu executor: a team of one lane. The returned length is checked here, once,
// for every user handler: more than the capacity (the handler wrote past what it was given, or
// miscounted) or a negative value other than kNoReply is a handler error and nothing is sent.
RT_HD inline int custom_handle(const CustomDesc& c, const Message& m, uint8_t* reply,
                               uint32_t capacity) {
#if RT_DEVICE_CODE
  // c.call is a host address: the cuda executor refuses kCustom at start, so this never runs.
  (void)c, (void)m, (void)reply, (void)capacity;
  return kHandlerError;
#else
  const CustomCall call{m.data,   m.len,   m.imm,         m.has_imm, m.opcode,       c.queue, reply,
                        capacity, c.state, c.state_bytes, c.params,  c.params_bytes, 0,       1};
  const int n = c.call(&call);
  if (n == kNoReply) return kNoReply;
  if (n < 0 || uint32_t(n) > capacity) return kHandlerError;
  return n;
#endif
}

RT_HD inline int handle(const HandlerDesc& h, const Message& m, uint8_t* reply, uint32_t capacity) {
  switch (h.kind) {
    case HandlerKind::kEcho: return echo_handle(m, reply, capacity);
    case HandlerKind::kSink:
    case HandlerKind::kFrames: return kNoReply;
    case HandlerKind::kQec: {
      const int n = qec_decode(h.qec, m.data, m.len, reply, capacity);
      return n < 0 ? kHandlerError : n;
    }
    case HandlerKind::kCustom: return custom_handle(h.custom, m, reply, capacity);
  }
  return kHandlerError;
}

// handle() by a team: the echo's copy is shared by the lanes (a byte each, so
// any alignment); the others run on the leader. Every lane gets the result.
template <class Team>
RT_HD inline int handle_team(const Team& t, const HandlerDesc& h, const Message& m, uint8_t* reply,
                             uint32_t capacity) {
  if constexpr (Team::kLanes > 1) {
    if (h.kind == HandlerKind::kEcho) {
      if (m.len > capacity) return kHandlerError;
      if (reply != m.data)
        for (uint32_t i = t.lane(); i < m.len; i += t.size()) reply[i] = m.data[i];
      t.sync();
      return int(m.len);
    }
  }
  int n = 0;
  if (t.leader()) n = handle(h, m, reply, capacity);
  n = int(t.from_leader(uint32_t(n)));
  t.sync();
  return n;
}

}  // namespace rt
