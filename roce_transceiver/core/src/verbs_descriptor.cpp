// The device descriptor of a software-ConnectX queue pair, filled through GPUNetIO's own
// structure (struct doca_gpu_dev_verbs_qp). Its layout differs between GPUNetIO releases
// (the NCCL wheel on the GPU machine has 280 bytes and receive-queue fields; newer ones 296,
// with a CQ type and a fifth segment-count word), so fields are set by name, the optional
// ones only where the compiled header has them. Built only where the headers are found.
#include <cstring>
#include <stdexcept>
#include <type_traits>
#include <utility>

#include "common/doca_gpunetio_verbs_dev.h"
#include "rt/verbs/descriptor.h"

namespace rt::verbs {
namespace {

// GPUNetIO's number for a handler, by name (the numbers differ between its releases).
doca_gpu_dev_verbs_nic_handler doca_handler(NicHandler h) {
  switch (h) {
    case NicHandler::kCpuProxy: return DOCA_GPUNETIO_VERBS_NIC_HANDLER_CPU_PROXY;
    case NicHandler::kGpuSmDb: return DOCA_GPUNETIO_VERBS_NIC_HANDLER_GPU_SM_DB;
    case NicHandler::kGpuSmBf: return DOCA_GPUNETIO_VERBS_NIC_HANDLER_GPU_SM_BF;
  }
  throw std::invalid_argument("fill_descriptor: NIC handler " + std::to_string(int(h)));
}

template <typename T, typename = void>
struct HasCqType : std::false_type {};
template <typename T>
struct HasCqType<T, std::void_t<decltype(std::declval<T&>().cq_type)>> : std::true_type {};

template <typename T, typename = void>
struct HasFiveDs : std::false_type {};
template <typename T>
struct HasFiveDs<T, std::void_t<decltype(std::declval<T&>().sq_num_shift8_be_5ds)>>
    : std::true_type {};

uint32_t be32(uint32_t v) { return __builtin_bswap32(v); }

template <typename Qp>
void fill(Qp& qp, const DescriptorParams& p) {
  std::memset(static_cast<void*>(&qp), 0, sizeof qp);
  qp.sq_num = p.qpn;
  qp.sq_num_shift8 = p.qpn << 8;
  qp.sq_num_shift8_be = be32(p.qpn << 8);
  qp.sq_num_shift8_be_1ds = be32(p.qpn << 8 | 1);
  qp.sq_num_shift8_be_2ds = be32(p.qpn << 8 | 2);
  qp.sq_num_shift8_be_3ds = be32(p.qpn << 8 | 3);
  qp.sq_num_shift8_be_4ds = be32(p.qpn << 8 | 4);
  if constexpr (HasFiveDs<Qp>::value) qp.sq_num_shift8_be_5ds = be32(p.qpn << 8 | 5);
  qp.sq_wqe_num = uint16_t(p.sq_wqe_num);
  qp.sq_wqe_mask = uint16_t(p.sq_wqe_num - 1);
  qp.sq_wqe_daddr = reinterpret_cast<uint8_t*>(p.sq_device);
  // sq_db: the CPU proxy's count, the UAR word or the BlueFlame window, by handler; the doorbell
  // record (read by GPU_SM_DB and _BF) and the CQ's (no call we make writes it) beside it.
  qp.sq_db = reinterpret_cast<uint64_t*>(p.doorbell_device);
  qp.sq_dbrec = reinterpret_cast<decltype(qp.sq_dbrec)>(p.doorbell_device + kSqDbrOffset);
  auto& cq = qp.cq_sq;
  cq.cqe_daddr = reinterpret_cast<uint8_t*>(p.cq_device);
  cq.cq_num = p.qpn;
  cq.cqe_num = p.cqe_num;
  cq.dbrec = reinterpret_cast<decltype(cq.dbrec)>(p.doorbell_device + kCqDbrOffset);
  cq.cqe_mask = p.cqe_num - 1;
  cq.cqe_size = 64;
  if constexpr (HasCqType<decltype(cq)>::value) cq.cq_type = decltype(cq.cq_type)(0);  // 64-byte
  cq.mem_type = decltype(cq.mem_type)(2);  // GPU, as DOCA sets it (not read by the device)
  qp.nic_handler = decltype(qp.nic_handler)(doca_handler(p.handler));
  qp.mem_type = decltype(qp.mem_type)(2);
}

}  // namespace

size_t descriptor_bytes() { return sizeof(doca_gpu_dev_verbs_qp); }

void fill_descriptor(const DescriptorParams& p, uint8_t* out, size_t out_bytes) {
  if (out_bytes < sizeof(doca_gpu_dev_verbs_qp))
    throw std::invalid_argument("fill_descriptor: " + std::to_string(out_bytes) +
                                " bytes, the descriptor needs " +
                                std::to_string(sizeof(doca_gpu_dev_verbs_qp)));
  doca_gpu_dev_verbs_qp qp;
  fill(qp, p);
  std::memcpy(out, &qp, sizeof qp);
}

}  // namespace rt::verbs
