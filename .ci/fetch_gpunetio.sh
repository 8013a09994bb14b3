#!/usr/bin/env bash
# Fetch GPUNetIO's open-source (BSD-3) headers from NVIDIA's nvidia-nvshmem-cu13 wheel into
# DIR and print the folder that holds doca_gpunetio_device.h (for RT_GPUNETIO_INCLUDE).
# Usage: .ci/fetch_gpunetio.sh DIR
set -euo pipefail
dir=$1
mkdir -p "$dir"
if [ ! -f "$dir/include/gpunetio/doca_gpunetio_device.h" ]; then
  python3 -m venv "$dir/venv" >&2
  "$dir/venv/bin/python" -m pip download -q --no-deps --only-binary=:all: -d "$dir/wheel" \
    "nvidia-nvshmem-cu13>=3.7" >&2
  "$dir/venv/bin/python" - "$dir" <<'PY'
import sys, zipfile, pathlib
out = pathlib.Path(sys.argv[1])
wheel = next((out / "wheel").glob("nvidia_nvshmem_cu13-*.whl"))
prefix = "nvidia/nvshmem/include/gpunetio/"
with zipfile.ZipFile(wheel) as z:
    for name in z.namelist():
        if name.startswith(prefix) and not name.endswith("/"):
            target = out / "include" / "gpunetio" / name[len(prefix):]
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(z.read(name))
PY
  rm -rf "$dir/wheel" "$dir/venv"
fi
echo "$dir/include/gpunetio"
