#!/usr/bin/env bash
# Issue 31's engine work on the GPU machine: the RC requester's and the frame slices' GPU tests
# (with the engine suites they touch) and bench roundtrip --reliable.
# From the repo root, with the package's wheel in .whl/: bash bench/rc_gpu_run.sh OUT_DIR
set -uo pipefail
repo=$(pwd)
out=$(realpath -m "${1:-rc-out}")
mkdir -p "$out"
export PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1
python3 -m pip install -q --no-index --no-deps .whl/*.whl >"$out/wheels.log" 2>&1 || tail -5 "$out/wheels.log"
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv >"$out/gpu.txt"
cd /tmp
for far in cpu gpu; do
  timeout -s ABRT 240 python3 -m roce_transceiver bench roundtrip --executor cuda --far-end $far \
    --count 20000 --reliable --repeats 3 --json "$out/reliable_cuda_$far.json" 2>&1 |
    tee "$out/reliable_cuda_$far.txt" | grep -E "reliable|p50 /|status" | head -12
done
timeout -s ABRT 300 python3 -m pytest -p no:cacheprovider -q -rs --timeout=120 \
  --timeout-method=thread -m gpu "$repo/tests/test_rc_requester.py" \
  "$repo/tests/test_engine_roundtrip.py" "$repo/tests/test_engine_express.py" \
  "$repo/tests/test_engine_rc_uc.py" "$repo/tests/test_express_batch.py" \
  "$repo/tests/test_frame_slices.py" "$repo/tests/test_frames.py" "$repo/tests/test_batch_step.py" \
  2>&1 |
  tee "$out/pytest_gpu.txt" | tail -15
