#!/usr/bin/env bash
# Issue 22: an fp16 checkpoint's package (llama-3.2-1b-fp16-sm_90.yaml here: weights, activations
# and KV cache in fp16; .gpu/n6), against transformers in fp16 and float32 on the same random
# weights (1 and 8 rows, both modes), then its step beside run 5's bf16 figures (persistent,
# context 1024; the Triton executor: the streaming one is written for bf16).
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/device.txt" 2>&1
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
M=docs/measurements/2026-12-04-h200-weights
{
echo "=== transformers check, fp16"
timeout 200 python3 tools/transformers_check.py --packages .gpu/n6 --models llama-3.2-1b-fp16 --configs $M/configs \
  --rows 1,8 --steps 16 --max-context 1024 --json "$OUT/check-fp16.json" 2>&1 | grep -v Warning | tail -8
echo "=== bench, fp16"
timeout 100 python3 -m monobuild.cli.main bench .gpu/n6/llama-3.2-1b-fp16-sm_90/sm_90 --context 1024 --mode persistent \
  --band r1t1 --band r8t1 --band r1t6 --no-baseline 2>&1 | grep -E "^r[18]t[16] "
echo "=== done at ${SECONDS}s"
} 2>&1 | tee "$OUT/run6.log"
