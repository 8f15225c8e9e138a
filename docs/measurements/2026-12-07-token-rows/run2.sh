#!/usr/bin/env bash
# The first draw's check by the tiles' maxima at the drawn id (.gpu/T7, e0a89aa), and with the held
# tiles listed once a pass (.gpu/T8, cead991), against the floor found first (.gpu/T6, b147193)
# and the threshold search of 9be9c4a (.gpu/T3): the sampling GPU tests on T8; the sampling
# package at temperature 1 (../2026-12-04-h200-weights/sampling_cost.py), T3, T6, T7 and T8 in
# turn, twice; over a flat distribution (flat_cost.py) on T5 (93b864f), T7 and T8; the verify
# band's cost (../2026-12-07-draft-probs/verify_cost.py) on T6, T7 and T8; the logits those
# settings apply to, saved (dump_logits.py).
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
D=docs/measurements
{
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1 || cat "$OUT/install.log"
echo "=== sampling GPU tests (.gpu/T8) at ${SECONDS}s"
MONOBUILD_TEST_PACKAGES=.gpu/T8 timeout 200 python3 -m pytest -q -s -m gpu tests/test_runtime_gpu.py \
  -k "draft or rule_emits or sampled or draw" 2>&1 | grep -E "passed|failed|χ²|decided|Error|assert" | tail -24
for tree in T3 T6 T7 T8 T3 T6 T7 T8; do
  echo "--- sampling at temperature 1, .gpu/$tree, at ${SECONDS}s"
  timeout 90 python3 $D/2026-12-04-h200-weights/sampling_cost.py .gpu/$tree/llama-3.2-1b-sample-sm_90/sm_90 2>&1 | tail -10
done
for tree in T5 T7 T8; do
  echo "--- flat sampling, .gpu/$tree, at ${SECONDS}s"
  timeout 90 python3 $D/2026-12-07-token-rows/flat_cost.py .gpu/$tree/llama-3.2-1b-sample-sm_90/sm_90 2>&1 | tail -8
done
for tree in T6 T7 T8; do
  echo "--- verify band, .gpu/$tree, at ${SECONDS}s"
  timeout 90 python3 $D/2026-12-07-draft-probs/verify_cost.py .gpu/$tree/llama-3.2-1b-draft-probs-sm_90/sm_90 2>&1 | tail -9
done
echo "--- the settings' logits (dump_logits.py), at ${SECONDS}s"
timeout 90 python3 $D/2026-12-07-token-rows/dump_logits.py .gpu/T8/llama-3.2-1b-draft-probs-sm_90/sm_90 \
  .gpu/T8/llama-3.2-1b-sample-sm_90/sm_90 "$OUT/logits.pt" 2>&1 | tail -3
echo "=== done at ${SECONDS}s"
} 2>&1 | tee "$OUT/run2.log"
