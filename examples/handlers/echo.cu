// The built-in echo as a user handler: the reply is the request (docs/handlers.md,
// "Your own handler"). `roce-transceiver bench roundtrip --handler custom
// --custom-source examples/handlers/echo.cu --custom-entry echo` runs it next
// to the built-in echo: what a user handler costs beyond its own work.
//
// The lanes split the copy a byte each (any length, any alignment), then wait
// for one another before the engine reads the reply.
#include "rt/handlers/custom.h"

RT_HD int echo(const rt::CustomCall& call) {
  if (call.request_len > call.reply_capacity) return rt::kHandlerError;
  for (uint32_t i = call.lane; i < call.request_len; i += call.lanes)
    call.reply[i] = call.request[i];
  rt::custom_sync(call);
  return int(call.request_len);
}
