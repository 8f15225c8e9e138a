#!/usr/bin/env bash
# Routed layers on the streaming executor, run 5: experts_up's units of two tasks at 1 row
# (executor.experts_packed: 384 tiles of 16 gate and 16 up rows on 132 CTAs, where 192 of 32 left
# 60 CTAs a second task). The routed GPU tests at the shipped table (its 1-row routed program
# packs; its 8-row one streams unpacked, its 3-row and 1×6 ones are the Triton executor's); the
# paired builds B (commit 425baf0's programs: no packing) and P (packing), three rounds; the 1-row
# stage clock of P; the transformers check of eight Qwen3-30B-A3B layers under the shipped table.
# Packages (on the CPU machine, ir/ left out):
#   monobuild compile recipes/llama-3.2-1b-sm_90.yaml --out .gpu/T
#   monobuild compile tests/data/qwen3-moe-mixed-sm_90.yaml --out .gpu/T
#   monobuild compile $D/qwen3-30b-a3b-sm_90.yaml --out .gpu/B     (at 425baf0)
#   monobuild compile $D/qwen3-30b-a3b-sm_90.yaml --out .gpu/P
#   monobuild compile $D/qwen3-30b-a3b-sm_90.yaml --stage-clock --out .gpu/K
#   monobuild compile $R/qwen3-30b-a3b-8l-sm_90.yaml --out .gpu/C
# where the builds of T, P, K and C run with pack.patch applied to 78eb79d (packing: measured, not kept).
# with D=docs/measurements/2026-12-05-h200-moe-stream, R=docs/measurements/2026-12-05-h200-moe.
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
R=docs/measurements/2026-12-05-h200-moe
P=qwen3-30b-a3b-sm_90/sm_90
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.total --format=csv > "$OUT/device.txt" 2>&1
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
{
echo "=== GPU tests, routed, shipped table"
MONOBUILD_TEST_PACKAGES=.gpu/T timeout 200 python3 -m pytest -q -x -s tests/test_runtime_gpu.py -k "routed" 2>&1 \
  | grep -v Warning | tail -12
echo "=== paired, at ${SECONDS}s"
timeout 200 python3 $R/paired.py 1024 3 .gpu/B/$P .gpu/P/$P 2>&1 | grep -v Warning
echo "=== stage clock, P, at ${SECONDS}s"
timeout 100 python3 tools/stage_clock.py .gpu/K/qwen3-30b-a3b-sm_90-clock/sm_90 --band r1t1 --context 1024 \
  --save "$OUT/clock-r1t1.pt" 2>&1 | grep -v Warning
echo "=== transformers check, shipped table, at ${SECONDS}s"
timeout 150 python3 tools/transformers_check.py --packages .gpu/C --models qwen3-30b-a3b-8l --rows 1,8 --steps 32 \
  --max-context 2048 --configs $R --json "$OUT/check.json" 2>&1 | grep -v Warning | tail -6
echo "=== done at ${SECONDS}s"
} 2>&1 | tee "$OUT/run5.log"
