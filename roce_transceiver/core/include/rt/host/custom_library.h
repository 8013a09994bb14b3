// A user handler compiled for the host (roce_transceiver/custom_handler.py's shared object):
// loaded, its ABI version checked, its trampoline found. What the cpu executor's loop and
// Verbs mode's CPU serve loop call; its code stays loaded for the process's life (a loop
// abandoned by a stop() that timed out may still run in it).
#pragma once

#include <memory>
#include <string>

#include "rt/handlers/handler.h"

namespace rt::host {

class CustomLibrary {
 public:
  // Throws std::invalid_argument naming the file: it does not load, it is not a compiled
  // handler, or it was compiled against another kCustomAbiVersion.
  explicit CustomLibrary(const std::string& path);

  CustomTrampoline call() const { return call_; }

 private:
  std::unique_ptr<void, int (*)(void*)> handle_;
  CustomTrampoline call_ = nullptr;
};

}  // namespace rt::host
