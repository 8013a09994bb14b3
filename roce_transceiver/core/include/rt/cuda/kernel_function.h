// A kernel the host launches: one that nvcc built into this library (launched through the
// runtime), or one of a module loaded at run time, a user's handler linked into the engine's or
// the Verbs serve loop's code (custom_handler.py), which the driver API loads and launches.
// Either way its arguments go as an array of pointers to them. For the .cu files' host code.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "rt/cuda/check_cuda.h"

namespace rt::cuda {

// The driver API, through the runtime's entry points: this library links the static runtime,
// not libcuda, and a user handler's module is the driver's to load.
struct Driver {
  decltype(&cuModuleLoadData) module_load_data = nullptr;
  decltype(&cuModuleUnload) module_unload = nullptr;
  decltype(&cuModuleGetFunction) module_get_function = nullptr;
  decltype(&cuFuncGetAttribute) func_get_attribute = nullptr;
  decltype(&cuFuncSetAttribute) func_set_attribute = nullptr;
  decltype(&cuOccupancyMaxActiveBlocksPerMultiprocessor) occupancy = nullptr;
  decltype(&cuLaunchKernel) launch_kernel = nullptr;
  decltype(&cuGetErrorName) error_name = nullptr;

  static const Driver& get() {
    static const Driver d = [] {
      Driver r;
      find("cuModuleLoadData", r.module_load_data);
      find("cuModuleUnload", r.module_unload);
      find("cuModuleGetFunction", r.module_get_function);
      find("cuFuncGetAttribute", r.func_get_attribute);
      find("cuFuncSetAttribute", r.func_set_attribute);
      find("cuOccupancyMaxActiveBlocksPerMultiprocessor", r.occupancy);
      find("cuLaunchKernel", r.launch_kernel);
      find("cuGetErrorName", r.error_name);
      return r;
    }();
    return d;
  }

  void check(CUresult err, const std::string& what) const {
    if (err == CUDA_SUCCESS) return;
    const char* name = nullptr;
    error_name(err, &name);
    throw std::runtime_error(what + ": " + (name ? name : std::to_string(int(err))));
  }

 private:
  template <class F>
  static void find(const char* symbol, F& fn) {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult found{};
    check_cuda(cudaGetDriverEntryPointByVersion(symbol, &p, 12000, cudaEnableDefault, &found),
               symbol);
    if (found != cudaDriverEntryPointSuccess || !p)
      throw std::runtime_error(std::string("the CUDA driver has no ") + symbol);
    fn = reinterpret_cast<F>(p);
  }
};

// One kernel: built in (nvcc's, launched through the runtime) or from a loaded module
// (launched through the driver API).
struct KernelFunction {
  const void* builtin = nullptr;
  CUfunction loaded = nullptr;
  const char* what = "kernel";  // for errors: "engine kernel", "Verbs serve kernel"

  size_t static_smem() const {
    if (builtin) {
      cudaFuncAttributes attr;
      check_cuda(cudaFuncGetAttributes(&attr, builtin), "cudaFuncGetAttributes");
      return attr.sharedSizeBytes;
    }
    int bytes = 0;
    Driver::get().check(
        Driver::get().func_get_attribute(&bytes, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, loaded),
        "cuFuncGetAttribute(shared memory)");
    return size_t(bytes);
  }

  // Raise the kernel's dynamic shared memory limit when smem and its static shared memory
  // pass the default 48 KiB.
  void allow_smem(size_t smem) const {
    if (smem + static_smem() <= 48 * 1024) return;
    if (builtin)
      check_cuda(
          cudaFuncSetAttribute(builtin, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)),
          "cudaFuncSetAttribute(shared memory)");
    else
      Driver::get().check(Driver::get().func_set_attribute(
                              loaded, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, int(smem)),
                          "cuFuncSetAttribute(shared memory)");
  }

  int blocks_per_sm(uint32_t threads, size_t smem) const {
    int n = 0;
    if (builtin)
      check_cuda(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, builtin, int(threads), smem),
                 "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
    else
      Driver::get().check(Driver::get().occupancy(&n, loaded, int(threads), smem),
                          "cuOccupancyMaxActiveBlocksPerMultiprocessor");
    return n;
  }

  // Launch errors come back from the launch itself or, for the runtime's, cudaGetLastError.
  void launch(uint32_t blocks, uint32_t threads, size_t smem, cudaStream_t stream,
              void** args) const {
    if (builtin)
      check_cuda(cudaLaunchKernel(builtin, dim3(blocks), dim3(threads), args, smem, stream),
                 (std::string(what) + " launch").c_str());
    else
      Driver::get().check(Driver::get().launch_kernel(loaded, blocks, 1, 1, threads, 1, 1,
                                                      unsigned(smem), stream, args, nullptr),
                          std::string(what) + " launch (the user handler's module)");
  }
};

// A module loaded from its image (a cubin) with the driver API, unloaded with this object.
// Load it before any persistent kernel runs: a module load waits for the device to go idle.
class LoadedModule {
 public:
  LoadedModule() = default;
  LoadedModule(const std::vector<uint8_t>& image, const std::string& what) {
    const Driver& drv = Driver::get();
    drv.check(drv.module_load_data(&module_, image.data()), "cuModuleLoadData(" + what + ")");
  }
  ~LoadedModule() {
    if (module_) Driver::get().module_unload(module_);
  }
  LoadedModule(LoadedModule&& o) noexcept : module_(std::exchange(o.module_, nullptr)) {}
  LoadedModule& operator=(LoadedModule&& o) noexcept {
    std::swap(module_, o.module_);
    return *this;
  }
  LoadedModule(const LoadedModule&) = delete;
  LoadedModule& operator=(const LoadedModule&) = delete;

  explicit operator bool() const { return module_ != nullptr; }

  // Forgets the module without unloading it: a kernel that may still run keeps its code.
  void leave_loaded() { module_ = nullptr; }

  // The kernel `name` (C linkage), for errors called `what`.
  KernelFunction function(const char* name, const char* what) const {
    KernelFunction f{nullptr, nullptr, what};
    const Driver& drv = Driver::get();
    drv.check(drv.module_get_function(&f.loaded, module_, name),
              std::string("cuModuleGetFunction(") + name + ")");
    return f;
  }

 private:
  CUmodule module_ = nullptr;
};

}  // namespace rt::cuda
