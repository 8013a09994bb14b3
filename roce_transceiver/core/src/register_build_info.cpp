// What this build has: version, CUDA support, GPUs the runtime can see.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "register.h"
#include "rt/cuda/protocol_device.h"
#include "rt/cuda/runtime_info.h"
#include "rt/protocol/crc32_fast.h"

#ifndef RT_VERSION
#define RT_VERSION "0.0.0"
#endif

namespace rt::cuda {
#if !defined(RT_WITH_CUDA)
RuntimeInfo runtime_info() {
  RuntimeInfo info;
  info.error = "this build has no CUDA support (built without nvcc, or with RT_CUDA=OFF)";
  return info;
}
void icrc_on_device(const std::vector<uint8_t>&, const std::vector<uint32_t>&,
                    const std::vector<uint32_t>&, std::vector<uint32_t>&,
                    std::vector<uint32_t>&) {
  throw std::runtime_error("this build has no CUDA support");
}
#endif
}  // namespace rt::cuda

namespace rt::py {

void register_build_info(pybind11::module_& m) {
  m.attr("__version__") = RT_VERSION;
#if defined(RT_WITH_CUDA)
  m.attr("built_with_cuda") = true;
#else
  m.attr("built_with_cuda") = false;
#endif
  m.def("cuda_runtime_info", [] {
    const cuda::RuntimeInfo info = cuda::runtime_info();
    pybind11::dict d;
    d["built"] = info.built;
    d["runtime_version"] = info.runtime_version;
    d["driver_version"] = info.driver_version;
    d["error"] = info.error;
    pybind11::list gpus;
    for (const cuda::GpuInfo& g : info.gpus) {
      pybind11::dict gd;
      gd["index"] = g.index;
      gd["name"] = g.name;
      gd["compute_capability"] = std::to_string(g.sm_major) + "." + std::to_string(g.sm_minor);
      gd["multiprocessors"] = g.multiprocessors;
      gd["memory_bytes"] = g.memory_bytes;
      gpus.append(gd);
    }
    d["gpus"] = gpus;
    return d;
  });
  m.def(
      "icrc_on_device",
      [](const pybind11::bytes& frames, const std::vector<uint32_t>& offsets,
         const std::vector<uint32_t>& lengths) {
        const std::string buf = frames;
        std::vector<uint8_t> bytes(buf.begin(), buf.end());
        std::vector<uint32_t> per_thread, per_warp;
        {
          pybind11::gil_scoped_release nogil;
          cuda::icrc_on_device(bytes, offsets, lengths, per_thread, per_warp);
        }
        return pybind11::make_tuple(per_thread, per_warp);
      },
      pybind11::arg("frames"), pybind11::arg("offsets"), pybind11::arg("lengths"));
}

}  // namespace rt::py
