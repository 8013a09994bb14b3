#include "rt/host/custom_library.h"

#include <dlfcn.h>

#include <stdexcept>

namespace rt::host {

CustomLibrary::CustomLibrary(const std::string& path) : handle_(nullptr, dlclose) {
  dlerror();
  // RTLD_NODELETE: the code stays mapped for the process's life, dlclose or not. A loop whose
  // stop() timed out (a handler that never returns) is left running inside it; unmapping it
  // under that thread is a segfault at the latest when the process exits. What it costs: one
  // mapping per distinct handler a process loads (the cache's key is the source's hash).
  handle_.reset(dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE));
  if (!handle_)
    throw std::invalid_argument("custom_library '" + path + "': does not load: " + dlerror());
  const auto abi = reinterpret_cast<uint32_t (*)()>(dlsym(handle_.get(), "rt_custom_abi_version"));
  call_ = reinterpret_cast<CustomTrampoline>(dlsym(handle_.get(), "rt_custom_call"));
  if (!abi || !call_)
    throw std::invalid_argument("custom_library '" + path +
                                "': not a compiled handler (no rt_custom_call / "
                                "rt_custom_abi_version)");
  if (abi() != kCustomAbiVersion)
    throw std::invalid_argument("custom_library '" + path + "': compiled against handler ABI " +
                                std::to_string(abi()) + ", this engine has " +
                                std::to_string(kCustomAbiVersion) +
                                " (rebuild it: clear the handler cache)");
}

}  // namespace rt::host
