#!/usr/bin/env bash
# Llama-3.2-1B's 1-, 2-, 4- and 8-row layer programs with qkv's K whole (q1) or in two splits (q2)
# against the shipped table (R), all compiled on the CPU machine from recipes/llama-3.2-1b-sm_90.yaml
# (tables.py): benches in turn at context 1024;
# the GPU tests of the changed programs (1 and 8 rows, both modes).
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.total --format=csv > "$OUT/device.txt" 2>&1
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
P=llama-3.2-1b-sm_90
bench() { echo "--- $1"; timeout 100 monobuild bench .gpu/v/$1/$P/sm_90 --context 1024 --mode persistent --no-baseline \
  --band r1t1 --band r2t1 --band r4t1 --band r8t1 2>&1 | grep -E "persistent|copy" | grep -v "^r.t. ctx" | grep -v "on NVIDIA"; }
{
echo "=== bench"
for v in R q1 q2 R q1 q2; do bench $v; done
echo "=== GPU tests"
for v in q1 q2; do
  echo "--- $v"; MONOBUILD_TEST_PACKAGES=.gpu/v/$v timeout 90 python3 -m pytest -q -p no:cacheprovider tests/test_runtime_gpu.py \
    -k "test_step_matches_reference and (1-1 or 8-1)" 2>&1 | tail -1
done
echo "=== done at ${SECONDS}s"
} > "$OUT/run1.log" 2>&1
cat "$OUT/run1.log"
