// A build without GPUNetIO's headers: no device descriptor can be made (its layout is the
// headers', and differs between their releases).
#include <stdexcept>

#include "rt/verbs/descriptor.h"

namespace rt::verbs {

size_t descriptor_bytes() { return 0; }

void fill_descriptor(const DescriptorParams&, uint8_t*, size_t) {
  throw std::runtime_error(
      "this build has no GPUNetIO headers: the device descriptor's layout is theirs "
      "(cmake/gpunetio.cmake says where they are looked for)");
}

}  // namespace rt::verbs
