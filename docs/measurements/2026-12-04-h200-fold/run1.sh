#!/usr/bin/env bash
# First run: attention's split merge inside o (schedule key combine_in_o) against the combine op.
# .gpu/base: the shipped table; .gpu/fold: the same with combine_in_o 1 on the streaming entries of
# Llama-3.2-1B (1-8 rows) and Qwen3-8B (1, 2 rows) (sm_90-combine_in_o.yaml); both compiled on the
# CPU machine from b6ac8b0 with combine_in_o.patch applied. The fold package's GPU tests and transformers check, then benches alternating
# base / fold, and stage clocks of the 1-row Llama program of each.
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/device.txt" 2>&1
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
L=llama-3.2-1b-sm_90/sm_90
Q=qwen3-8b-sm_90/sm_90
bench() { echo "--- $1 $2 $3"; timeout 200 python3 -m monobuild.cli.main bench .gpu/$1 --context $2 --mode persistent \
  $3 --no-baseline 2>&1 | grep "persistent" | grep -v "^r.t. ctx"; }
{
echo "=== GPU tests (fold)"
MONOBUILD_TEST_PACKAGES=.gpu/fold timeout 200 python3 -m pytest -q -m gpu tests/test_runtime_gpu.py -x \
  -k "matches_reference or agree or replay" 2>&1 | grep -v Warning | tail -3
echo "=== transformers check (fold) at ${SECONDS}s"
timeout 150 python3 tools/transformers_check.py --packages .gpu/fold --models llama-3.2-1b --rows 1,8 --steps 16 \
  2>&1 | grep -v Warning | tail -5
echo "=== bench at ${SECONDS}s"
for v in base fold base fold; do bench $v/$L 1024 "--band r1t1 --band r2t1 --band r4t1 --band r8t1"; done
echo "=== stage clocks at ${SECONDS}s"
for v in base fold; do
  timeout 90 python3 tools/stage_clock.py .gpu/clk-$v/llama-clock-clock/sm_90 --band r1t1 --context 1024 \
    --save "$OUT/clock-$v.pt" 2>&1 | grep -v Warning | head -30
done
echo "=== done at ${SECONDS}s"
} 2>&1 | tee "$OUT/run1.log"
