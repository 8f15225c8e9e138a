#!/usr/bin/env bash
# The sample op a task per token row with a verdict op after it (.gpu/T5, 93b864f), and with the
# walks loading a step ahead and summing a lane's (.gpu/T6, b147193), against the threshold
# search of 9be9c4a (.gpu/T3) and the floor check (.gpu/T4, f52dba6's code): the GPU tests on
# T6 (its default-recipe package for the greedy verdict), then the verify band's cost
# (../2026-12-07-draft-probs/verify_cost.py) on each tree, T3 and T6 again, and the sampling
# package's over a flat distribution (flat_cost.py) and at temperature 1
# (../2026-12-04-h200-weights/sampling_cost.py).
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
D=docs/measurements
{
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1 || cat "$OUT/install.log"
echo "=== GPU tests (.gpu/T6) at ${SECONDS}s"
MONOBUILD_TEST_PACKAGES=.gpu/T6 timeout 200 python3 -m pytest -q -s -m gpu tests/test_runtime_gpu.py \
  -k "verdict or draft or rule_emits or sampled or draw" 2>&1 | grep -E "passed|failed|χ²|decided|Error|assert" | tail -24
for tree in T3 T4 T5 T6 T3 T6; do
  echo "--- verify band, .gpu/$tree, at ${SECONDS}s"
  timeout 90 python3 $D/2026-12-07-draft-probs/verify_cost.py .gpu/$tree/llama-3.2-1b-draft-probs-sm_90/sm_90 2>&1 | tail -9
done
for tree in T3 T6; do
  echo "--- flat sampling, .gpu/$tree, at ${SECONDS}s"
  timeout 90 python3 $D/2026-12-07-token-rows/flat_cost.py .gpu/$tree/llama-3.2-1b-sample-sm_90/sm_90 2>&1 | tail -8
done
echo "--- sampling at temperature 1, .gpu/T6, at ${SECONDS}s"
timeout 90 python3 $D/2026-12-04-h200-weights/sampling_cost.py .gpu/T6/llama-3.2-1b-sample-sm_90/sm_90 2>&1 | tail -10
echo "=== done at ${SECONDS}s"
} 2>&1 | tee "$OUT/run1.log"
