#!/usr/bin/env bash
# Routed layers on the streaming executor, run 1: the GPU tests of the routed programs with every
# routed persistent program streaming (tests/data/qwen3-moe-mixed-sm_90.yaml under
# sm_90-stream.yaml, the shipped table with streaming entries for the routed 1-, 3- and 8-row
# programs); Qwen3-30B-A3B (../2026-12-05-h200-moe/qwen3-30b-a3b-sm_90.yaml) under the shipped
# table (t0, the Triton executor) and sm_90-stream.yaml (s1), paired on the same weights; the
# 1-row stage clock of s1; the transformers check of eight Qwen3-30B-A3B layers, streaming.
# Packages (on the CPU machine, ir/ left out):
#   monobuild compile recipes/llama-3.2-1b-sm_90.yaml --out .gpu/T
#   monobuild compile tests/data/qwen3-moe-mixed-sm_90.yaml --schedule $S --out .gpu/T
#   monobuild compile $R/qwen3-30b-a3b-sm_90.yaml --out .gpu/M/t0
#   monobuild compile $R/qwen3-30b-a3b-sm_90.yaml --schedule $S --out .gpu/M/s1
#   monobuild compile $R/qwen3-30b-a3b-sm_90.yaml --schedule $S --stage-clock --out .gpu/M/c1
#   monobuild compile $R/qwen3-30b-a3b-8l-sm_90.yaml --schedule $S --out .gpu/M/c
# with S=docs/measurements/2026-12-05-h200-moe-stream/sm_90-stream.yaml, R=docs/measurements/2026-12-05-h200-moe.
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
R=docs/measurements/2026-12-05-h200-moe
P=qwen3-30b-a3b-sm_90/sm_90
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.total --format=csv > "$OUT/device.txt" 2>&1
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
{
echo "=== GPU tests, routed, streaming"
MONOBUILD_TEST_PACKAGES=.gpu/T timeout 200 python3 -m pytest -q -x -s tests/test_runtime_gpu.py -k "routed" 2>&1 \
  | grep -v Warning | tail -15
echo "=== paired, at ${SECONDS}s"
timeout 240 python3 $R/paired.py 1024 3 .gpu/M/t0/$P .gpu/M/s1/$P 2>&1 | grep -v Warning
echo "=== stage clock, s1, at ${SECONDS}s"
timeout 100 python3 tools/stage_clock.py .gpu/M/c1/qwen3-30b-a3b-sm_90-clock/sm_90 --band r1t1 --context 1024 \
  --save "$OUT/clock-r1t1.pt" 2>&1 | grep -v Warning
echo "=== transformers check, streaming, at ${SECONDS}s"
timeout 150 python3 tools/transformers_check.py --packages .gpu/M/c --models qwen3-30b-a3b-8l --rows 1,8 --steps 32 \
  --max-context 2048 --configs $R --json "$OUT/check.json" 2>&1 | grep -v Warning | tail -6
echo "=== done at ${SECONDS}s"
} 2>&1 | tee "$OUT/run1.log"
