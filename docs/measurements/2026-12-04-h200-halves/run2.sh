#!/usr/bin/env bash
# The halves taken where they balance the op (executor.gated_halves; the commit of record): .gpu/N
# the shipped recipes compiled on the CPU machine at it (Llama-3.2-1B's layer programs are
# b6ac8b0's, code object for code object; Qwen3-8B's are run 1's); .gpu/B as in run 1; .gpu/C the
# FP8 and Qwen3-0.6B clock recipes. 1. the GPU tests on N; 2. the transformers check of the FP8
# and Qwen3-0.6B packages; 3. every band of N at context 1024 (Qwen3-0.6B also at 32768), then
# B's Qwen3-8B and FP8 1- and 8-row steps again; 4. stage clocks.
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/device.txt" 2>&1
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
bench() { echo "--- $1 $2 $3"; timeout 150 python3 -m monobuild.cli.main bench .gpu/$1/sm_90 --context $2 --mode persistent \
  $3 --no-baseline 2>&1 | grep "persistent" | grep -v "^r.t. ctx"; }
check() { timeout 150 python3 tools/transformers_check.py --packages .gpu/N --models $1 --rows 1,8 --steps 16 2>&1 \
  | grep -v Warning | tail -4; }
ALL="--band r1t1 --band r2t1 --band r4t1 --band r8t1 --band r1t6"
{
echo "=== GPU tests (N)"
MONOBUILD_TEST_PACKAGES=.gpu/N timeout 200 python3 -m pytest -q -m gpu tests/test_runtime_gpu.py tests/test_stream_kernels_gpu.py \
  -k "not sampl" 2>&1 | grep -v Warning | tail -4
echo "=== transformers check (N) at ${SECONDS}s"
for m in qwen3-8b-fp8 qwen3-0.6b; do echo "--- $m"; check $m; done
echo "=== bench at ${SECONDS}s"
bench N/llama-3.2-1b-sm_90 1024 "--band r1t1 --band r8t1"
bench N/qwen3-8b-sm_90 1024 "$ALL"
bench N/qwen3-8b-fp8-sm_90 1024 "$ALL"
bench N/qwen3-0.6b-sm_90 1024 "$ALL"
bench N/qwen3-0.6b-sm_90 32768 "--band r1t1 --band r8t1"
bench B/qwen3-8b-sm_90 1024 "--band r1t1 --band r8t1"
bench B/qwen3-8b-fp8-sm_90 1024 "--band r1t1 --band r8t1"
bench B/qwen3-0.6b-sm_90 32768 "--band r1t1 --band r8t1"
echo "=== stage clocks at ${SECONDS}s"
for m in qwen3-8b-fp8 qwen3-0.6b; do
  timeout 90 python3 tools/stage_clock.py .gpu/C/$m-clock-clock/sm_90 --band r1t1 --context 1024 \
    --save "$OUT/clock2-$m.pt" 2>&1 | grep -v Warning | head -14
done
echo "=== done at ${SECONDS}s"
} 2>&1 | tee "$OUT/run2.log"
