#!/usr/bin/env bash
# Run 1 (an H200 asked for; it ran on an H100): every GPU test at cc22e4a (the flat loader walk), then Llama-3.2-1B's
# 1-row step at contexts 128 and 1024, benched in turn: R (3b334f2, the loop of chunks inside a
# loop of tasks), S (cc22e4a, the shipped table), s2 (cc22e4a, the 1-row entry with
# max_split_qkv 2: ../2026-12-06-h100-verify/tables.py s2), with the Hazy Research megakernel
# built from ../../../../shared/peers/hazy (copied into .peers/hazy) in the middle.
# Packages: .gpu/rec/<variant> from ../2026-12-06-h100-l2/llama-3.2-1b-sm_90.yaml (persistent),
# .gpu/tp the GPU tests' packages (recipes/llama-3.2-1b-sm_90.yaml, recipes/qwen3-8b-fp8-sm_90.yaml,
# tests/data/qwen3-moe-mixed-sm_90.yaml, tests/data/qwen3-235b-layers-sm_90.yaml).
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.total --format=csv > "$OUT/device.txt" 2>&1
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
P=llama-3.2-1b-sm_90
bench() { echo "--- $1"; timeout 60 monobuild bench .gpu/rec/$1/$P/sm_90 --context 128,1024 --mode persistent --no-baseline \
  --band r1t1 2>&1 | grep -E "persistent|copy" | grep -v "ctx" | grep -v "on NVIDIA"; }
{
echo "=== GPU tests"
MONOBUILD_TEST_PACKAGES=.gpu/tp timeout 170 python3 -m pytest -q -m gpu tests/test_runtime_gpu.py 2>&1 | tail -6
echo "=== ours"
for v in R S s2 S R s2; do bench $v; done
echo "=== peer (on an H200 only: on an H100 it was measured in ../2026-12-06-h100-verify run 4)"
grep -q H200 "$OUT/device.txt" && for ctx in 128 1024; do (cd .peers/hazy && CTX=$ctx OUT="$OUT/peer-$ctx" RUN_TIMEOUT=90 HAZY_TOTAL_BUDGET=150 bash run_h200.sh 2>&1 | tail -1); done
echo "=== done at ${SECONDS}s"
} > "$OUT/run1.log" 2>&1
cat "$OUT/run1.log"
