#!/usr/bin/env bash
# Second run, the same machine as run 1 a minute later: run 1's Qwen3-8B 1-row step (4.448 ms)
# measured slower than its 2-row step and 5% above the same code objects' 4.228 ms in
# docs/measurements/2026-12-04-h200-epoch (run 1, base); three more benches of each to see the spread.
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/device.txt" 2>&1
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
Q=R/qwen3-8b-sm_90/sm_90
bench() { echo "--- $1 $2 $3"; timeout 200 python3 -m monobuild.cli.main bench .gpu/$1 --context $2 --mode persistent \
  $3 2>&1 | grep "persistent" | grep -v "^r.t. ctx"; }
{
for k in 1 2 3; do bench $Q 1024 "--band r1t1 --band r2t1 --band r8t1 --no-baseline"; done
echo "=== done at ${SECONDS}s"
} 2>&1 | tee "$OUT/run2.log"
