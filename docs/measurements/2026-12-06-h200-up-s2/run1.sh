#!/usr/bin/env bash
# Run 1 (H200): the GPU tests at the landed kernels (def8197), and three paired measurements.
#  1. Staged step, N (def8197: the staged up takes its rows at launch, one code object for 2/4/8
#     rows) against U (up keeps its rows in its text: dense.py's up with band_args=()), in turn.
#  2. Persistent 1-row step, R (the shipped table) against s2 (qkv's K in two splits:
#     ../2026-12-06-h100-verify/tables.py s2), with the Hazy Research megakernel built from
#     ../../../../shared/peers/hazy (copied into .peers/hazy) between, at contexts 128 and 1024.
#  3. Qwen3-30B-A3B (the streaming routed programs) at 1 and 8 rows, with its torch.compile baseline.
# Packages compiled at def8197 on the CPU machine, ir/ left out: .gpu/tp (every GPU test's package
# and Qwen3-30B-A3B), .gpu/u (U), .gpu/s2 (s2).
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.total --format=csv > "$OUT/device.txt" 2>&1
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
(cd .peers/hazy && HAZY_BUILD_ONLY=1 bash run_h200.sh > "$OUT/peer-build.txt" 2>&1) &
builder=$!
P=llama-3.2-1b-sm_90/sm_90
staged() { echo "--- $1"; timeout 90 monobuild bench .gpu/$1/$P --context 1024 --mode staged --no-baseline 2>&1 \
  | grep -E "staged|copy" | grep -v "on NVIDIA"; }
one_row() { echo "--- $1"; timeout 60 monobuild bench .gpu/$1/$P --context 128,1024 --mode persistent --no-baseline \
  --band r1t1 2>&1 | grep -E "persistent|copy" | grep -v "on NVIDIA"; }
{
echo "=== GPU tests"
MONOBUILD_TEST_PACKAGES=.gpu/tp timeout 300 python3 -m pytest -q -m gpu tests/test_runtime_gpu.py 2>&1 | tail -8
wait $builder; tail -2 "$OUT/peer-build.txt"
echo "=== staged step: N (tp) / U in turn"
for v in tp u tp u; do staged $v; done
for v in tp u; do for b in r2t1 r8t1; do echo "--- $v $b"
  timeout 60 python3 tools/stage_times.py .gpu/$v/$P --band $b 2>&1 | tail -13; done; done
echo "=== persistent 1 row: R (tp) / s2"
for v in tp s2 tp s2; do one_row $v; done
echo "=== peer"
for ctx in 128 1024; do (cd .peers/hazy && CTX=$ctx OUT="$OUT/peer-$ctx" RUN_TIMEOUT=120 HAZY_TOTAL_BUDGET=200 bash run_h200.sh 2>&1 | tail -1); done
echo "=== persistent 1 row again"
for v in tp s2; do one_row $v; done
echo "=== Qwen3-30B-A3B"
timeout 240 monobuild bench .gpu/tp/qwen3-30b-a3b-sm_90/sm_90 --context 1024 --mode persistent --band r1t1 --band r8t1 2>&1 | tail -8
echo "=== done at ${SECONDS}s"
} > "$OUT/run1.log" 2>&1
cat "$OUT/run1.log"
