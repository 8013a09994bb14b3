// What a handler returns besides a reply length. Alone, with no include, so
// that user handlers compiled by NVRTC (custom.h) share the engine's values.
#pragma once

namespace rt {

constexpr int kNoReply = -1;       // consumed, nothing to send
constexpr int kHandlerError = -2;  // counted by the engine as a handler error, no reply

}  // namespace rt
