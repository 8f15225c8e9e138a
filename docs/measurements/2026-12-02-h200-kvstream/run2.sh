#!/usr/bin/env bash
# Second run: the loader loads a tile's block numbers one tile ahead. Stage clocks of the
# overlapping program (block_k 128, every band), 1-row benches at 1024 and 32768, the other
# bands and Qwen3-8B beside the shipped table's packages, and the transformers check.
#   .gpu/pk/Oclk  O128all's profiling build (--stage-clock)
#   .gpu/pk/Q, QO Qwen3-8B's 1-row layer entry as S and as O128all's (block_k 128, stream_overlap 1)
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/device.txt" 2>&1
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
L=llama-3.2-1b-sm_90/sm_90
Q=qwen3-8b-sm_90/sm_90
bench() { echo "--- $1 $2 $3"; timeout 120 python3 -m monobuild.cli.main bench .gpu/pk/$1 --context $2 --mode persistent \
  --no-baseline $3 2>&1 | grep -v "^band" | grep "persistent"; }
{
echo "=== stage clock, O128all"
for band in r1t1 r8t1; do
  timeout 100 python3 tools/stage_clock.py .gpu/pk/Oclk/llama-3.2-1b-sm_90-clock/sm_90 --band $band --context 1024 \
    --save "$OUT/clock-$band.pt" 2>&1 | tail -30
done
echo "=== bench, Llama-3.2-1B 1 row"
for v in T O128all S128all O S T O128all; do bench $v/$L 1024,32768 "--band r1t1"; done
echo "=== bench, Llama-3.2-1B 8 rows, 1x6"
for v in T O128all S128all T O128all; do bench $v/$L 1024,32768 "--band r8t1"; bench $v/$L 1024 "--band r1t6"; done
echo "=== bench, Qwen3-8B 1 row"
for v in T Q QO T QO; do bench $v/$Q 1024 "--band r1t1"; done
echo "=== transformers check (O128all)"
(( SECONDS < 420 )) && timeout 150 python3 tools/transformers_check.py --packages .gpu/pk/O128all --models llama-3.2-1b \
  --rows 1,8 --steps 16 2>&1 | grep -v Warning | tail -8
} 2>&1 | tee "$OUT/run2.log"
