// Human-readable text for protocol results (host only).
#pragma once

#include <string>

#include "rt/protocol/decode.h"

namespace rt {

// "truncated RETH at offset 54: need 16 bytes, 8 left", and the like.
std::string describe(const DecodeError& e);

// "RC_SEND_ONLY", "UD_SEND_ONLY_WITH_IMMEDIATE", "CNP"; "" when invalid.
std::string opcode_name(uint8_t opcode);

}  // namespace rt
