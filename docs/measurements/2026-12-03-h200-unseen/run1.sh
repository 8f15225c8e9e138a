#!/usr/bin/env bash
# Issue 21's unseen models, each compiled for sm_90 on the CPU machine (bands 1 and 8, both modes,
# max_context 8192; the recipes of .gpu/unseen/ are ../2026-12-03-h200-window's Mistral recipe
# with another config of tests/data/configs): the transformers check at 1 and 8 rows. Qwen3-1.7B (16/8 heads,
# the one once refused after five minutes of compiling), Qwen3-4B, Qwen2.5-3B, Llama-3.2-3B (a GQA
# group of 3), Qwen2.5-7B (a group of 7).
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/device.txt" 2>&1
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
{
timeout 500 python3 tools/transformers_check.py --packages .gpu/pk3 --configs .gpu/unseen \
  --models qwen3-1.7b,qwen3-4b,qwen2.5-3b,llama-3.2-3b,qwen2.5-7b --rows 1,8 --steps 32 --max-context 2048 \
  --json "$OUT/transformers_check.json" 2>&1 | tail -24
echo "=== done at ${SECONDS}s"
} 2>&1 | tee "$OUT/run1.log"
