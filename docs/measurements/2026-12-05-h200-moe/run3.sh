#!/usr/bin/env bash
# Issue 20, run 3: schedule tables for the routed 1- and 8-row programs, timed on the same weights
# in rounds (paired.py): t0 the shipped table (.gpu/R/t0, run 2's) against the tables
# sweep_tables.py writes (.gpu/S/vN), and g0: the shipped table with experts_up keeping a
# [rows, slots] weight table across its task loop instead of [rows, experts]; p1, p2, p3: g0's
# code with the L2 prefetch (the schedule's l2_prefetch: 64 KB, 128 KB, 64 KB with block_n 8,
# sweep_tables.py); the 1-row stage clock of p1's --stage-clock build; the transformers check of
# Qwen3-30B-A3B's eight layers, built with p1's code and table (.gpu/S/c), under
# tools/transformers_check.py's per-step routing comparison.
# Packages (on the CPU machine, ir/ left out): run2.sh's, and
#   python $M/sweep_tables.py /tmp/sweep
#   monobuild compile $M/qwen3-30b-a3b-sm_90.yaml --schedule /tmp/sweep/sm_90-vN.yaml --out .gpu/S/vN
#   monobuild compile $M/qwen3-30b-a3b-sm_90.yaml --schedule /tmp/sweep/sm_90-p1.yaml --stage-clock --out .gpu/S/p1
#   monobuild compile $M/qwen3-30b-a3b-8l-sm_90.yaml --schedule /tmp/sweep/sm_90-p1.yaml --out .gpu/S/c
#   monobuild compile $M/qwen3-30b-a3b-sm_90.yaml --out .gpu/S/g0   (compiled before 911ad46 added the L2 prefetch; its programs, l2_prefetch 0)
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
M=docs/measurements/2026-12-05-h200-moe
P=qwen3-30b-a3b-sm_90/sm_90
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.total --format=csv > "$OUT/device.txt" 2>&1
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
{
echo "=== paired tables"
timeout 360 python3 $M/paired.py 1024 2 .gpu/R/t0/$P .gpu/S/v4/$P .gpu/S/v8/$P .gpu/S/v9/$P .gpu/S/v10/$P \
  .gpu/S/v11/$P .gpu/S/v12/$P .gpu/S/v13/$P .gpu/S/g0/$P \
  .gpu/S/p1/$P .gpu/S/p2/$P .gpu/S/p3/$P 2>&1 | grep -v Warning
echo "=== stage clock, p1, at ${SECONDS}s"
timeout 100 python3 tools/stage_clock.py .gpu/S/p1/qwen3-30b-a3b-sm_90-clock/sm_90 --band r1t1 --context 1024 \
  --save "$OUT/clock-p1-r1t1.pt" 2>&1 | grep -v Warning
echo "=== transformers check, Qwen3-30B-A3B's layers (8), 1 and 8 rows, at ${SECONDS}s"
timeout 150 python3 tools/transformers_check.py --packages .gpu/S/c --models qwen3-30b-a3b-8l --rows 1,8 --steps 32 \
  --max-context 2048 --configs $M --json "$OUT/check.json" 2>&1 | grep -v Warning | tail -6
echo "=== done at ${SECONDS}s"
} 2>&1 | tee "$OUT/run3.log"
