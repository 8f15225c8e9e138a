#!/usr/bin/env bash
# Four MMA chains a bf16 unit (K quarters; each chain's x slice loaded after the unit's ready
# wait) against 14e2fd0's two (x halves loaded before it). .gpu/Z: the shipped Qwen3-0.6B,
# Llama-3.2-1B and Qwen3-8B recipes compiled on the CPU machine with four; .gpu/X: run 3's.
# 1. the Llama GPU tests on Z; 2. the transformers check of Z's Llama-3.2-1B and Qwen3-0.6B;
# 3. benches alternating X / Z twice, context 1024.
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/device.txt" 2>&1
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
bench() { echo "--- $1 $2"; timeout 120 python3 -m monobuild.cli.main bench .gpu/$1/sm_90 --context 1024 --mode persistent \
  $2 --no-baseline 2>&1 | grep "persistent" | grep -v "^r.t. ctx"; }
{
echo "=== GPU tests (Z)"
MONOBUILD_TEST_PACKAGES=.gpu/Z timeout 200 python3 -m pytest -q -m gpu tests/test_runtime_gpu.py -k "not sampl and not fp8" \
  2>&1 | grep -v Warning | tail -2
echo "=== transformers check (Z) at ${SECONDS}s"
timeout 200 python3 tools/transformers_check.py --packages .gpu/Z --models llama-3.2-1b,qwen3-0.6b --rows 1,8 --steps 16 \
  2>&1 | grep -v Warning | tail -3
echo "=== bench at ${SECONDS}s"
for v in X Z X Z; do
  bench $v/qwen3-0.6b-sm_90 "--band r1t1 --band r8t1"
  bench $v/llama-3.2-1b-sm_90 "--band r1t1 --band r4t1 --band r8t1"
  bench $v/qwen3-8b-sm_90 "--band r1t1 --band r8t1"
done
echo "=== done at ${SECONDS}s"
} 2>&1 | tee "$OUT/run4.log"
