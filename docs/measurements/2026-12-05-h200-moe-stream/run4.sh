#!/usr/bin/env bash
# Routed layers on the streaming executor, run 4: the GPU tests of the routed programs under
# tables.py's s7 (max_split_qkv 2, no norm stages: run 3's fastest at 1 and 2 rows); the paired
# builds t0, s6 and s7 (run 3's fastest);
# the 1-row stage clock of s7; the transformers check of eight Qwen3-30B-A3B layers under s7.
# (s8 and s9 compile to s7's and s6's programs, cache keys and all: at max_split_qkv 2 the planner
# already leaves qkv's K whole, so they are not timed.)
# Packages (ir/ left out): run2.sh's, and
#   monobuild compile tests/data/qwen3-moe-mixed-sm_90.yaml --schedule /tmp/ms/sm_90-s7.yaml --out .gpu/T
#   (with run 1's .gpu/T/llama-3.2-1b-sm_90)
#   monobuild compile $R/qwen3-30b-a3b-8l-sm_90.yaml --schedule /tmp/ms/sm_90-s7.yaml --out .gpu/C
#   monobuild compile $D/qwen3-30b-a3b-sm_90.yaml --schedule /tmp/ms/sm_90-s7.yaml --stage-clock --out .gpu/K
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
R=docs/measurements/2026-12-05-h200-moe
P=qwen3-30b-a3b-sm_90/sm_90
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.total --format=csv > "$OUT/device.txt" 2>&1
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
{
echo "=== GPU tests, routed, s7"
MONOBUILD_TEST_PACKAGES=.gpu/T timeout 200 python3 -m pytest -q -x -s tests/test_runtime_gpu.py -k "routed" 2>&1 \
  | grep -v Warning | tail -12
echo "=== paired, at ${SECONDS}s"
timeout 300 python3 $R/paired.py 1024 3 .gpu/N/t0/$P .gpu/N/s6/$P .gpu/N/s7/$P 2>&1 \
  | grep -v Warning
echo "=== stage clock, s7, at ${SECONDS}s"
timeout 100 python3 tools/stage_clock.py .gpu/K/qwen3-30b-a3b-sm_90-clock/sm_90 --band r1t1 --context 1024 \
  --save "$OUT/clock-r1t1.pt" 2>&1 | grep -v Warning
echo "=== transformers check, s7, at ${SECONDS}s"
timeout 150 python3 tools/transformers_check.py --packages .gpu/C --models qwen3-30b-a3b-8l --rows 1,8 --steps 32 \
  --max-context 2048 --configs $R --json "$OUT/check.json" 2>&1 | grep -v Warning | tail -6
echo "=== done at ${SECONDS}s"
} 2>&1 | tee "$OUT/run4.log"
