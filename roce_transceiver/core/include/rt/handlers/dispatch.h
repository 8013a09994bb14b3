// handle(): the switch over built-in handlers. Kept apart from handler.h so
// each handler's header is included once, where the engine is compiled.
#pragma once

#include "rt/handlers/echo.h"
#include "rt/handlers/handler.h"
#include "rt/handlers/qec.h"
#include "rt/queues/copy_wide.h"
#include "rt/team.h"

namespace rt {

// Whether this code runs a user's handler: on the host always (its shared object), on the GPU
// where its entry is linked in (RT_CUSTOM_ENTRY). The built-in kernels refuse handler custom at
// start, so what only a user's handler needs is left out of them (and of their registers).
#if !RT_DEVICE_CODE || defined(RT_CUSTOM_ENTRY)
constexpr bool kRunsUserHandler = true;
#else
constexpr bool kRunsUserHandler = false;
#endif

// A user handler's returned length, checked here, once, for every user handler: more than the
// capacity (the handler wrote past what it was given, or miscounted) or a negative value other
// than kNoReply is a handler error and nothing is sent.
RT_HD inline int custom_checked(int n, uint32_t capacity) {
  if (n == kNoReply) return kNoReply;
  if (n < 0 || uint32_t(n) > capacity) return kHandlerError;
  return n;
}

// kCustom, called by one lane of `lanes` (the GPU's warp calls it on every lane).
// On the host: the compiled shared object's trampoline. On the GPU: RT_CUSTOM_ENTRY, defined
// before the engine is included by the relocatable code a user's handler is linked into: the
// user's entry itself (the crew's kernels, the Verbs serve kernels), or in the one-warp kernels
// the handler warp's call (cuda/handler_warp.cuh: the leader's return is the team's). The
// built-in kernels have none and refuse kCustom at start.
RT_HD inline int custom_handle(const CustomDesc& c, const Message& m, uint8_t* reply,
                               uint32_t capacity, uint32_t lane = 0, uint32_t lanes = 1) {
  const CustomCall call{m.data,   m.len,          m.imm,    m.has_imm, m.opcode,
                        c.queue,  reply,          capacity, c.state,   c.state_bytes,
                        c.params, c.params_bytes, lane,     lanes};
#if RT_DEVICE_CODE
#if defined(RT_CUSTOM_ENTRY)
  return custom_checked(RT_CUSTOM_ENTRY(call), capacity);
#else
  (void)call;
  return kHandlerError;
#endif
#else
  return custom_checked(c.call(&call), capacity);
#endif
}

// A user handler by a team: on the GPU every lane of the warp calls it, each told its lane
// (custom.h); on the host the leader alone, as a team of one (the lanes of a host team are not
// threads). The leader's return is every lane's.
template <class Team>
RT_HD inline int custom_team(const Team& t, const CustomDesc& c, const Message& m, uint8_t* reply,
                             uint32_t capacity) {
  int n = 0;
#if RT_DEVICE_CODE
  n = custom_handle(c, m, reply, capacity, t.lane(), t.size());
#else
  if (t.leader()) n = custom_handle(c, m, reply, capacity);
#endif
  n = int(t.from_leader(uint32_t(n)));
  t.sync();
  return n;
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

// handle() by a team: the echo's copy is shared by the lanes (copy_bytes_team:
// 16-byte chunks, any alignment), a user handler runs on every lane of a warp; the others run on
// the leader (a user handler too on the host: its lanes are not threads there).
// Every lane gets the result.
template <class Team>
RT_HD inline int handle_team(const Team& t, const HandlerDesc& h, const Message& m, uint8_t* reply,
                             uint32_t capacity) {
  if constexpr (Team::kLanes > 1) {
    if (h.kind == HandlerKind::kEcho) {
      if (m.len > capacity) return kHandlerError;
      if (reply == m.data) return int(m.len);
      if (!m.has_imm) {
        // In a frame, followed by its ICRC: the chunks' loads may read 3 bytes past.
        copy_bytes_team(t, reply, m.data, m.len);  // ends with a sync
        return int(m.len);
      }
      // A WRITE's, in its region, which may end at the end of its memory.
      for (uint32_t i = t.lane(); i < m.len; i += t.size()) reply[i] = m.data[i];
      t.sync();
      return int(m.len);
    }
  }
  if (h.kind == HandlerKind::kCustom) return custom_team(t, h.custom, m, reply, capacity);
  int n = 0;
  if (t.leader()) n = handle(h, m, reply, capacity);
  n = int(t.from_leader(uint32_t(n)));
  t.sync();
  return n;
}

}  // namespace rt
