#!/usr/bin/env bash
# Fourth run: the FP8 product as f16 x f16 (E4M3 widened by sm_90's one-instruction conversion,
# the activation chunk widened once a CTA to f16 x 2^-8, a unit's scales loaded an iteration
# ahead). pk0: Qwen3-8B-FP8 compiled by c3673a4 (bf16 product, bit-placement widening); pk2: the
# same recipe and a Llama-3.1-8B FP8 geometry (.gpu/llama31) by the new code; pkb: bf16 Qwen3-8B.
# The widening's GPU tests, the FP8 GPU tests, the transformers check of both FP8 models, then
# 1- and 8-row benches of old and new side by side, bf16 beside them.
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/device.txt" 2>&1
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
F=qwen3-8b-fp8-sm_90/sm_90
bench() { echo "--- $1 $2 $3"; timeout $4 python3 -m monobuild.cli.main bench .gpu/$1 --context $2 --mode persistent \
  $3 > "$OUT/bench.out" 2> "$OUT/bench.err"; echo "rc $?"; grep -v "^r.t. ctx" "$OUT/bench.out" | grep persistent; tail -1 "$OUT/bench.err"; }
check() { timeout 150 python3 tools/transformers_check.py --packages .gpu/$1 --models $2 --rows 1,8 --steps 16 $3 2>&1 \
  | grep -v Warning | tail -5; }
{
echo "=== widening"; timeout 60 python3 -m pytest -q -m gpu tests/test_stream_kernels_gpu.py 2>&1 | tail -3
echo "=== FP8 GPU tests (pk2)"; MONOBUILD_TEST_PACKAGES=.gpu/pk2 timeout 100 python3 -m pytest -q -m gpu \
  tests/test_runtime_gpu.py -rs -k fp8 2>&1 | grep "passed\|failed\|FAILED\|^E " | head -8
echo "=== bench (from ${SECONDS}s)"
bench pk0/$F 1024 "--band r1t1 --band r8t1 --no-baseline" 70
bench pk2/$F 1024 "--band r1t1 --band r8t1 --no-baseline" 70
bench pkb/qwen3-8b-sm_90/sm_90 1024 "--band r1t1 --no-baseline" 60
echo "=== transformers check (from ${SECONDS}s)"
check pk2 qwen3-8b-fp8 ""
check pk2 llama-3.1-8b-fp8 "--configs .gpu/llama31"
echo "=== done at ${SECONDS}s"
} 2>&1 | tee "$OUT/run4.log"
