#!/usr/bin/env bash
# Issue 22: the greedy speculative verdict in the head's argmax task (a task per row). The packages of
# recipes/llama-3.2-1b-sm_90.yaml and recipes/qwen3-8b-sm_90.yaml at this commit (every program
# compiled again: the head's source changed), on the CPU machine (.gpu/pk1).
# 1. the GPU tests: the runtime's (the verdict's new ones among them) and generation's;
# 2. the step, 1 row and 1 × 6 at context 1024, persistent: against the table of record
#    (0.850 and 0.948 ms for Llama-3.2-1B), since every band's argmax changed.
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/device.txt" 2>&1
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
{
export MONOBUILD_TEST_PACKAGES=.gpu/pk1
timeout 240 python3 -m pytest -q -m gpu -s tests/test_runtime_gpu.py tests/test_integration_gpu.py 2>&1 | grep -v Warning | tail -14
echo "=== tests done at ${SECONDS}s"
for model in llama-3.2-1b qwen3-8b; do
  timeout 150 monobuild bench .gpu/pk1/$model-sm_90/sm_90 --context 1024 --mode persistent --band r1t1 --band r1t6 \
    --no-baseline 2>&1 | tail -6
done
echo "=== done at ${SECONDS}s"
} 2>&1 | tee "$OUT/run3.log"
