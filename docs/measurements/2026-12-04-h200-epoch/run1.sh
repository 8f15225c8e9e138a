#!/usr/bin/env bash
# The epoch read at the start of the first signalling op instead of between its body and its
# signal. .gpu/base: Llama-3.2-1B and Qwen3-8B compiled at b6ac8b0; .gpu/new: the same recipes
# with the epoch read moved (the shipped table, both compiled on the CPU machine). The new
# packages' GPU tests and transformers check, benches alternating base / new, and stage clocks of
# the 1-row Llama program (docs/measurements/2026-12-04-h200-fold/llama-clock.yaml) of each.
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
echo "=== GPU tests (new)"
MONOBUILD_TEST_PACKAGES=.gpu/new timeout 200 python3 -m pytest -q -m gpu tests/test_runtime_gpu.py -x 2>&1 \
  | grep -v Warning | tail -3
echo "=== transformers check (new) at ${SECONDS}s"
timeout 200 python3 tools/transformers_check.py --packages .gpu/new --models llama-3.2-1b,qwen3-8b --rows 1,8 \
  --steps 16 2>&1 | grep -v Warning | tail -10
echo "=== bench at ${SECONDS}s"
for v in base new base new; do bench $v/$L 1024 "--band r1t1 --band r2t1 --band r4t1 --band r8t1 --band r1t6"; done
for v in base new; do bench $v/$L 128,8192 "--band r1t1"; done
for v in base new base new; do bench $v/$Q 1024 "--band r1t1 --band r8t1"; done
echo "=== stage clocks at ${SECONDS}s"
for v in base new; do
  timeout 90 python3 tools/stage_clock.py .gpu/clk-$v/llama-clock-clock/sm_90 --band r1t1 --context 1024 \
    --save "$OUT/clock-$v.pt" 2>&1 | grep -v Warning | head -14
done
echo "=== done at ${SECONDS}s"
} 2>&1 | tee "$OUT/run1.log"
