#!/usr/bin/env bash
# Gated GEMV units of half gate, half up rows (tiles of 32 output rows on the streaming executor)
# against b6ac8b0's units of 64 gate and 64 up rows. .gpu/N: the shipped recipes compiled on the
# CPU machine with the change; .gpu/B: the same recipes' persistent programs compiled at b6ac8b0
# (no verify band); .gpu/C: this folder's 1-row clock recipes, with the change (--stage-clock).
# 1. the GPU tests on N; 2. the transformers check of N's four models; 3. benches alternating
# B / N twice, context 1024; 4. stage clocks of the 1-row programs.
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/device.txt" 2>&1
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
bench() { echo "--- $1 $2"; timeout 120 python3 -m monobuild.cli.main bench .gpu/$1/sm_90 --context 1024 --mode persistent \
  $2 --no-baseline 2>&1 | grep "persistent" | grep -v "^r.t. ctx"; }
check() { timeout 150 python3 tools/transformers_check.py --packages .gpu/N --models $1 --rows 1,8 --steps 16 2>&1 \
  | grep -v Warning | tail -4; }
{
echo "=== GPU tests (N)"
MONOBUILD_TEST_PACKAGES=.gpu/N timeout 200 python3 -m pytest -q -m gpu tests/test_runtime_gpu.py tests/test_stream_kernels_gpu.py \
  -k "not sampl" 2>&1 | grep -v Warning | tail -4
echo "=== transformers check (N) at ${SECONDS}s"
for m in llama-3.2-1b qwen3-0.6b qwen3-8b qwen3-8b-fp8; do echo "--- $m"; check $m; done
echo "=== bench at ${SECONDS}s"
for v in B N B N; do
  bench $v/llama-3.2-1b-sm_90 "--band r1t1 --band r8t1"
  bench $v/qwen3-0.6b-sm_90 "--band r1t1 --band r8t1"
  bench $v/qwen3-8b-sm_90 "--band r1t1 --band r2t1 --band r4t1 --band r8t1"
  bench $v/qwen3-8b-fp8-sm_90 "--band r1t1 --band r8t1"
done
echo "=== stage clocks at ${SECONDS}s"
for m in qwen3-8b qwen3-8b-fp8 qwen3-0.6b; do
  timeout 90 python3 tools/stage_clock.py .gpu/C/$m-clock-clock/sm_90 --band r1t1 --context 1024 \
    --save "$OUT/clock-$m.pt" 2>&1 | grep -v Warning | head -14
done
echo "=== done at ${SECONDS}s"
} 2>&1 | tee "$OUT/run1.log"
