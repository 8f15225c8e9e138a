#!/usr/bin/env bash
# First run: Qwen3-8B-FP8 on the Triton executor (the compile derives 8-warp schedules from the
# bf16 entries: no FP8 entry is measured yet) beside bf16 Qwen3-8B, packages compiled on the CPU
# machine (.gpu/pk: code objects and manifests, the IR left out). The GPU tests (bf16 Llama-3.2-1B
# and the FP8 cases), the transformers check of the FP8 package, and benches of both at 1024.
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/device.txt" 2>&1
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
F=qwen3-8b-fp8-sm_90/sm_90
Q=qwen3-8b-sm_90/sm_90
bench() { echo "--- $1 $2 $3"; timeout 240 python3 -m monobuild.cli.main bench .gpu/pk/$1 --context $2 --mode persistent \
  $3 2>&1 | grep -v "^r.t. ctx" | grep "persistent\|rror"; }
{
echo "=== GPU tests"
MONOBUILD_TEST_PACKAGES=.gpu/pk timeout 200 python3 -m pytest -q -m gpu tests/test_runtime_gpu.py -rs 2>&1 | grep -v "^tests.*PASSED" | tail -25
echo "=== transformers check (FP8)"
timeout 200 python3 tools/transformers_check.py --packages .gpu/pk --models qwen3-8b-fp8 --rows 1,8 \
  --steps 16 2>&1 | grep -v Warning | tail -8
echo "=== bench"
bench $F 1024 "--band r1t1 --band r2t1 --band r4t1 --band r8t1 --band r1t6"
bench $Q 1024 "--band r1t1 --band r8t1 --no-baseline"
} 2>&1 | tee "$OUT/run1.log"
