#!/usr/bin/env bash
# Second run: where the streaming layer program's time goes (a --stage-clock build's clocks, CUDA
# graph replays), and three variants of its GEMV benched beside the Triton executor's package:
#   .gpu/stream  BK 128, one chain of products a unit     .gpu/s1  BK 256 (32 KB units)
#   .gpu/s2      BK 128, two independent chains a unit    .gpu/triton  the shipped table
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
{
for band in r1t1 r8t1; do
  echo "=== clock $band"
  timeout 90 python3 tools/stage_clock.py .gpu/clock/llama-3.2-1b-sm_90-clock/sm_90 --band $band --context 1024 \
    --save "$OUT/clock-$band.pt" 2>&1 | tail -30
done
for pk in stream s1 s2 triton stream s2; do
  echo "--- $pk"
  timeout 100 python3 -m monobuild.cli.main bench .gpu/$pk/llama-3.2-1b-sm_90/sm_90 --context 1024 --mode persistent \
    --no-baseline --band r1t1 --band r8t1 2>&1 | tail -2
done
} 2>&1 | tee "$OUT/run2.log"
