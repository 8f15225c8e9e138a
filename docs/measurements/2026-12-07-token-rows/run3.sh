#!/usr/bin/env bash
# The cut pass's sums cut-major (.gpu/T9, aae04c6: its ids broadcast over the cuts in the layout
# they were loaded in), and the verdict kept without S's search where u · q(d) < π(d) / total and
# d is in S (.gpu/T10, bc0e48b, with the default recipe's package copied from T8 for the GPU
# tests), against T8 (cead991): the GPU tests on T10; the sampler's kernels alone over run 2's
# saved logits (sample_op_cost.py, bc0e48b's code); the verify band's cost on T8, T9 and T10,
# twice in turn; the sampling package's over a flat distribution on T8 and T9.
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
D=docs/measurements
{
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1 || cat "$OUT/install.log"
echo "=== GPU tests (.gpu/T10) at ${SECONDS}s"
MONOBUILD_TEST_PACKAGES=.gpu/T10 timeout 200 python3 -m pytest -q -s -m gpu tests/test_runtime_gpu.py \
  -k "verdict or draft or rule_emits or sampled or draw" 2>&1 | grep -E "passed|failed|χ²|decided|Error|error|assert" | tail -24
echo "--- sample op alone over the saved logits, at ${SECONDS}s"
timeout 300 python3 $D/2026-12-07-token-rows/sample_op_cost.py .gpu/L/logits.pt 2>&1 | tail -12
for tree in T8 T9 T10 T8 T9 T10; do
  echo "--- verify band, .gpu/$tree, at ${SECONDS}s"
  timeout 90 python3 $D/2026-12-07-draft-probs/verify_cost.py .gpu/$tree/llama-3.2-1b-draft-probs-sm_90/sm_90 2>&1 | tail -9
done
for tree in T8 T9; do
  echo "--- flat sampling, .gpu/$tree, at ${SECONDS}s"
  timeout 90 python3 $D/2026-12-07-token-rows/flat_cost.py .gpu/$tree/llama-3.2-1b-sample-sm_90/sm_90 2>&1 | tail -8
done
echo "=== done at ${SECONDS}s"
} 2>&1 | tee "$OUT/run3.log"
