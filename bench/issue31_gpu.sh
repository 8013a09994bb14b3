#!/usr/bin/env bash
# Issue 31 on the GPU machine, in two parts that each fit one device command:
#   bash bench/issue31_gpu.sh OUT benches   # bench roundtrip --reliable, bench graph (cuda)
#   bash bench/issue31_gpu.sh OUT tests     # pytest -m gpu, the whole suite
# From the repo root, with the package's wheel and the test wheels in .whl/.
set -uo pipefail
repo=$(pwd)
out=$(realpath -m "${1:-i31-out}")
part=${2:-benches}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1
python3 -m pip install -q --no-index --no-deps .whl/*.whl >"$out/wheels.log" 2>&1 ||
  tail -5 "$out/wheels.log"
# The tree's Python over the wheel's (its compiled core is the tree's C++ as of the wheel's
# build): a Python change needs no new wheel.
site=$(cd /tmp && python3 -c "import roce_transceiver, os; print(os.path.dirname(roce_transceiver.__file__))")
cp roce_transceiver/*.py "$site/" && cp operators/*.py "$site/operators/" &&
  cp apps/*.py "$site/apps/" && for d in bench commands peers; do cp roce_transceiver/$d/*.py "$site/$d/"; done
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv >"$out/gpu.txt"
cd /tmp
if [ "$part" = benches ]; then
  for far in cpu gpu; do
    timeout -s ABRT 150 python3 -m roce_transceiver bench roundtrip --executor cuda \
      --far-end $far --count 20000 --reliable --repeats 3 --json "$out/reliable_cuda_$far.json" \
      2>&1 | tee "$out/reliable_cuda_$far.txt" | grep -E "reliable replies|status" | head -6
  done
  timeout -s ABRT 330 python3 -m roce_transceiver bench graph --executor cuda \
    --json "$out/graph_cuda.json" 2>"$out/graph_cuda.progress" | tee "$out/graph_cuda.txt" |
    tail -24
  timeout -s ABRT 200 python3 -m pytest -p no:cacheprovider -q -rs --timeout=120 \
    --timeout-method=thread -m gpu "$repo/tests/test_bench_graph.py" \
    "$repo/tests/test_rc_requester.py" 2>&1 | tee "$out/pytest_gpu_i31.log" | tail -4
else
  timeout -s ABRT 560 python3 -m pytest -p no:cacheprovider -q -rs --timeout=120 \
    --timeout-method=thread -m gpu "$repo/tests" 2>&1 | tee "$out/pytest_gpu.log" | tail -25
fi
