#!/usr/bin/env bash
# Llama-3.2-1B's 1 x 6 verify band (issues 18 and 22: <= 1.05x the 1-row step): the shipped table's
# program (R: the Triton executor) against streaming ones (v1: block_k 128 with norm stages; v2:
# without; tables.py), compiled on the CPU machine at commit 443639a into .gpu/v/<variant> from the
# recipe beside this script, each also as a --stage-clock build. Benches in turn at context 1024
# (no baseline), the stage clocks of the 1-row and 1 x 6 steps, and the 1 x 6 GPU test on v1 and v2.
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.total --format=csv > "$OUT/device.txt" 2>&1
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
P=llama-3.2-1b-sm_90
bench() { echo "--- $1"; timeout 100 monobuild bench .gpu/v/$1/$P/sm_90 --context 1024 --mode persistent --no-baseline \
  --band r1t1 --band r1t6 2>&1 | grep -E "persistent|copy|GB/s" | grep -v "^r.t. ctx"; }
{
echo "=== bench"
for v in R v1 v2 R v1 v2; do bench $v; done
echo "=== stage clocks"
for v in R v1 v2; do for b in r1t1 r1t6; do
  echo "--- $v $b"; timeout 60 python3 tools/stage_clock.py .gpu/v/$v/$P-clock/sm_90 --band $b --context 1024 \
    --save "$OUT/clock-$v-$b.pt" 2>&1 | grep -v Warning | tail -22
done; done
echo "=== GPU tests (1 x 6, persistent)"
for v in v1 v2; do
  MONOBUILD_TEST_PACKAGES=.gpu/v/$v timeout 120 python3 -m pytest -q -p no:cacheprovider tests/test_runtime_gpu.py \
    -k "test_step_matches_reference and persistent and 6" 2>&1 | tail -2
done
echo "=== done at ${SECONDS}s"
} 2>&1 | tee "$OUT/run1.log"
