#!/usr/bin/env bash
# Fifth run: the widening of the activation chunk an iteration ahead (pk3: its f16 slots double,
# one barrier an iteration where run 4's code, pk2 = 39cb8b1, has two), against pk2; then pk3 as
# the run of record: the widening and FP8 GPU tests, benches of every FP8 band and of bf16
# Qwen3-8B (pkb), the transformers check of both FP8 models, the FP8 step's torch.compile
# baseline at 1 row.
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/device.txt" 2>&1
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
F=qwen3-8b-fp8-sm_90/sm_90
ALL="--band r1t1 --band r2t1 --band r4t1 --band r8t1 --band r1t6"
bench() { echo "--- $1 $2 $3"; timeout $4 python3 -m monobuild.cli.main bench .gpu/$1 --context $2 --mode persistent \
  $3 > "$OUT/bench.out" 2> "$OUT/bench.err"; echo "rc $?"; grep -v "^r.t. ctx" "$OUT/bench.out" | grep persistent; tail -1 "$OUT/bench.err"; }
check() { timeout 150 python3 tools/transformers_check.py --packages .gpu/$1 --models $2 --rows 1,8 --steps 16 $3 2>&1 \
  | grep -v Warning | tail -5; }
{
echo "=== widening"; timeout 60 python3 -m pytest -q -m gpu tests/test_stream_kernels_gpu.py 2>&1 | grep -v "^$" | tail -12
echo "=== bench A/B (from ${SECONDS}s)"
bench pk2/$F 1024 "--band r1t1 --band r8t1 --no-baseline" 70
bench pk3/$F 1024 "--band r1t1 --band r8t1 --no-baseline" 70
echo "=== FP8 GPU tests (pk3, from ${SECONDS}s)"; MONOBUILD_TEST_PACKAGES=.gpu/pk3 timeout 100 python3 -m pytest -q -m gpu \
  tests/test_runtime_gpu.py -rs -k fp8 2>&1 | grep "passed\|failed\|FAILED\|^E " | head -12
echo "=== bench of record (from ${SECONDS}s)"
bench pk3/$F 1024 "$ALL --no-baseline" 120
bench pkb/qwen3-8b-sm_90/sm_90 1024 "--band r1t1 --band r8t1 --no-baseline" 70
echo "=== transformers check (from ${SECONDS}s)"
check pk3 qwen3-8b-fp8 ""
check pk3 llama-3.1-8b-fp8 "--configs .gpu/llama31"
echo "=== baseline (from ${SECONDS}s)"
bench pk3/$F 1024 "--band r1t1" $(( 400 - SECONDS ))
echo "=== done at ${SECONDS}s"
} 2>&1 | tee "$OUT/run5.log"
