#!/usr/bin/env bash
# The bf16 streaming GEMV's unit product as two independent halves of its K (two MMA chains the
# tensor cores run side by side, added after) instead of one chain over the unit. .gpu/X: the
# shipped Llama-3.2-1B, Qwen3-8B and Qwen3-0.6B recipes compiled on the CPU machine with the
# change; .gpu/N: 313084f's packages (run 2); .gpu/CX: ../2026-12-04-h200-fold/llama-clock.yaml
# with the change (--stage-clock). 1. the GPU tests on X; 2. the transformers check of X's
# Llama-3.2-1B and Qwen3-8B; 3. benches alternating N / X twice, context 1024; 4. X's stage clock.
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/device.txt" 2>&1
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
bench() { echo "--- $1 $2"; timeout 120 python3 -m monobuild.cli.main bench .gpu/$1/sm_90 --context 1024 --mode persistent \
  $2 --no-baseline 2>&1 | grep "persistent" | grep -v "^r.t. ctx"; }
{
echo "=== GPU tests (X)"
MONOBUILD_TEST_PACKAGES=.gpu/X timeout 200 python3 -m pytest -q -m gpu tests/test_runtime_gpu.py -k "not sampl and not fp8" \
  2>&1 | grep -v Warning | tail -3
echo "=== transformers check (X) at ${SECONDS}s"
timeout 200 python3 tools/transformers_check.py --packages .gpu/X --models llama-3.2-1b,qwen3-8b --rows 1,8 --steps 16 \
  2>&1 | grep -v Warning | tail -7
echo "=== bench at ${SECONDS}s"
for v in N X N X; do
  bench $v/llama-3.2-1b-sm_90 "--band r1t1 --band r2t1 --band r4t1 --band r8t1"
  bench $v/qwen3-8b-sm_90 "--band r1t1 --band r8t1"
  bench $v/qwen3-0.6b-sm_90 "--band r1t1 --band r8t1"
done
echo "=== stage clock at ${SECONDS}s"
timeout 90 python3 tools/stage_clock.py .gpu/CX/llama-clock-clock/sm_90 --band r1t1 --context 1024 \
  --save "$OUT/clock3-llama.pt" 2>&1 | grep -v Warning | head -14
echo "=== done at ${SECONDS}s"
} 2>&1 | tee "$OUT/run3.log"
