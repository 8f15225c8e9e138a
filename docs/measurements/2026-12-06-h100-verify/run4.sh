#!/usr/bin/env bash
# Run 4: Llama-3.2-1B at 1 row on one H100 in one command: the shipped table (R), s2 (qkv's K in
# two splits, tables.py) and the Hazy Research megakernel built from ../../../../shared/peers/hazy
# (copied into .peers/hazy; its run_h200.sh), at contexts 128 and 1024. Packages compiled at
# commit 2d61bce into .gpu/v.
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.total --format=csv > "$OUT/device.txt" 2>&1
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
P=llama-3.2-1b-sm_90
bench() { echo "--- $1"; timeout 60 monobuild bench .gpu/v/$1/$P/sm_90 --context 128,1024 --mode persistent --no-baseline \
  --band r1t1 2>&1 | grep -E "persistent|copy" | grep -v "^r.t. ctx" | grep -v "on NVIDIA"; }
{
echo "=== ours"
for v in R s2 R s2; do bench $v; done
echo "=== peer"
for ctx in 128 1024; do (cd .peers/hazy && CTX=$ctx OUT="$OUT/peer-$ctx" RUN_TIMEOUT=120 HAZY_TOTAL_BUDGET=200 bash run_h200.sh 2>&1 | tail -1); done
echo "=== ours again"
for v in R s2; do bench $v; done
echo "=== done at ${SECONDS}s"
} > "$OUT/run4.log" 2>&1
cat "$OUT/run4.log"
