#!/usr/bin/env bash
# Issue 22: the speculative verdict for a sampling head. .gpu/n5: this tree's packages (the default
# Llama-3.2-1B recipe, llama-3.2-1b-sample-sm_90.yaml here with its 1 × 6 verify band, Qwen3-8B FP8).
# 1. every GPU test (the sampled verify band's verdict among them); 2. the greedy and the sampling
# heads' steps, 1 and 8 rows and the 1 × 6 verify band, at context 1024, twice; 3. the sampler's
# cost by setting.
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/device.txt" 2>&1
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
M=docs/measurements/2026-12-04-h200-weights
{
echo "=== GPU tests (.gpu/n5)"
MONOBUILD_TEST_PACKAGES=.gpu/n5 timeout 240 python3 -m pytest -q -m gpu tests/test_runtime_gpu.py tests/test_integration_gpu.py \
  2>&1 | grep -v Warning | tail -8
echo "=== bench"
for round in 1 2; do
  for model in llama-3.2-1b llama-3.2-1b-sample; do
    echo "--- round $round $model"
    timeout 100 python3 -m monobuild.cli.main bench .gpu/n5/$model-sm_90/sm_90 --context 1024 --mode persistent \
      --band r1t1 --band r8t1 --band r1t6 --no-baseline 2>&1 | grep -E "^r[18]t[16] "
  done
done
echo "=== sampling cost by setting"
timeout 100 python3 $M/sampling_cost.py .gpu/n5/llama-3.2-1b-sample-sm_90/sm_90 2>&1 | grep -v Warning
echo "=== done at ${SECONDS}s"
} 2>&1 | tee "$OUT/run5.log"
