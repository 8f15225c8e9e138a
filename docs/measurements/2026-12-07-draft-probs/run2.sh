#!/usr/bin/env bash
# One device call, two trees:
#  (run1.sh, shortened for the device time left: run A is the moe-fp8 folder's shorter run3.sh)
#  A. the routed FP8 streaming change (docs/measurements/2026-12-07-moe-fp8/stream-fp8.patch, not
#     landed), its tree extracted into .gpu/sf, run by that folder's run2.sh against .gpu/N (that
#     tree's packages) and .gpu/OLD (af53948's);
#  B. this tree (verify.draft_probs): the GPU tests of the sampling head (.gpu/Q: Llama-3.2-1B's
#     default package, which the GPU tests require; the draft-probability package,
#     tests/data/llama-3.2-1b-draft-probs-sm_90.yaml; the sampling package,
#     docs/measurements/2026-12-04-h200-serving/llama-3.2-1b-sample-sm_90.yaml), then what the
#     verdict costs a step (verify_cost.py); B first: it is short.
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
ROOT=$PWD
{
echo "=== B: sampling GPU tests at ${SECONDS}s"
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/install-b.log" 2>&1 || cat "$OUT/install-b.log"
MONOBUILD_TEST_PACKAGES=.gpu/Q timeout 240 python3 -m pytest -q -s -m gpu tests/test_runtime_gpu.py \
  -k "draft or rule_emits or sampled or draw" 2>&1 | grep -E "passed|failed|χ²|decided|Error|assert" | tail -20
echo "--- the verdict's cost at ${SECONDS}s"
timeout 60 python3 docs/measurements/2026-12-07-draft-probs/verify_cost.py .gpu/Q/llama-3.2-1b-draft-probs-sm_90/sm_90 2>&1 | tail -12
echo "=== A at ${SECONDS}s"
} 2>&1 | tee "$OUT/run2-b.log"
mkdir -p .gpu/sf/.gpu && ln -sfn "$ROOT/.gpu/N" .gpu/sf/.gpu/N && ln -sfn "$ROOT/.gpu/OLD" .gpu/sf/.gpu/OLD
cd .gpu/sf && OUT="$OUT" bash docs/measurements/2026-12-07-moe-fp8/run3.sh
