#!/usr/bin/env bash
# One run on the GPU machine (../shared/GPU.md): build with CUDA, run the GPU
# tests and the whole suite, then the loop benchmarks with their floors.
# Usage, from the repo root: bash bench/h200.sh OUT_DIR
# Logs and JSON land in OUT_DIR; the exit status is that of the GPU tests.
set -uo pipefail
repo=$(pwd)
out=$(realpath -m "${1:-h200-out}")
mkdir -p "$out"
py=python3
export PYTHONUNBUFFERED=1

# Test-only wheels the machine lacks travel in .whl/ (scapy); no registry there.
if compgen -G ".whl/*.whl" >/dev/null; then
  $py -m pip install -q --no-index --no-deps .whl/*.whl >"$out/wheels.log" 2>&1
fi
if ! RT_CUDA=ON RT_WERROR=ON $py -m pip install -q --no-build-isolation --no-deps . \
    >"$out/build.log" 2>&1; then
  tail -40 "$out/build.log"
  exit 1
fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv >"$out/gpu.txt"

# From outside the repo: `python -m pytest` in the root would import the source tree.
cd /tmp
timeout 400 $py -m pytest -p no:cacheprovider -q -rs --timeout=120 -m gpu "$repo/tests" 2>&1 | tee "$out/pytest_gpu.log" | tail -30
gpu_status=${PIPESTATUS[0]}
if [ "${H200_CPU_TESTS:-1}" = 1 ]; then
  timeout 300 $py -m pytest -p no:cacheprovider -q -rs --timeout=120 "$repo/tests" -m "not gpu" \
    >"$out/pytest_cpu.log" 2>&1
  tail -3 "$out/pytest_cpu.log"
fi

# SM clock and load while the loops run: a one-warp kernel may not raise the clock.
nvidia-smi --query-gpu=timestamp,clocks.sm,utilization.gpu --format=csv -lms 500 \
  >"$out/clocks.csv" 2>&1 &
sampler=$!
timeout 120 $py "$repo/bench/smoke_gpu.py" >"$out/sizes.txt" 2>&1
tail -8 "$out/sizes.txt"

bench() {  # name, args...
  local name=$1
  shift
  timeout 120 $py -m roce_transceiver bench "$@" --json "$out/$name.json" 2>&1 | tee "$out/$name.txt" | tail -14
}
bench roundtrip_cuda_cpu roundtrip --executor cuda --far-end cpu --count 20000
bench roundtrip_cuda_gpu roundtrip --executor cuda --far-end gpu --count 20000
[ "${H200_CPU_BENCH:-1}" = 1 ] && bench roundtrip_cpu roundtrip --executor cpu --count 20000
bench qec_cuda_gpu qec --executor cuda --far-end gpu --count 200000
bench qec_cuda_cpu qec --executor cuda --far-end cpu --count 100000
kill "$sampler" 2>/dev/null
exit "$gpu_status"
