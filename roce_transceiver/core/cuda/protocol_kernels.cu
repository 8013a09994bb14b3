// Device builds of the protocol headers, and what the CUDA runtime can see.
//
// The kernels here exist so tests can prove that the protocol code nvcc
// compiles for the GPU gives the same bytes as the host build.
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "rt/cuda/protocol_device.h"
#include "rt/cuda/runtime_info.h"
#include "rt/protocol/encode.h"
#include "rt/protocol/hsb.h"
#include "rt/protocol/icrc.h"
#include "rt/protocol/icrc_warp.cuh"
#include "rt/protocol/psn.h"
#include "rt/queues/copy_wide.h"
#include "rt/team.h"

namespace rt::cuda {
namespace {

void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess)
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorName(err) + " (" +
                             cudaGetErrorString(err) + ")");
}

// Frees on scope exit, so a failed check cannot leak device memory.
template <typename T>
struct DeviceBuffer {
  T* ptr = nullptr;
  explicit DeviceBuffer(size_t n) { check(cudaMalloc(&ptr, n * sizeof(T) + 1), "cudaMalloc"); }
  ~DeviceBuffer() { cudaFree(ptr); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

__global__ void icrc_thread_kernel(const uint8_t* frames, const uint32_t* offsets,
                                   const uint32_t* lengths, uint32_t n, uint32_t* out) {
  crc32_tables_to_shared();
  const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const DecodeResult r = decode(ByteSpan(frames + offsets[i], lengths[i]));
  out[i] = r.ok() ? icrc_compute(r.frame) : 0;
}

__global__ void icrc_warp_kernel(const uint8_t* frames, const uint32_t* offsets,
                                 const uint32_t* lengths, uint32_t n, uint32_t* out) {
  crc32_tables_to_shared();
  const uint32_t warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
  const uint32_t lane = threadIdx.x % 32;
  if (warp >= n) return;  // whole warps leave together
  const DecodeResult r = decode(ByteSpan(frames + offsets[warp], lengths[warp]));
  if (!r.ok()) {
    if (lane == 0) out[warp] = 0;
    return;
  }
  const uint32_t icrc = icrc_compute_warp(r.frame, lane);
  if (lane == 0) out[warp] = icrc;
}

__global__ void reencode_kernel(const uint8_t* frames, const uint32_t* offsets,
                                const uint32_t* lengths, uint32_t n, uint8_t* out,
                                uint32_t* out_lengths) {
  crc32_tables_to_shared();
  const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  out_lengths[i] = 0;
  const DecodeResult r = decode(ByteSpan(frames + offsets[i], lengths[i]));
  if (!r.ok()) return;
  const FrameSpec spec = spec_from_frame(r.frame);
  const ByteSpan payload(r.frame.base + r.frame.payload, r.frame.payload_len);
  const EncodeResult e = encode(spec, payload, MutByteSpan(out + offsets[i], lengths[i]));
  if (e.ok()) out_lengths[i] = e.len;
}

__global__ void hsb_psn_kernel(const uint8_t* records, const uint32_t* a, const uint32_t* b,
                               uint32_t n, uint8_t* records_out, uint32_t* imm_out,
                               int32_t* diff_out) {
  const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const auto& in =
      *reinterpret_cast<const HsbFrameMetadata*>(records + i * sizeof(HsbFrameMetadata));
  auto* out = reinterpret_cast<HsbFrameMetadata*>(records_out + i * sizeof(HsbFrameMetadata));
  hsb_metadata_encode(hsb_metadata_decode(in), out);
  imm_out[i] = hsb_imm_encode(b[i], a[i]);
  diff_out[i] = psn_diff(b[i], a[i]);
}

template <typename T>
void upload(DeviceBuffer<T>& d, const std::vector<T>& h) {
  check(cudaMemcpy(d.ptr, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice),
        "cudaMemcpy H2D");
}
template <typename T>
void download(std::vector<T>& h, const DeviceBuffer<T>& d) {
  check(cudaMemcpy(h.data(), d.ptr, h.size() * sizeof(T), cudaMemcpyDeviceToHost),
        "cudaMemcpy D2H");
}

void check_ranges(const std::vector<uint8_t>& frames, const std::vector<uint32_t>& offsets,
                  const std::vector<uint32_t>& lengths) {
  if (lengths.size() != offsets.size())
    throw std::invalid_argument("offsets and lengths differ in size");
  for (size_t i = 0; i < offsets.size(); ++i)
    if (uint64_t(offsets[i]) + lengths[i] > frames.size())
      throw std::invalid_argument("frame " + std::to_string(i) + " runs past the buffer");
}

}  // namespace

void reencode_on_device(const std::vector<uint8_t>& frames, const std::vector<uint32_t>& offsets,
                        const std::vector<uint32_t>& lengths, std::vector<uint8_t>& out,
                        std::vector<uint32_t>& out_lengths) {
  check_ranges(frames, offsets, lengths);
  const uint32_t n = uint32_t(offsets.size());
  out.assign(frames.size(), 0);
  out_lengths.assign(n, 0);
  if (n == 0) return;
  DeviceBuffer<uint8_t> d_frames(frames.size()), d_out(frames.size());
  DeviceBuffer<uint32_t> d_off(n), d_len(n), d_out_len(n);
  upload(d_frames, frames);
  upload(d_off, offsets);
  upload(d_len, lengths);
  check(cudaMemset(d_out.ptr, 0, frames.size()), "cudaMemset");
  reencode_kernel<<<(n + 127) / 128, 128>>>(d_frames.ptr, d_off.ptr, d_len.ptr, n, d_out.ptr,
                                            d_out_len.ptr);
  check(cudaGetLastError(), "reencode_kernel launch");
  check(cudaDeviceSynchronize(), "reencode_kernel");
  download(out, d_out);
  download(out_lengths, d_out_len);
}

void hsb_psn_on_device(const std::vector<uint8_t>& records, const std::vector<uint32_t>& a,
                       const std::vector<uint32_t>& b, std::vector<uint8_t>& records_out,
                       std::vector<uint32_t>& imm_out, std::vector<int32_t>& diff_out) {
  const uint32_t n = uint32_t(a.size());
  if (b.size() != n || records.size() != size_t(n) * sizeof(HsbFrameMetadata))
    throw std::invalid_argument("need one 128-byte record and one (a, b) pair per case");
  records_out.assign(records.size(), 0);
  imm_out.assign(n, 0);
  diff_out.assign(n, 0);
  if (n == 0) return;
  DeviceBuffer<uint8_t> d_rec(records.size()), d_rec_out(records.size());
  DeviceBuffer<uint32_t> d_a(n), d_b(n), d_imm(n);
  DeviceBuffer<int32_t> d_diff(n);
  upload(d_rec, records);
  upload(d_a, a);
  upload(d_b, b);
  hsb_psn_kernel<<<(n + 127) / 128, 128>>>(d_rec.ptr, d_a.ptr, d_b.ptr, n, d_rec_out.ptr, d_imm.ptr,
                                           d_diff.ptr);
  check(cudaGetLastError(), "hsb_psn_kernel launch");
  check(cudaDeviceSynchronize(), "hsb_psn_kernel");
  download(records_out, d_rec_out);
  download(imm_out, d_imm);
  download(diff_out, d_diff);
}

RuntimeInfo runtime_info() {
  RuntimeInfo info;
  info.built = true;
  cudaRuntimeGetVersion(&info.runtime_version);
  cudaDriverGetVersion(&info.driver_version);
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    info.error = std::string(cudaGetErrorName(err)) + ": " + cudaGetErrorString(err);
    cudaGetLastError();  // clear it, so later calls start clean
    return info;
  }
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, i) != cudaSuccess) continue;
    info.gpus.push_back(
        {i, p.name, p.major, p.minor, p.multiProcessorCount, size_t(p.totalGlobalMem)});
  }
  if (info.gpus.empty()) info.error = "the CUDA runtime sees no GPU";
  return info;
}

