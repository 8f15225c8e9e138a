#!/usr/bin/env bash
# Run 3 (what little device time was left after run 2's starts failed): run 2's packages, its first
# two steps only: the GPU tests of routed steps, then Qwen3-30B-A3B-FP8 at 1 and 8 rows, N / OLD.
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.total --format=csv > "$OUT/device3.txt" 2>&1
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
F=qwen3-30b-a3b-fp8-sm_90/sm_90
{
echo "=== GPU tests at ${SECONDS}s"
MONOBUILD_TEST_PACKAGES=.gpu/N timeout 60 python3 -m pytest -q -x -m gpu tests/test_runtime_gpu.py -k "routed or routing" 2>&1 | tail -6
for v in N OLD; do echo "--- $v at ${SECONDS}s"; timeout 60 monobuild bench .gpu/$v/$F --context 1024 --mode persistent \
  --band r1t1 --band r8t1 --no-baseline 2>&1 | grep -E "persistent|copy|band " | grep -v "on NVIDIA"; done
echo "=== done at ${SECONDS}s"
} 2>&1 | tee "$OUT/run3.log"
