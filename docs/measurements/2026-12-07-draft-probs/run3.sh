#!/usr/bin/env bash
# Part B of run1.sh, alone for a call with little device time: the sampling
# GPU tests on .gpu/Q (and the two tensor-parallel ranks of
# tests/data/llama-3.2-1b-tp2-sm_90.yaml, bound on one device and one rank a
# process), then what the draft-probability verdict costs a step.
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
{
echo "=== sampling GPU tests at ${SECONDS}s"
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1 || cat "$OUT/install.log"
MONOBUILD_TEST_PACKAGES=.gpu/Q timeout 240 python3 -m pytest -q -s -m gpu tests/test_runtime_gpu.py \
  -k "draft or rule_emits or sampled or draw or split or one_rank" 2>&1 | grep -E "passed|failed|χ²|decided|Error|assert" | tail -20
echo "--- the verdict's cost at ${SECONDS}s"
timeout 60 python3 docs/measurements/2026-12-07-draft-probs/verify_cost.py .gpu/Q/llama-3.2-1b-draft-probs-sm_90/sm_90 2>&1 | tail -12
echo "=== done at ${SECONDS}s"
} 2>&1 | tee "$OUT/run3.log"
