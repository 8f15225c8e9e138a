#!/usr/bin/env bash
# The correction over the tiles that hold an allowed id (.gpu/T11: correction-tiles.patch applied to
# 4d588a7, with the default recipe's package copied from T8 for the GPU tests) against T10
# (4d588a7 itself, compiled again: bc0e48b's code, the maxima's masses computed once): the GPU
# tests on T11, then the verify band's cost on T10 and T11, twice in turn.
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
D=docs/measurements
{
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1 || cat "$OUT/install.log"
echo "=== GPU tests (.gpu/T11) at ${SECONDS}s"
MONOBUILD_TEST_PACKAGES=.gpu/T11 timeout 120 python3 -m pytest -q -s -m gpu tests/test_runtime_gpu.py \
  -k "verdict or draft or rule_emits or sampled or draw" 2>&1 | grep -E "passed|failed|χ²|decided|Error|error|assert" | tail -24
for tree in T10 T11 T10 T11; do
  echo "--- verify band, .gpu/$tree, at ${SECONDS}s"
  timeout 60 python3 $D/2026-12-07-draft-probs/verify_cost.py .gpu/$tree/llama-3.2-1b-draft-probs-sm_90/sm_90 2>&1 | tail -9
done
echo "=== done at ${SECONDS}s"
} 2>&1 | tee "$OUT/run4.log"
