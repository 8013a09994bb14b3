// Protocol code run on the GPU, callable from host code compiled without nvcc.
// Used by the GPU tests to check that the device build of the protocol headers
// agrees byte for byte with the host build.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace rt::cuda {

// ICRC of each frame (frames[offsets[i] .. offsets[i] + lengths[i])), computed
// on the GPU by one thread per frame and by one warp per frame. A frame that
// does not decode yields 0 in both outputs. Throws std::runtime_error with the
// CUDA error text on any CUDA failure.
void icrc_on_device(const std::vector<uint8_t>& frames, const std::vector<uint32_t>& offsets,
                    const std::vector<uint32_t>& lengths, std::vector<uint32_t>& per_thread,
                    std::vector<uint32_t>& per_warp);

}  // namespace rt::cuda
