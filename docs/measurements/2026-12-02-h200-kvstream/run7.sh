#!/usr/bin/env bash
# Seventh run: the bands the table of record leaves on the Triton executor. Llama-3.2-1B's 1×6
# program streaming at block_k 128 (.gpu/pk/X6b; at 256 it keeps a stack frame, refused) and
# Qwen3-0.6B's 1-8-row and 1×6 programs streaming at block_k 256, the 1-row one with norm_stages
# 0 (.gpu/pk/Q06), against the packages of record (.gpu/pk/R, compiled at 7cba087); the
# transformers check of Q06.
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/device.txt" 2>&1
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
L=llama-3.2-1b-sm_90/sm_90
S=qwen3-0.6b-sm_90/sm_90
bench() { echo "--- $1 $2 $3"; timeout 150 python3 -m monobuild.cli.main bench .gpu/pk/$1 --context $2 --mode persistent \
  --no-baseline $3 2>&1 | grep "persistent" | grep -v "^r.t. ctx"; }
{
echo "=== transformers check (Q06)"
timeout 150 python3 tools/transformers_check.py --packages .gpu/pk/Q06 --models qwen3-0.6b --rows 1,8 --steps 16 \
  2>&1 | grep -v Warning | tail -6
echo "=== bench"
for v in R X6b R X6b; do bench $v/$L 1024 "--band r1t6"; done
for v in R Q06 R Q06; do bench $v/$S 1024 "--band r1t1 --band r2t1 --band r4t1 --band r8t1 --band r1t6"; done
for v in R Q06; do bench $v/$S 32768 "--band r1t1 --band r8t1"; done
} 2>&1 | tee "$OUT/run7.log"
