#!/usr/bin/env bash
# The allowed set's threshold search over the tiles' maxima (compiler/kernels/head.py,
# _allowed_threshold): the draft-probability GPU tests on the new packages, then what the
# verdict costs a step, the package before the change (.gpu/Q, b6b4b7f) and after it (.gpu/T:
# 341d9fd; .gpu/T2: its passes also skip the cuts in steps with no id inside the interval, the
# counts above it carried from the pass before) benched in turn, twice each, on the same device
# in the same call. Then the stage clocks of Llama-3.2-1B's 1-row and 1 × 6 bands (below).
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
COST=docs/measurements/2026-12-07-draft-probs/verify_cost.py
PKG=llama-3.2-1b-draft-probs-sm_90/sm_90
{
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1 || cat "$OUT/install.log"
for tree in T2 T; do
  echo "=== draft-probability GPU tests (.gpu/$tree) at ${SECONDS}s"
  MONOBUILD_TEST_PACKAGES=.gpu/$tree timeout 200 python3 -m pytest -q -s -m gpu tests/test_runtime_gpu.py \
    -k "draft or rule_emits" 2>&1 | grep -E "passed|failed|χ²|decided|Error|assert" | tail -20
done
for pass in 1 2; do
  for tree in Q T T2; do
    echo "--- verdict cost, .gpu/$tree, pass $pass, at ${SECONDS}s"
    timeout 90 python3 $COST .gpu/$tree/$PKG 2>&1 | tail -9
  done
done
echo "=== done at ${SECONDS}s"
} 2>&1 | tee "$OUT/run1.log"
# Where the 1 × 6 verify band's step goes beside the 1-row step's (issue 18's and issue 22's
# 1.05× target): the default Llama-3.2-1B recipe's --stage-clock build (.gpu/C), per stage.
{
for band in r1t1 r1t6; do
  echo "=== stage clock, $band, at ${SECONDS}s"
  timeout 120 python3 tools/stage_clock.py .gpu/C/llama-3.2-1b-sm_90-clock/sm_90 --band $band 2>&1 | tail -40
done
echo "=== clocks done at ${SECONDS}s"
} 2>&1 | tee "$OUT/clock.log"
