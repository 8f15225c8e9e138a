#!/usr/bin/env bash
# Run 2: every GPU test with the packages of 5ec7ad7 (the staged up with its rows in its text),
# compiled on the CPU machine into .gpu/R (the default recipe, its --stage-clock build,
# recipes/qwen3-8b-fp8-sm_90.yaml, tests/data/qwen3-moe-mixed-sm_90.yaml,
# tests/data/qwen3-235b-layers-sm_90.yaml, ../2026-12-04-h200-serving's sampling recipe; ir/ left out).
set -u -o pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv > "$OUT/device2.txt" 2>&1
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
MONOBUILD_TEST_PACKAGES=.gpu/R timeout 300 python3 -m pytest -q -m gpu tests/test_runtime_gpu.py 2>&1 | tail -4 \
  | tee "$OUT/run2.log"
