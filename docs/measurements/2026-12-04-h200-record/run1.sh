#!/usr/bin/env bash
# The table of record at b6ac8b0 (weights bound in place, the sampling head, the FP8 GEMV of
# record): packages compiled on the CPU machine at that commit (.gpu/R: the shipped Llama-3.2-1B,
# Qwen3-8B and Qwen3-8B-FP8 recipes, and docs/measurements/2026-12-04-h200-serving's sampling
# recipe for the GPU tests); the GPU tests, then every band's bench (the PyTorch baselines at
# 1-row and 8-row Llama and 1-row FP8), the context sweep, and the Hazy megakernel
# (../shared/peers/hazy, built here from its source) at contexts 128 and 1024, in one command.
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/device.txt" 2>&1
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
python3 -c "import torch, triton; print(torch.__version__, triton.__version__)" >> "$OUT/device.txt"
L=R/llama-3.2-1b-sm_90/sm_90
Q=R/qwen3-8b-sm_90/sm_90
F=R/qwen3-8b-fp8-sm_90/sm_90
bench() { echo "--- $1 $2 $3"; timeout 300 python3 -m monobuild.cli.main bench .gpu/$1 --context $2 --mode persistent \
  $3 2>&1 | grep "persistent" | grep -v "^r.t. ctx"; }
{
echo "=== GPU tests (R)"
MONOBUILD_TEST_PACKAGES=.gpu/R timeout 240 python3 -m pytest -q -m gpu tests/test_runtime_gpu.py 2>&1 \
  | grep -v Warning | tail -4
echo "=== bench at ${SECONDS}s"
bench $L 1024 "--band r1t1 --band r2t1 --band r4t1 --band r8t1 --band r1t6"
bench $L 128,256,512,2048,8192,32768 "--band r1t1 --no-baseline"
bench $L 32768 "--band r8t1 --no-baseline"
bench $Q 1024 "--band r1t1 --band r2t1 --band r4t1 --band r8t1 --band r1t6 --no-baseline"
bench $F 1024 "--band r1t1 --band r2t1 --band r4t1 --band r8t1 --band r1t6 --no-baseline"
echo "=== peer: Hazy megakernel at ${SECONDS}s"
for ctx in 128 1024; do
  (cd .peers/hazy && CTX=$ctx OUT="$OUT/peer-$ctx" HAZY_TOTAL_BUDGET=200 bash run_h200.sh 2>&1 | grep -E "^PEER|kernel alone|calibration" | tail -4)
done
echo "=== ours again, same command, at ${SECONDS}s"
bench $L 128,1024 "--band r1t1 --no-baseline"
echo "=== done at ${SECONDS}s"
} 2>&1 | tee "$OUT/run1.log"
