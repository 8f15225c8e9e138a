#!/usr/bin/env bash
# The first draw's check skipped where the tiles' floor already puts it outside the allowed set
# (compiler/kernels/head.py, _draw): .gpu/T4 is this tree's packages, .gpu/T3 run 2's (9be9c4a).
# The sampling GPU tests on T4, then the verify band's cost (verify_cost.py) and the sampling
# package's (sampling_cost.py), T3 and T4 in turn, once (little device time was left).
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
{
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1 || cat "$OUT/install.log"
echo "=== sampling GPU tests (.gpu/T4) at ${SECONDS}s"
MONOBUILD_TEST_PACKAGES=.gpu/T4 timeout 240 python3 -m pytest -q -s -m gpu tests/test_runtime_gpu.py \
  -k "draft or rule_emits or sampled or draw" 2>&1 | grep -E "passed|failed|χ²|decided|Error|assert" | tail -24
for pass in 1; do
  for tree in T3 T4; do
    echo "--- verdict cost, .gpu/$tree, pass $pass, at ${SECONDS}s"
    timeout 90 python3 docs/measurements/2026-12-07-draft-probs/verify_cost.py \
      .gpu/$tree/llama-3.2-1b-draft-probs-sm_90/sm_90 2>&1 | tail -9
  done
done
echo "--- sampling cost, .gpu/T4, at ${SECONDS}s"
timeout 90 python3 docs/measurements/2026-12-04-h200-weights/sampling_cost.py \
  .gpu/T4/llama-3.2-1b-sample-sm_90/sm_90 2>&1 | tail -10
echo "=== done at ${SECONDS}s"
} 2>&1 | tee "$OUT/run3.log"
