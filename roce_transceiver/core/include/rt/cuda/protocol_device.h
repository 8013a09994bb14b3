// Protocol code run on the GPU, callable from host code compiled without nvcc.
// Used by the GPU tests to check that the device build of the protocol headers
// agrees byte for byte with the host build.
#pragma once

#include <array>
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

// Decode each frame on the GPU and encode it again from what was decoded
// (spec_from_frame, then encode). out[offsets[i]..] receives frame i, and
// out_lengths[i] its length (0 when it did not decode).
void reencode_on_device(const std::vector<uint8_t>& frames, const std::vector<uint32_t>& offsets,
                        const std::vector<uint32_t>& lengths, std::vector<uint8_t>& out,
                        std::vector<uint32_t>& out_lengths);

// For each 128-byte HSB metadata record: decode and encode it again on the
// GPU, and also return hsb_imm_encode(psn, page) and psn_diff(b, a) for the
// given inputs, so the host can compare with its own build.
void hsb_psn_on_device(const std::vector<uint8_t>& records, const std::vector<uint32_t>& a,
                       const std::vector<uint32_t>& b, std::vector<uint8_t>& records_out,
                       std::vector<uint32_t>& imm_out, std::vector<int32_t>& diff_out);

// copy_bytes_team (queues/copy_wide.h) by one warp, from shared memory to device memory, for
// every (source offset, destination offset, length) in `cases` (each < 64, < 64, <= 4096):
// `src` (4160 bytes) is staged at shared offset so, copied to dst offset do of a zeroed
// 4160-byte buffer; out[i] is that buffer after case i.
void copy_team_on_device(const std::vector<uint8_t>& src,
                         const std::vector<std::array<uint32_t, 3>>& cases,
                         std::vector<uint8_t>& out);

}  // namespace rt::cuda