void icrc_on_device(const std::vector<uint8_t>& frames, const std::vector<uint32_t>& offsets,
                    const std::vector<uint32_t>& lengths, std::vector<uint32_t>& per_thread,
                    std::vector<uint32_t>& per_warp) {
  check_ranges(frames, offsets, lengths);
  const uint32_t n = uint32_t(offsets.size());
  per_thread.assign(n, 0);
  per_warp.assign(n, 0);
  if (n == 0) return;
  DeviceBuffer<uint8_t> d_frames(frames.size());
  DeviceBuffer<uint32_t> d_off(n), d_len(n), d_thread(n), d_warp(n);
  upload(d_frames, frames);
  upload(d_off, offsets);
  upload(d_len, lengths);
  icrc_thread_kernel<<<(n + 127) / 128, 128>>>(d_frames.ptr, d_off.ptr, d_len.ptr, n, d_thread.ptr);
  check(cudaGetLastError(), "icrc_thread_kernel launch");
  icrc_warp_kernel<<<(n + 3) / 4, 128>>>(d_frames.ptr, d_off.ptr, d_len.ptr, n, d_warp.ptr);
  check(cudaGetLastError(), "icrc_warp_kernel launch");
  check(cudaDeviceSynchronize(), "icrc kernels");
  download(per_thread, d_thread);
  download(per_warp, d_warp);
}

