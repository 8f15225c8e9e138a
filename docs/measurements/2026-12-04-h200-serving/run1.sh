#!/usr/bin/env bash
# Issue 22, first increment: generation with a package through monobuild.integrations.transformers.
# The Llama-3.2-1B package of recipes/llama-3.2-1b-sm_90.yaml, compiled on the CPU machine (.gpu/pk1).
# 1. the GPU tests: generation against transformers' generate (1, 4, 8 rows; end of sequence), and
#    the runtime's own GPU tests (unchanged programs; the step's new serves()).
# 2. tools/engine_example.py: a vLLM-style decode loop (block pool, padded batches, a graph per size).
# 3. tools/generate_bench.py: end-to-end decode tokens/s against generate, eager and static + compile.
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/device.txt" 2>&1
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
{
export MONOBUILD_TEST_PACKAGES=.gpu/pk1
timeout 240 python3 -m pytest -q -m gpu -s tests/test_integration_gpu.py tests/test_runtime_gpu.py 2>&1 | tail -25
echo "=== tests done at ${SECONDS}s"
timeout 90 python3 tools/engine_example.py --package .gpu/pk1/llama-3.2-1b-sm_90/sm_90 2>&1 | tail -16
echo "=== example done at ${SECONDS}s"
timeout 420 python3 tools/generate_bench.py --package .gpu/pk1/llama-3.2-1b-sm_90/sm_90 \
  --config recipes/configs/llama-3.2-1b.json --rows 1,8 --prompt 128 --new 256 --json "$OUT/generate.json" 2>&1 | tail -12
echo "=== done at ${SECONDS}s"
} 2>&1 | tee "$OUT/run1.log"
