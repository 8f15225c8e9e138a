#!/usr/bin/env bash
# Issue 21's widest GQA group: Qwen3-235B-A22B's layers (tests/data/qwen3-235b-layers-sm_90.yaml,
# compiled on the CPU machine into .gpu/pk beside the default recipe's package) at 1 row and in a
# 1 × 6 verify band (96 query rows an attention task), both modes, against the float64 reference;
# and the default package's steps (the Triton attention's padded-head change leaves power-of-two
# heads' code as it was: checked here on the 1 × 6 band, which runs it).
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.total --format=csv > "$OUT/device.txt" 2>&1
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
{
MONOBUILD_TEST_PACKAGES=.gpu/pk timeout 500 python3 -m pytest -q -p no:cacheprovider tests/test_runtime_gpu.py \
  -k "gqa_group_of_16 or test_step_matches_reference" -rs 2>&1 | tail -15
echo "=== done at ${SECONDS}s"
} 2>&1 | tee "$OUT/run2.log"