namespace {

constexpr uint32_t kCopyBuf = 4160;

// One block of one warp per case: stage src at shared offset so, team-copy len bytes to
// out + do.
__global__ void copy_team_kernel(const uint8_t* src, const uint32_t* cases, uint32_t n,
                                 uint8_t* out) {
  __shared__ __align__(16) uint8_t staged[kCopyBuf + 64];
  const uint32_t i = blockIdx.x;
  if (i >= n) return;
  for (uint32_t k = threadIdx.x; k < kCopyBuf; k += 32) staged[k] = src[k];
  __syncwarp();
  const uint32_t so = cases[3 * i], dst_off = cases[3 * i + 1], len = cases[3 * i + 2];
  copy_bytes_team(WarpTeam{}, out + size_t(i) * kCopyBuf + dst_off, staged + so, len);
}

}  // namespace

void copy_team_on_device(const std::vector<uint8_t>& src,
                         const std::vector<std::array<uint32_t, 3>>& cases,
                         std::vector<uint8_t>& out) {
  if (src.size() != kCopyBuf) throw std::invalid_argument("copy_team_on_device: src of 4160 B");
  std::vector<uint32_t> flat;
  for (const auto& c : cases) {
    if (c[0] >= 64 || c[1] >= 64 || c[2] > 4096)
      throw std::invalid_argument("copy_team_on_device: offsets < 64, length <= 4096");
    flat.insert(flat.end(), c.begin(), c.end());
  }
  const uint32_t n = uint32_t(cases.size());
  DeviceBuffer<uint8_t> d_src(kCopyBuf), d_out(size_t(n) * kCopyBuf);
  DeviceBuffer<uint32_t> d_cases(flat.size());
  check(cudaMemcpy(d_src.ptr, src.data(), kCopyBuf, cudaMemcpyHostToDevice), "cudaMemcpy");
  check(cudaMemcpy(d_cases.ptr, flat.data(), flat.size() * 4, cudaMemcpyHostToDevice),
        "cudaMemcpy");
  check(cudaMemset(d_out.ptr, 0, size_t(n) * kCopyBuf), "cudaMemset");
  if (n) copy_team_kernel<<<n, 32>>>(d_src.ptr, d_cases.ptr, n, d_out.ptr);
  check(cudaGetLastError(), "copy_team_kernel launch");
  check(cudaDeviceSynchronize(), "copy_team_kernel");
  out.resize(size_t(n) * kCopyBuf);
  check(cudaMemcpy(out.data(), d_out.ptr, out.size(), cudaMemcpyDeviceToHost), "cudaMemcpy");
}

}  // namespace rt::cuda
