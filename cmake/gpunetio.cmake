# Where GPUNetIO's verbs device headers come from (issue 6: Verbs mode calls GPUNetIO's own
# device API rather than re-implementing it). In order:
#   1. RT_GPUNETIO_INCLUDE (CMake variable or environment): a folder holding
#      doca_gpunetio_device.h (CI downloads NVIDIA's nvshmem wheel and points here);
#   2. the DOCA SDK (pkg-config doca-gpunetio);
#   3. NVIDIA's wheels in the building Python's site-packages: nvidia-nvshmem-cu13 (3.7+:
#      nvidia/nvshmem/include/gpunetio) or nvidia-nccl-cu13
#      (nvidia/nccl/include/nccl_device/gin/gdaki/doca_gpunetio).
# Sets RT_GPUNETIO_DIR (empty when none) and RT_GPUNETIO_SOURCE (what `info` reports).

set(RT_GPUNETIO_INCLUDE "$ENV{RT_GPUNETIO_INCLUDE}" CACHE PATH
    "Folder with GPUNetIO's doca_gpunetio_device.h (empty: search)")
set(RT_GPUNETIO_DIR "")
set(RT_GPUNETIO_SOURCE "none found (DOCA SDK, RT_GPUNETIO_INCLUDE, nvidia-nvshmem-cu13 or nvidia-nccl-cu13)")

if(RT_GPUNETIO_INCLUDE)
  if(NOT EXISTS "${RT_GPUNETIO_INCLUDE}/doca_gpunetio_device.h")
    message(FATAL_ERROR "RT_GPUNETIO_INCLUDE=${RT_GPUNETIO_INCLUDE}: no doca_gpunetio_device.h there")
  endif()
  set(RT_GPUNETIO_DIR "${RT_GPUNETIO_INCLUDE}")
  set(RT_GPUNETIO_SOURCE "RT_GPUNETIO_INCLUDE=${RT_GPUNETIO_INCLUDE}")
else()
  find_package(PkgConfig QUIET)
  if(PKG_CONFIG_FOUND)
    pkg_check_modules(DOCA_GPUNETIO QUIET doca-gpunetio)
  endif()
  if(DOCA_GPUNETIO_FOUND)
    foreach(dir IN LISTS DOCA_GPUNETIO_INCLUDE_DIRS)
      if(EXISTS "${dir}/doca_gpunetio_device.h")
        set(RT_GPUNETIO_DIR "${dir}")
      endif()
    endforeach()
    set(RT_GPUNETIO_SOURCE "DOCA SDK ${DOCA_GPUNETIO_VERSION} (pkg-config doca-gpunetio)")
  endif()
  if(NOT RT_GPUNETIO_DIR)
    execute_process(
      COMMAND "${Python_EXECUTABLE}" -c
        "import sys, pathlib\nfor p in map(pathlib.Path, sys.path):\n for sub, name in (('nvidia/nvshmem/include/gpunetio', 'nvidia-nvshmem-cu13 wheel'), ('nvidia/nccl/include/nccl_device/gin/gdaki/doca_gpunetio', 'nvidia-nccl-cu13 wheel')):\n  d = p / sub\n  if (d / 'doca_gpunetio_device.h').is_file():\n   print(f'{d};{name}'); raise SystemExit\n"
      OUTPUT_VARIABLE found OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE rc)
    if(rc EQUAL 0 AND found)
      list(GET found 0 RT_GPUNETIO_DIR)
      list(GET found 1 wheel)
      set(RT_GPUNETIO_SOURCE "${wheel} (${RT_GPUNETIO_DIR})")
    endif()
  endif()
endif()
message(STATUS "roce_transceiver: GPUNetIO device headers: ${RT_GPUNETIO_SOURCE}")
