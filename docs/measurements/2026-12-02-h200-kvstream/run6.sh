#!/usr/bin/env bash
# Sixth run: the packages of record (.gpu/pk/R: this commit's shipped table, compiled on the CPU
# machine; its 65 Llama-3.2-1B code objects are byte-identical to run 5's V8): the GPU tests, the
# transformers check, a debug build's hang report, and benches of every band, the PyTorch
# CUDA-graph baseline included at context 1024.
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/device.txt" 2>&1
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
L=llama-3.2-1b-sm_90/sm_90
Q=qwen3-8b-sm_90/sm_90
bench() { echo "--- $1 $2 $3"; timeout 240 python3 -m monobuild.cli.main bench .gpu/pk/$1 --context $2 --mode persistent \
  $3 2>&1 | grep "persistent" | grep -v "^r.t. ctx"; }
{
echo "=== GPU tests (R)"
MONOBUILD_TEST_PACKAGES=.gpu/pk/R timeout 200 python3 -m pytest -q -m gpu tests/test_runtime_gpu.py -x 2>&1 | tail -3
echo "=== transformers check (R)"
timeout 200 python3 tools/transformers_check.py --packages .gpu/pk/R --models llama-3.2-1b,qwen3-8b --rows 1,8 \
  --steps 16 2>&1 | grep -v Warning | tail -10
echo "=== hang check (R, debug build)"
timeout 120 python3 tools/hang_check.py .gpu/pk/R/llama-3.2-1b-sm_90-debug/sm_90 2>&1 | tail -6
echo "=== bench"
bench R/$L 128,1024,8192,32768 "--band r1t1 --no-baseline"
bench R/$L 32768 "--band r8t1 --no-baseline"
bench R/$Q 1024 "--band r1t1 --band r2t1 --band r4t1 --band r8t1 --band r1t6 --no-baseline"
(( SECONDS < 330 )) && bench R/$L 1024 "--band r1t1 --band r2t1 --band r4t1 --band r8t1 --band r1t6"
} 2>&1 | tee "$OUT/run6.log"
