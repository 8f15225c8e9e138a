#!/usr/bin/env bash
# Issue 20, run 4: the shipped table's routed entries (weight_stages 4, from run 3) against run 2's
# shipped-table build (.gpu/R/t0), paired on the same weights in three rounds; the transformers
# check of Qwen3-30B-A3B's eight layers (.gpu/S/c) with the router logits taken by hooks on the
# routers (output_router_logits fails in transformers 5.17 on a padded decode batch: run 3).
# Packages (on the CPU machine, ir/ left out): run2.sh's .gpu/R/t0, and
#   monobuild compile $M/qwen3-30b-a3b-sm_90.yaml --out .gpu/S/n0
#   monobuild compile $M/qwen3-30b-a3b-8l-sm_90.yaml --out .gpu/S/c
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
M=docs/measurements/2026-12-05-h200-moe
P=qwen3-30b-a3b-sm_90/sm_90
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.total --format=csv > "$OUT/device.txt" 2>&1
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
{
echo "=== transformers check, Qwen3-30B-A3B's layers (8), 1 and 8 rows"
timeout 200 python3 tools/transformers_check.py --packages .gpu/S/c --models qwen3-30b-a3b-8l --rows 1,8 --steps 32 \
  --max-context 2048 --configs $M --json "$OUT/check.json" 2>&1 | grep -v Warning | tail -8
echo "=== paired, at ${SECONDS}s"
timeout 200 python3 $M/paired.py 1024 3 .gpu/R/t0/$P .gpu/S/n0/$P 2>&1 | grep -v Warning
echo "=== done at ${SECONDS}s"
} 2>&1 | tee "$OUT/run4.log"
