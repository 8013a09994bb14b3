// The handler interface: one message in, at most one reply out.
//
// Independent of the queue mode: the Ethernet-mode engine (engine.h) and the
// Verbs mode both hand a Message to handle() and transmit what it writes. A
// handler is picked by an enum switch (no virtual calls in RT_HD code).
//
// Handlers are pure: what they write is the reply, nothing else. The engine's
// express path runs a SEND's handler before the request's ICRC is checked and
// drops the reply when the check fails, so a handler with side effects would
// act on frames the engine then discards. (A WRITE with Immediate's handler
// runs after the check: its bytes must land in the region first.)
#pragma once

#include "rt/handlers/custom.h"
#include "rt/handlers/qec.h"
#include "rt/handlers/reply.h"
#include "rt/platform.h"

namespace rt {

enum class HandlerKind : uint32_t {
  kEcho = 0,    // reply = request (the NVQLink latency loop)
  kSink = 1,    // consume, never reply
  kQec = 2,     // surface-code lookup-table decoder (handlers/qec.h)
  kFrames = 3,  // HSB frame assembly: kept by the engine itself (engine/frames.h), no replies
  kCustom = 4,  // the user's own function (custom.h), compiled (and on the GPU linked) at start
};

// The generated trampoline of a user handler compiled for the host
// (roce_transceiver/custom_handler.py): calls the user's entry, catches what it throws.
using CustomTrampoline = int (*)(const CustomCall*);

// kCustom: the compiled handler (on the host: its trampoline; on the GPU it is linked into the
// kernels, dispatch.h) and this queue's share of its memory, where the executor reads it.
struct CustomDesc {
  CustomTrampoline call = nullptr;
  uint8_t* state = nullptr;  // this queue's state_bytes, 16-byte aligned; null when 0
  uint32_t state_bytes = 0;
  const uint8_t* params = nullptr;  // the run's constant parameters; null when none
  uint32_t params_bytes = 0;
  uint16_t queue = 0;  // CustomCall::queue
};

struct HandlerDesc {
  HandlerKind kind = HandlerKind::kEcho;
  QecTable qec;       // kQec: sizes, and pointers into the table blob in memory the executor reads
  CustomDesc custom;  // kCustom
};

struct Message {
  const uint8_t* data;  // payload (a view: valid only during handle())
  uint32_t len;
  uint32_t imm;  // immediate data when has_imm
  bool has_imm;
  uint8_t opcode;  // the opcode that completed the message
};

// Returns the reply length (0 or more bytes written to `reply`), kNoReply, or
// kHandlerError (counted by the engine).
RT_HD int handle(const HandlerDesc& h, const Message& m, uint8_t* reply, uint32_t capacity);

}  // namespace rt
