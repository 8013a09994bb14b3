// The engine's settings as the configuration gives them: each one a line below, with its
// type, the descriptor's member and its configuration key (the dotted key of
// roce_transceiver/config.py's SCHEMA, where its default, range and documentation are).
//
// From this one list: EngineSettings' members, which EngineDesc inherits (state.h), so that
// the loop reads d.batch; the host's configuration holds one (host/transceiver.h) and reads
// it key by key (for_each_setting); _core.engine_config_keys() lists the keys, and
// config.py's core_config() gives each its schema value by that name. A new engine setting
// is three edits: its Field in SCHEMA, its line here, and the code that uses it.
#pragma once

#include "rt/fixed_width.h"  // uint32_t here and under NVRTC

#define RT_ENGINE_SETTINGS(X)                                                                   \
  X(uint32_t, batch, "queues.batch")                       /* rx packets per step at most */    \
  X(uint32_t, completion_batch, "queues.completion_batch") /* records published together */     \
  X(uint32_t, msg_buf_bytes, "queues.max_message_bytes")   /* a multi-packet SEND's assembly */ \
  X(bool, check_icrc, "check_icrc")                                                             \
  X(bool, record_completions, "completions")                                                    \
  X(bool, express, "express") /* predicted SEND Onlys skip decoding (prediction.h) */           \
  X(uint32_t, settle_passes, "queues.settle_passes") /* idle passes before it settles */        \
  X(bool, rc_retransmit, "qp.retransmit") /* RC: keep what we send until acknowledged */        \
  X(uint32_t, rc_window, "qp.window")     /* packets outstanding at most (a power of two) */    \
  X(uint32_t, rc_timeout_us, "qp.ack_timeout_us")                                               \
  X(uint32_t, rc_retry, "qp.retry_count")                                                       \
  X(uint32_t, rc_rnr_retry, "qp.rnr_retry") /* 7: for ever */                                   \
  X(uint32_t, rc_rnr_timer, "qp.rnr_timer") /* the code our RNR NAKs carry (IBA table 45) */

namespace rt {

struct EngineSettings {
#define RT_SETTING_MEMBER(type, member, key) type member;
  RT_ENGINE_SETTINGS(RT_SETTING_MEMBER)
#undef RT_SETTING_MEMBER
};

// visit(key, member) for every setting, in the list's order: the host's (NVRTC compiles
// the engine's device code only, where a host function is an error).
#if !defined(__CUDACC_RTC__)
template <class Settings, class Visit>
void for_each_setting(Settings& s, Visit&& visit) {
#define RT_SETTING_VISIT(type, member, key) visit(key, s.member);
  RT_ENGINE_SETTINGS(RT_SETTING_VISIT)
#undef RT_SETTING_VISIT
}
#endif

}  // namespace rt
