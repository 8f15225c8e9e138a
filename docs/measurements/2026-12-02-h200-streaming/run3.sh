#!/usr/bin/env bash
# Third run: the streaming layer program's unit and ring sizes, 1 row, context 1024, against the
# Triton executor's program (T, the shipped table), each package holding band r1t1 only:
#   A  BK 256, as many slots as fit     B  BK 256, 3 slots     C  BK 128, 6 slots     D  BK 512, 3 slots
# (Qwen3-8B's 1-row program keeps a stack frame at 4 compute warps; the compiler derives 8, whose
# units are twice as tall: A and B are then the same program, and D does not fit.)
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
bench() { echo "--- $1 $2"; timeout 90 python3 -m monobuild.cli.main bench .gpu/v/$1/$2-sm_90/sm_90 --context 1024 \
  --mode persistent --no-baseline --band r1t1 2>&1 | tail -1; }
{
for v in T A B C D A T; do bench $v llama-3.2-1b; done
for v in T A C; do (( SECONDS < 300 )) && bench $v qwen3-8b; done
} 2>&1 | tee "$OUT/run3.log"
