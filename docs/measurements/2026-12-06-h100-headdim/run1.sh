#!/usr/bin/env bash
# Head dims other than 64 and 128 (issue 21): the recipes beside this script, compiled on the CPU
# machine into .gpu/hd (llama-hd80: head_dim 80, padded to 128 on the Triton executor; qwen3-hd96:
# 96 with q/k norm, padded to 128; qwen3-hd256: a power of two past the streaming attention's 128,
# so on the Triton executor too, at hidden 2048 where the shipped table streams), checked against
# transformers at 1 and 8 rows, both modes; then the GPU tests.
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
M=docs/measurements/2026-12-06-h100-headdim
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.total --format=csv > "$OUT/device.txt" 2>&1
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
{
timeout 330 python3 tools/transformers_check.py --packages .gpu/hd --configs $M/configs \
  --models llama-hd80,qwen3-hd96,qwen3-hd256 --rows 1,8 --steps 32 --max-context 2048 \
  --json "$OUT/transformers_check.json" 2>&1 | tail -16
echo "=== check done at ${SECONDS}s"
} 2>&1 | tee "$OUT/run1.log"
