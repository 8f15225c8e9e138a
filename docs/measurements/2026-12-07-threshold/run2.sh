#!/usr/bin/env bash
# The sampling head's second draw (compiler/kernels/head.py, _draw): a first draw outside the
# allowed set is followed by one draw over that set (its threshold found by _allowed_threshold)
# instead of rejection rounds over the ids above a rising floor. .gpu/T3 is this tree's packages
# (the default Llama-3.2-1B recipe, the draft-probability one, the sampling one); .gpu/Q is
# b6b4b7f's. The sampling GPU tests on T3, then the verify band's cost by setting (verify_cost.py)
# and the sampling package's (sampling_cost.py), Q and T3 in turn, twice.
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
{
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1 || cat "$OUT/install.log"
echo "=== sampling GPU tests (.gpu/T3) at ${SECONDS}s"
MONOBUILD_TEST_PACKAGES=.gpu/T3 timeout 240 python3 -m pytest -q -s -m gpu tests/test_runtime_gpu.py \
  -k "draft or rule_emits or sampled or draw" 2>&1 | grep -E "passed|failed|χ²|decided|Error|assert" | tail -24
for pass in 1 2; do
  for tree in Q T3; do
    echo "--- verdict cost, .gpu/$tree, pass $pass, at ${SECONDS}s"
    timeout 90 python3 docs/measurements/2026-12-07-draft-probs/verify_cost.py \
      .gpu/$tree/llama-3.2-1b-draft-probs-sm_90/sm_90 2>&1 | tail -9
    echo "--- sampling cost, .gpu/$tree, pass $pass, at ${SECONDS}s"
    timeout 90 python3 docs/measurements/2026-12-04-h200-weights/sampling_cost.py \
      .gpu/$tree/llama-3.2-1b-sample-sm_90/sm_90 2>&1 | tail -10
  done
done
echo "=== done at ${SECONDS}s"
} 2>&1 | tee "$OUT/run2.log"
