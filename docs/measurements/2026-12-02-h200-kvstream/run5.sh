#!/usr/bin/env bash
# Fifth run: the Hazy Research megakernel (../shared/peers/hazy, built from its source here) and
# the table of record's Llama-3.2-1B package (.gpu/pk/F) in one command; then F against V8, whose
# 2-, 4- and 8-row layer entries stream at block_k 256 without stream_overlap.
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/device.txt" 2>&1
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
L=llama-3.2-1b-sm_90/sm_90
bench() { echo "--- $1 $2 $3"; timeout 150 python3 -m monobuild.cli.main bench .gpu/pk/$1 --context $2 --mode persistent \
  --no-baseline $3 2>&1 | grep "persistent" | grep -v "^r.t. ctx"; }
{
echo "=== peer: Hazy megakernel"
for ctx in 128 1024 8192; do
  (cd .peers/hazy && CTX=$ctx OUT="$OUT/peer-$ctx" HAZY_TOTAL_BUDGET=240 bash run_h200.sh 2>&1 | grep -E "^PEER|kernel alone|calibration" | tail -4)
done
echo "=== bench, the table of record (F), Llama-3.2-1B"
bench F/$L 128,1024,8192,32768 "--band r1t1"
bench F/$L 1024 "--band r2t1 --band r4t1 --band r8t1 --band r1t6"
echo "=== bench, F against V8 (2-8 rows at block_k 256, no overlap)"
for v in V8 F V8; do bench $v/$L 1024 "--band r2t1 --band r4t1 --band r8t1"; bench $v/$L 32768 "--band r8t1"; done
} 2>&1 | tee "$OUT/run5.log"
