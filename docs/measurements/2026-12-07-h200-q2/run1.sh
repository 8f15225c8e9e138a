#!/usr/bin/env bash
# Llama-3.2-1B on the H200: the table of record's bands with qkv's K in two splits (Q, e5c7f85's
# shipped table; the packages of ../2026-12-07-rows-qkv, .gpu/v/q2) against eight (R, .gpu/v/R),
# benched in turn at contexts 128 and 1024, and the Hazy Research megakernel built from
# ../../../../shared/peers/hazy (copied into .peers/hazy) at 128 and 1024 in the same command.
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.total --format=csv > "$OUT/device.txt" 2>&1
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
(cd .peers/hazy && HAZY_BUILD_ONLY=1 bash run_h200.sh > "$OUT/peer-build.txt" 2>&1) &
builder=$!
P=llama-3.2-1b-sm_90/sm_90
bench() { echo "--- $1"; timeout 100 monobuild bench .gpu/v/$1/$P --context 128,1024 --mode persistent --no-baseline \
  --band r1t1 --band r2t1 --band r4t1 --band r8t1 2>&1 | grep -E "^r.t1 |copy"; }
{
for v in R q2 R q2; do bench $v; done
wait $builder; tail -2 "$OUT/peer-build.txt"
echo "=== peer"
for ctx in 128 1024; do (cd .peers/hazy && CTX=$ctx OUT="$OUT/peer-$ctx" RUN_TIMEOUT=120 HAZY_TOTAL_BUDGET=200 bash run_h200.sh 2>&1 | tail -1); done
for v in R q2; do bench $v; done
echo "=== done at ${SECONDS}s"
} > "$OUT/run1.log" 2>&1
cat "$OUT/run1.log"
