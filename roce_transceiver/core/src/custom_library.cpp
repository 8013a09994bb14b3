#include "rt/host/custom_library.h"

#include <dlfcn.h>

#include <stdexcept>

namespace rt::host {

CustomLibrary::CustomLibrary(const std::string& path) : handle_(nullptr, dlclose) {
  dlerror();
  handle_.reset(dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL));
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
