#!/usr/bin/env bash
# Run 2: the routed FP8 programs on the streaming executor (E4M3 expert units with each expert's
# scales; the bf16 router in the same ring) and the rows' routing weights in shared memory, on the
# lent GPU. Packages compiled on the CPU machine, ir/ left out: .gpu/N at this change (every package
# of run 1 again, 30B-A3B bf16 and FP8 included), .gpu/OLD the 30B-A3B packages of run 1 (af53948:
# FP8 routed programs on the Triton executor; bf16 routing weights in registers).
#  In order, so that what matters most comes back if the call runs out:
#  1. The GPU tests of routed steps (bf16 and FP8 packages, both modes, 1/3/8 rows and 1 × 6).
#  2. Qwen3-30B-A3B-FP8, context 1024, 1 and 8 rows: N / OLD / N; then bf16 Qwen3-30B-A3B N / OLD.
#  3. tools/transformers_check.py on the FP8 routed package, 1 and 8 rows, both modes.
#  4. N's FP8 step with its torch.compile + graph baseline.
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.total --format=csv > "$OUT/device2.txt" 2>&1
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
bench() { echo "--- $1 $2"; timeout $3 monobuild bench .gpu/$1 --context 1024 --mode persistent $2 2>&1 \
  | grep -E "persistent|copy|band " | grep -v "on NVIDIA"; }
F=qwen3-30b-a3b-fp8-sm_90/sm_90
B=qwen3-30b-a3b-sm_90/sm_90
{
echo "=== GPU tests at ${SECONDS}s"
MONOBUILD_TEST_PACKAGES=.gpu/N timeout 200 python3 -m pytest -q -m gpu tests/test_runtime_gpu.py -k "routed or routing" 2>&1 | tail -6
echo "=== Qwen3-30B-A3B-FP8 at ${SECONDS}s"
bench N/$F "--band r1t1 --band r8t1 --no-baseline" 60
bench OLD/$F "--band r1t1 --band r8t1 --no-baseline" 60
bench N/$F "--band r1t1 --band r8t1 --no-baseline" 60
echo "=== Qwen3-30B-A3B bf16 at ${SECONDS}s"
bench N/$B "--band r1t1 --band r8t1 --no-baseline" 60
bench OLD/$B "--band r1t1 --band r8t1 --no-baseline" 60
echo "=== transformers check at ${SECONDS}s"
timeout 120 python3 tools/transformers_check.py --packages .gpu/N --configs tests/data --models qwen3-moe-mixed-fp8 \
  --rows 1,8 --steps 16 --max-context 2048 --json "$OUT/transformers_check2.json" 2>&1 | tail -6
echo "=== Qwen3-30B-A3B-FP8 with its baseline at ${SECONDS}s"
bench N/$F "--band r1t1 --band r8t1" 200
echo "=== done at ${SECONDS}s"
} 2>&1 | tee "$OUT/run2.log"
