#!/usr/bin/env bash
# Third run: why the streaming FP8 GEMV is slower than bf16 (run 2: 5.27 against 4.31 ms at 1 row),
# four variants of Qwen3-8B-FP8 side by side, bf16 beside them. pk2: run 2's (4 compute warps,
# the E4M3 operand loaded two bytes a register group); pk5: the same code, its 1-row program at 8
# compute warps (.gpu/sm_90-fp8-w8.yaml: num_warps 8, block_k 512, norm stages; 8 rows at 8 warps
# keep a stack frame); pk3: both operands loaded four K elements a group (one 32-bit word of
# E4M3), 4 warps; pk4: that code at 8 warps; pk6: pk3 with E4M3 widened to bf16 by bit placement
# and a 2^120 multiply (five instructions a pair) instead of the compiler's conversion through f16.
# pk7: pk6 at 8 warps. First the E4M3 widening of every code against torch, and the FP8 GPU tests of the new code.
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/device.txt" 2>&1
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
F=qwen3-8b-fp8-sm_90/sm_90
bench() { echo "--- $1 $2 $3"; timeout $4 python3 -m monobuild.cli.main bench .gpu/$1 --context $2 --mode persistent \
  $3 > "$OUT/bench.out" 2> "$OUT/bench.err"; echo "rc $?"; grep -v "^r.t. ctx" "$OUT/bench.out" | grep persistent; tail -1 "$OUT/bench.err"; }
tests() { MONOBUILD_TEST_PACKAGES=.gpu/$1 timeout 100 python3 -m pytest -q -m gpu tests/test_runtime_gpu.py -rs -k fp8 2>&1 \
  | grep "passed\|failed\|FAILED\|^E " | head -8; }
{
echo "=== widening"; timeout 60 python3 -m pytest -q -m gpu tests/test_stream_kernels_gpu.py 2>&1 | tail -3
echo "=== FP8 GPU tests, k_width 4 (pk3, pk4, pk6)"; tests pk3; tests pk4; tests pk6
echo "=== bench"
bench pk2/$F 1024 "--band r1t1 --band r8t1 --no-baseline" 70
bench pk3/$F 1024 "--band r1t1 --band r8t1 --no-baseline" 70
bench pk5/$F 1024 "--band r1t1 --no-baseline" 60
bench pk4/$F 1024 "--band r1t1 --no-baseline" 60
bench pk6/$F 1024 "--band r1t1 --band r8t1 --no-baseline" 70
bench pk7/$F 1024 "--band r1t1 --no-baseline" 60
bench pk/qwen3-8b-sm_90/sm_90 1024 "--band r1t1 --no-baseline" 60
} 2>&1 | tee "$OUT/run3.log"
