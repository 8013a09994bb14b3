#!/usr/bin/env bash
# On the development machine: download the test-only wheels the GPU machine lacks
# (it reaches no registry) into .whl/, which git ignores and the device tool carries
# (`carry: [".whl"]`). bench/h200.sh installs them there.
set -euo pipefail
cd "$(dirname "$0")/.."
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >>.git/info/exclude
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
  --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl \
  scapy==2.8.0 pymatching==2.4.0 stim==1.16.0 wheel-axle-runtime==0.0.13
# Holoscan for the apps' GPU tests (41 MB; its other needs are on the GPU machine).
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
  --implementation cp --platform manylinux_2_35_x86_64 -d .whl holoscan-cu13==4.6.0
ls .whl
