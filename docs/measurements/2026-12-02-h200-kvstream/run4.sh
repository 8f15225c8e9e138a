#!/usr/bin/env bash
# Fourth run: the candidate table (.gpu/pk/C: streaming entries for Llama-3.2-1B's and Qwen3-8B's
# 1-8-row layer programs; Llama's with stream_overlap and block_k 128, Qwen3-8B's block_k 256;
# the 1-row ones with norm_stages 0) against the table of commit bb89a31 (.gpu/pk/T), after
# attention's self-token step moved out of the per-warp walk: the GPU tests, the transformers
# check, stage clocks, and benches of every band.
#   .gpu/pk/SN  Llama's 1-row entry at block_k 256 without overlap (norm_stages 0)
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/device.txt" 2>&1
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
L=llama-3.2-1b-sm_90/sm_90
Q=qwen3-8b-sm_90/sm_90
bench() { echo "--- $1 $2 $3"; timeout 150 python3 -m monobuild.cli.main bench .gpu/pk/$1 --context $2 --mode persistent \
  --no-baseline $3 2>&1 | grep "persistent" | grep -v "^r.t. ctx"; }
{
echo "=== GPU tests (C)"
MONOBUILD_TEST_PACKAGES=.gpu/pk/C timeout 200 python3 -m pytest -q -m gpu tests/test_runtime_gpu.py -x 2>&1 | tail -3
echo "=== transformers check (C)"
timeout 200 python3 tools/transformers_check.py --packages .gpu/pk/C --models llama-3.2-1b,qwen3-8b --rows 1,8 \
  --steps 16 2>&1 | grep -v Warning | tail -10
echo "=== stage clock (C)"
timeout 100 python3 tools/stage_clock.py .gpu/pk/Cclk/llama-3.2-1b-sm_90-clock/sm_90 --band r1t1 --context 1024 \
  --save "$OUT/clock-r1t1.pt" 2>&1 | tail -12
echo "=== bench, Llama-3.2-1B 1 row"
for v in T C SN T C; do bench $v/$L 128,1024,8192,32768 "--band r1t1"; done
echo "=== bench, Llama-3.2-1B other bands"
for v in T C T C; do bench $v/$L 1024 "--band r2t1 --band r4t1 --band r8t1"; done
for v in T C; do bench $v/$L 32768 "--band r8t1"; done
echo "=== bench, Qwen3-8B"
for v in T C T C; do bench $v/$Q 1024 "--band r1t1 --band r2t1 --band r4t1 --band r8t1"; done
} 2>&1 | tee "$OUT/run4.log"
