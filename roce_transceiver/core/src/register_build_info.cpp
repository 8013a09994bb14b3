// What this build has: version, CUDA support, GPUs the runtime can see.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "register.h"
#include "rt/cuda/gpunetio_info.h"
#include "rt/cuda/runtime_info.h"

#ifndef RT_VERSION
#define RT_VERSION "0.0.0"
#endif

namespace rt::py {

void register_build_info(pybind11::module_& m) {
  m.attr("__version__") = RT_VERSION;
#if defined(RT_WITH_CUDA)
  m.attr("built_with_cuda") = true;
#else
  m.attr("built_with_cuda") = false;
#endif
  m.def("cuda_runtime_info", [] {
    // Without the GIL: a driver that does not answer must leave doctor's time limit able to
    // end the run.
    const cuda::RuntimeInfo info = [] {
      pybind11::gil_scoped_release nogil;
      return cuda::runtime_info();
    }();
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
  m.def("gpunetio_info", [] {
    const cuda::GpunetioInfo info = cuda::gpunetio_info();
    pybind11::dict d;
    d["built"] = info.built;
    d["source"] = info.source;
    d["qp_bytes"] = info.qp_bytes;
    d["cq_bytes"] = info.cq_bytes;
    d["wqe_bytes"] = info.wqe_bytes;
    d["blueflame"] = info.blueflame;
    return d;
  });
}

}  // namespace rt::py
