#!/usr/bin/env bash
# Second run: FP8 on both executors. .gpu/pk holds run 1's packages (the FP8 layer programs on
# the Triton executor); .gpu/pk2 the same recipes compiled by the code that streams FP8 (the
# shipped table's bf16 entries for hidden 4096 at 1-8 rows, whose 32 KB units become 512 E4M3
# columns), and a Llama-3.1-8B FP8 geometry that is not shipped (config and recipe in
# .gpu/llama31). The GPU tests on both (their KV bound now stated against the framework's own KV
# error: run 1 failed three FP8 cases on the fixed 1e-2 bound at 1.0014e-2, their logits 10×
# inside theirs), the transformers check, benches of every FP8 band on both executors and of bf16
# Qwen3-8B, and the FP8 step's torch.compile baseline.
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/device.txt" 2>&1
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
F=qwen3-8b-fp8-sm_90/sm_90
Q=qwen3-8b-sm_90/sm_90
ALL="--band r1t1 --band r2t1 --band r4t1 --band r8t1 --band r1t6"
bench() { echo "--- $1 $2 $3"; timeout $4 python3 -m monobuild.cli.main bench .gpu/$1 --context $2 --mode persistent \
  $3 > "$OUT/bench.out" 2> "$OUT/bench.err"; echo "rc $?"; grep -v "^r.t. ctx" "$OUT/bench.out" | grep persistent; tail -2 "$OUT/bench.err"; }
tests() { MONOBUILD_TEST_PACKAGES=.gpu/$1 timeout 150 python3 -m pytest -q -m gpu tests/test_runtime_gpu.py -rs $2 2>&1 \
  | grep -v "^tests.*PASSED" | grep "passed\|failed\|FAILED\|^E " | head -12; }
check() { timeout 150 python3 tools/transformers_check.py --packages .gpu/$1 --models $2 --rows 1,8 --steps 16 $3 2>&1 \
  | grep -v Warning | tail -5; }
{
echo "=== GPU tests, streaming FP8 (pk2)"; tests pk2 ""
echo "=== GPU tests, Triton FP8 (pk)"; tests pk "-k fp8"
echo "=== transformers check"
check pk2 qwen3-8b-fp8 ""
check pk2 llama-3.1-8b-fp8 "--configs .gpu/llama31"
echo "=== bench (from ${SECONDS}s)"
bench pk2/$F 1024 "$ALL --no-baseline" 120
bench pk/$F 1024 "$ALL --no-baseline" 120
bench pk/$Q 1024 "--band r1t1 --band r8t1 --no-baseline" 60
bench pk2/$F 1024 "--band r1t1" $(( 570 - SECONDS ))
} 2>&1 | tee "$OUT/run2.log"
