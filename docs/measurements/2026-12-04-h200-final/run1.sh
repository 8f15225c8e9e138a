#!/usr/bin/env bash
# Every GPU test at the tree this stop leaves (14e2fd0's kernels): .gpu/F holds the shipped
# Llama-3.2-1B and Qwen3-8B-FP8 recipes, docs/measurements/2026-12-04-h200-weights'
# sampling recipe (with its 1 × 6 verify band) and the Llama recipe's --stage-clock build, all
# compiled on the CPU machine.
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/device.txt" 2>&1
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
MONOBUILD_TEST_PACKAGES=.gpu/F timeout 420 python3 -m pytest -q -m gpu tests/ 2>&1 | grep -v Warning | tail -8 | tee "$OUT/run1.log"
