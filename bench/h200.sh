#!/usr/bin/env bash
# One run on the GPU machine (../shared/GPU.md): build with CUDA, measure the loops
# against their floors, then run the GPU tests (and, unless H200_CPU_TESTS=0, the rest).
# Usage, from the repo root: bash bench/h200.sh OUT_DIR (after bench/fetch_wheels.sh here);
# H200_QUICK=1 leaves out the general-path, qec and 1 KiB op-cost benches.
# Logs and JSON land in OUT_DIR; the exit status is that of the GPU tests. Every step
# has a timeout; a step that times out dumps the Python stacks of all its threads
# (faulthandler on SIGABRT), so a hang says where it was.
set -uo pipefail
repo=$(pwd)
out=$(realpath -m "${1:-h200-out}")
mkdir -p "$out"
py=python3
export PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1

# Test-only wheels the machine lacks travel in .whl/ (scapy, pymatching, stim).
if compgen -G ".whl/*.whl" >/dev/null; then
  $py -m pip install -q --no-index --no-deps .whl/*.whl >"$out/wheels.log" 2>&1
fi
if ! RT_CUDA=ON RT_WERROR=ON $py -m pip install -q --no-build-isolation --no-deps . \
    >"$out/build.log" 2>&1; then
  tail -40 "$out/build.log"
  exit 1
fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv >"$out/gpu.txt"

# SM clock and load while the loops run.
nvidia-smi --query-gpu=timestamp,clocks.sm,utilization.gpu --format=csv -lms 500 \
  >"$out/clocks.csv" 2>&1 &
sampler=$!

# From outside the repo: `python -m ...` in the root would import the source tree.
cd /tmp
timeout -s ABRT 90 $py "$repo/bench/smoke_gpu.py" >"$out/sizes.txt" 2>&1
tail -8 "$out/sizes.txt"

bench() {  # name, args...
  local name=$1
  shift
  timeout -s ABRT 90 $py -m roce_transceiver bench "$@" --json "$out/$name.json" 2>&1 |
    tee "$out/$name.txt" | tail -7
}
timeout -s ABRT 60 $py -m roce_transceiver bench ops --size 32 --json "$out/ops.json" 2>&1 |
  tee "$out/ops.txt"
[ "${H200_QUICK:-0}" = 1 ] ||
  timeout -s ABRT 60 $py -m roce_transceiver bench ops --size 1024 --json "$out/ops_1024.json" \
    2>&1 | grep -E "icrc|engine_step|express path" >"$out/ops_1024.txt"
bench roundtrip_cpu_cpu roundtrip --executor cpu --far-end cpu --count 20000
bench roundtrip_cuda_cpu roundtrip --executor cuda --far-end cpu --count 20000
bench roundtrip_cuda_gpu roundtrip --executor cuda --far-end gpu --count 20000
if [ "${H200_QUICK:-0}" != 1 ]; then  # H200_QUICK=1: the latency loops only
  bench roundtrip_cuda_cpu_general roundtrip --executor cuda --far-end cpu --count 20000 --no-express
  bench roundtrip_cuda_gpu_general roundtrip --executor cuda --far-end gpu --count 20000 --no-express
  bench qec_cuda_gpu qec --executor cuda --far-end gpu --count 200000
  bench qec_cuda_cpu qec --executor cuda --far-end cpu --count 100000
  # A user handler's start (new, cached) and its echo against the built-in one (issue 30).
  bench custom_cuda_cpu roundtrip --executor cuda --far-end cpu --handler custom --count 20000
  bench custom_cuda_gpu roundtrip --executor cuda --far-end gpu --handler custom --count 20000
fi
# What the cuda executor's epochs cost, and the kernel loads they let through.
timeout -s ABRT 150 $py -m roce_transceiver bench share --json "$out/share.json" 2>&1 |
  tee "$out/share.txt" | tail -12
# What a Holoscan graph receives from RoceTransceiverOp: 64 KiB, 1 MiB, 8 MiB frames per
# cuda.epoch_us (issue 31).
timeout -s ABRT 300 $py -m roce_transceiver bench graph --executor cuda --json "$out/graph.json" \
  2>"$out/graph.progress" | tee "$out/graph.txt" | tail -14
kill "$sampler" 2>/dev/null

# The thread method ends the whole run at the first test that hangs in C++ (where a
# signal cannot interrupt it), printing every thread's stack.
timeout -s ABRT 330 $py -m pytest -p no:cacheprovider -q -rs --timeout=90 \
  --timeout-method=thread -m gpu "$repo/tests" 2>&1 | tee "$out/pytest_gpu.log" | tail -30
gpu_status=${PIPESTATUS[0]}
if [ "${H200_CPU_TESTS:-1}" = 1 ]; then
  timeout 300 $py -m pytest -p no:cacheprovider -q -rs --timeout=120 "$repo/tests" -m "not gpu" \
    >"$out/pytest_cpu.log" 2>&1
  tail -3 "$out/pytest_cpu.log"
fi
exit "$gpu_status"
