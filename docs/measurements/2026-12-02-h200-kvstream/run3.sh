#!/usr/bin/env bash
# Third run: attention's cached tiles walked with a softmax state a warp (merged once after the
# walk); the 1-row programs' norms staged by each GEMV CTA (norm_stages 0).
#   .gpu/pk/Nall   O128all's bands (block_k 128, stream_overlap 1; rows 1, 2, 4, 8), 1×6 streaming
#                  without overlap, the 1-row entry with norm_stages 0; Nclk its profiling build
#   .gpu/pk/O128all the same with norm_stages 1 at 1 row
#   .gpu/pk/S, SN  Llama's 1-row entry at block_k 256 without overlap; SN with norm_stages 0
#   .gpu/pk/Q, QN  Qwen3-8B's 1-row entry as S and SN
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/device.txt" 2>&1
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
L=llama-3.2-1b-sm_90/sm_90
Q=qwen3-8b-sm_90/sm_90
bench() { echo "--- $1 $2 $3"; timeout 120 python3 -m monobuild.cli.main bench .gpu/pk/$1 --context $2 --mode persistent \
  --no-baseline $3 2>&1 | grep "persistent" | grep -v "^r.t. ctx"; }
{
for band in r1t1 r8t1 r1t6; do
  echo "=== layer 0, Nall $band"
  timeout 90 python3 tools/executor_diff.py .gpu/pk/Nall/$L --band $band 2>&1 | tail -14
done
echo "=== GPU tests (Nall)"
MONOBUILD_TEST_PACKAGES=.gpu/pk/Nall timeout 200 python3 -m pytest -q -m gpu tests/test_runtime_gpu.py -x 2>&1 | tail -4
echo "=== stage clock, Nall"
timeout 100 python3 tools/stage_clock.py .gpu/pk/Nclk/llama-3.2-1b-sm_90-clock/sm_90 --band r1t1 --context 1024 \
  --save "$OUT/clock-r1t1.pt" 2>&1 | tail -16
echo "=== bench, Llama-3.2-1B 1 row"
for v in T Nall O128all SN S T Nall; do bench $v/$L 128,1024,8192,32768 "--band r1t1"; done
echo "=== bench, Llama-3.2-1B 8 rows, 1x6"
for v in T Nall T Nall; do bench $v/$L 1024,32768 "--band r8t1"; bench $v/$L 1024 "--band r1t6"; done
echo "=== bench, Qwen3-8B 1 row"
for v in T Q QN T QN; do bench $v/$Q 1024 "--band r1t1"; done
} 2>&1 | tee "$OUT/run3.log"
