#!/usr/bin/env bash
# K splits that are any divisor of a GEMV's chunks (not only powers of two): among the shipped
# recipes only Qwen3-0.6B's down changes (4 → 6 splits of its 12 chunks). .gpu/Y: the shipped
# Qwen3-0.6B recipe compiled on the CPU machine with the change; .gpu/X: the same at 14e2fd0
# (docs/measurements/2026-12-04-h200-halves run 3). 1. the transformers check of Y; 2. benches
# alternating X / Y twice, every band at context 1024 and 1 and 8 rows at 32768.
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/device.txt" 2>&1
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
bench() { echo "--- $1 $2 $3"; timeout 120 python3 -m monobuild.cli.main bench .gpu/$1/sm_90 --context $2 --mode persistent \
  $3 --no-baseline 2>&1 | grep "persistent" | grep -v "^r.t. ctx"; }
{
echo "=== transformers check (Y)"
timeout 200 python3 tools/transformers_check.py --packages .gpu/Y --models qwen3-0.6b --rows 1,8 --steps 16 \
  2>&1 | grep -v Warning | tail -7
echo "=== bench at ${SECONDS}s"
for v in X Y X Y; do
  bench $v/qwen3-0.6b-sm_90 1024 "--band r1t1 --band r2t1 --band r4t1 --band r8t1"
  bench $v/qwen3-0.6b-sm_90 32768 "--band r1t1 --band r8t1"
done
echo "=== done at ${SECONDS}s"
} 2>&1 | tee "$OUT/run1.log"
