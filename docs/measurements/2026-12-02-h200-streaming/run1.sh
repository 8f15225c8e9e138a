#!/usr/bin/env bash
# First run of the streaming executor on the H200: layer 0 op by op against the staged (Triton)
# programs, the GPU tests on the streaming packages, and a bench beside the Triton executor's.
#   .gpu/stream  packages compiled with a table that turns streaming on for every band
#   .gpu/triton  the same recipes with the shipped table
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/device.txt" 2>&1
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
python3 -c "import torch, cuda.bindings; print(torch.__version__, cuda.bindings.__version__)" >> "$OUT/device.txt"
{
for spec in llama-3.2-1b:r1t1 llama-3.2-1b:r8t1 llama-3.2-1b:r1t6 qwen3-8b:r1t1 qwen3-8b:r8t1; do
  echo "=== layer 0, ${spec%%:*} ${spec##*:}"
  timeout 90 python3 tools/executor_diff.py .gpu/stream/${spec%%:*}-sm_90/sm_90 --band ${spec##*:} 2>&1 | tail -16
done
echo "=== GPU tests (streaming packages)"
MONOBUILD_TEST_PACKAGES=.gpu/stream timeout 240 python3 -m pytest -q -m gpu tests/test_runtime_gpu.py 2>&1 | tail -25
echo "=== bench"
for pk in stream triton stream triton; do
  echo "--- $pk"
  timeout 100 python3 -m monobuild.cli.main bench .gpu/$pk/llama-3.2-1b-sm_90/sm_90 --context 1024 --mode persistent \
    --no-baseline --band r1t1 --band r8t1 2>&1 | tail -4
done
} 2>&1 | tee "$OUT/run1.log"
