#!/usr/bin/env bash
# Routed layers on the streaming executor, run 3: run 2's shipped-table build (t0) against
# tables.py's streaming variants s2 (no norm stages), s4 (max_split_qkv 4, run 2's fastest at 2,
# 4 and 8 rows), s5 (s4 without norm stages), s6 (max_split_qkv 2) and s7 (s6 without norm
# stages), paired on the same weights in three rounds. Packages as run2.sh builds them.
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
R=docs/measurements/2026-12-05-h200-moe
P=qwen3-30b-a3b-sm_90/sm_90
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.total --format=csv > "$OUT/device.txt" 2>&1
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
{
echo "=== paired"
timeout 500 python3 $R/paired.py 1024 3 .gpu/N/t0/$P .gpu/N/s2/$P .gpu/N/s4/$P .gpu/N/s5/$P .gpu/N/s6/$P .gpu/N/s7/$P \
  2>&1 | grep -v Warning
echo "=== done at ${SECONDS}s"
} 2>&1 | tee "$OUT/run3.log"
