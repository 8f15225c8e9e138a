#!/usr/bin/env bash
# Issue 20, first GPU run of the routed (mixture-of-experts) layer programs, all compiled on the CPU
# machine into .gpu/F: every GPU test at this tree (the shipped Llama-3.2-1B and Qwen3-8B-FP8
# recipes, the sampling recipe of 2026-12-04-h200-weights, Llama's --stage-clock build, and
# tests/data/qwen3-moe-mixed-sm_90.yaml: four Qwen3-30B-A3B layers, the second dense); the
# transformers check of Qwen3-30B-A3B's layers (eight of them: qwen3-30b-a3b-8l-sm_90.yaml) at 1
# and 8 rows; the bench of the whole Qwen3-30B-A3B (recipes/qwen3-30b-a3b-sm_90.yaml) against its
# routed roofline and torch.compile + a CUDA graph.
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
M=docs/measurements/2026-12-05-h200-moe
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.total --format=csv > "$OUT/device.txt" 2>&1
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
{
echo "=== GPU tests"
MONOBUILD_TEST_PACKAGES=.gpu/F timeout 300 python3 -m pytest -q -m gpu tests/ -p no:cacheprovider 2>&1 \
  | grep -v Warning | grep -E "passed|failed|FAILED|Error|error|skipped" | tail -25
echo "=== transformers check, Qwen3-30B-A3B's layers (8), 1 and 8 rows, at ${SECONDS}s"
timeout 240 python3 tools/transformers_check.py --packages .gpu/F --models qwen3-30b-a3b-8l --rows 1,8 --steps 24 \
  --max-context 2048 --configs $M --json "$OUT/check.json" 2>&1 | grep -v Warning | tail -6
echo "=== bench, Qwen3-30B-A3B, at ${SECONDS}s"
timeout 300 python3 -m monobuild.cli.main bench .gpu/F/qwen3-30b-a3b-sm_90/sm_90 --context 1024 --mode persistent \
  --band r1t1 --band r8t1 --band r1t6 --iters 100 2> "$OUT/bench.err" | tee "$OUT/bench.txt"
tail -3 "$OUT/bench.err"
echo "=== done at ${SECONDS}s"
} 2>&1 | tee "$OUT/run1.log"
