#!/usr/bin/env bash
# Llama-3.2-1B's part of the table of record (prepared 2026-12-06, not run: no H200 could be started):
# the default recipe compiled on the CPU machine at the commit of record (.gpu/R, ir/ left out); every band's bench
# with its PyTorch baseline, the context sweep, and the Hazy megakernel (../shared/peers/hazy,
# built here from its source while the first bench runs) at contexts 128 and 1024, in one command.
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/device.txt" 2>&1
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
python3 -c "import torch, triton; print(torch.__version__, triton.__version__)" >> "$OUT/device.txt"
(cd .peers/hazy && HAZY_BUILD_ONLY=1 bash run_h200.sh > "$OUT/peer-build.txt" 2>&1) &
builder=$!
L=R/llama-3.2-1b-sm_90/sm_90
bench() { echo "--- $1 $2 $3"; timeout 300 python3 -m monobuild.cli.main bench .gpu/$1 --context $2 --mode persistent \
  $3 2>&1 | grep "persistent" | grep -v "^r.t. ctx"; }
{
echo "=== bench at ${SECONDS}s"
bench $L 1024 "--band r1t1 --band r2t1 --band r4t1 --band r8t1 --band r1t6"
wait $builder; tail -1 "$OUT/peer-build.txt"
bench $L 128,256,512,2048,8192,32768 "--band r1t1 --no-baseline"
bench $L 32768 "--band r8t1 --no-baseline"
echo "--- $L 1024 staged"; timeout 120 python3 -m monobuild.cli.main bench .gpu/$L --context 1024 --mode staged \
  --no-baseline 2>&1 | grep "staged" | grep -v "^r.t. ctx"
echo "=== peer: Hazy megakernel at ${SECONDS}s"
for ctx in 128 1024; do
  (cd .peers/hazy && CTX=$ctx OUT="$OUT/peer-$ctx" HAZY_TOTAL_BUDGET=200 bash run_h200.sh 2>&1 | grep -E "^PEER|kernel alone|calibration" | tail -4)
done
echo "=== ours again, same command, at ${SECONDS}s"
bench $L 128,1024 "--band r1t1 --no-baseline"
echo "=== done at ${SECONDS}s"
} 2>&1 | tee "$OUT/run1.log"
