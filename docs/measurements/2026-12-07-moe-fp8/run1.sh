#!/usr/bin/env bash
# Run 1: FP8 checkpoints of routed models (af53948), on the lent GPU.
#  1. The GPU tests of routed steps: the FP8 routed package (tests/data/qwen3-moe-mixed-fp8-sm_90.yaml)
#     and the bf16 one, both modes, 1/3/8 rows and 1 × 6, against the float64 reference.
#  2. Qwen3-30B-A3B-FP8 (qwen3-30b-a3b-fp8-sm_90.yaml beside this script), context 1024, 1 and 8
#     rows: A (the shipped table: its routed entries stream bf16 only, so the FP8 programs take
#     the Triton executor with those entries' 1 CTA an SM and 2 chunks in flight) with its
#     torch.compile + graph baseline (experts dequantized in the graph), against B (table-b.yaml:
#     2 CTAs an SM, 3 chunks, norm stages), A again; then bf16 Qwen3-30B-A3B (the shipped recipe).
#  3. tools/transformers_check.py on the FP8 routed package, 1 and 8 rows, both modes.
# Packages compiled at af53948 on the CPU machine, ir/ left out: .gpu/F (tests, A, bf16), .gpu/FB (B).
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.total --format=csv > "$OUT/device.txt" 2>&1
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
A=.gpu/F/qwen3-30b-a3b-fp8-sm_90/sm_90
B=.gpu/FB/qwen3-30b-a3b-fp8-sm_90/sm_90
bench() { echo "--- $1 $2"; timeout $3 monobuild bench $1 --context 1024 --mode persistent --band r1t1 --band r8t1 $2 2>&1 \
  | grep -E "persistent|copy|band " | grep -v "on NVIDIA"; }
{
echo "=== GPU tests at ${SECONDS}s"
MONOBUILD_TEST_PACKAGES=.gpu/F timeout 200 python3 -m pytest -q -m gpu tests/test_runtime_gpu.py -k "routed or routing" 2>&1 | tail -6
echo "=== Qwen3-30B-A3B-FP8 at ${SECONDS}s"
bench $A "" 200
bench $B --no-baseline 60
bench $A --no-baseline 60
bench $B --no-baseline 60
echo "=== Qwen3-30B-A3B bf16 at ${SECONDS}s"
bench .gpu/F/qwen3-30b-a3b-sm_90/sm_90 --no-baseline 60
echo "=== transformers check at ${SECONDS}s"
timeout 150 python3 tools/transformers_check.py --packages .gpu/F --configs tests/data --models qwen3-moe-mixed-fp8 \
  --rows 1,8 --steps 16 --max-context 2048 --json "$OUT/transformers_check.json" 2>&1 | tail -8
echo "=== done at ${SECONDS}s"
} 2>&1 | tee "$OUT/run1.log"
