#!/usr/bin/env bash
# First run of the KV tiles streamed through the ring and of stream_overlap (the next layer's
# launch beside this one): layer 0 against the staged programs, the GPU tests on the package
# whose every band streams with overlap, then 1-row benches of each variant beside the shipped
# table's package.
#   .gpu/pk/T        the shipped table (Triton executor)
#   .gpu/pk/S, O     Llama's 1-row layer entry {streaming: 1, block_k: 256, max_split_qkv: 8,
#                    weight_stages: 2, ctas_per_sm: 1, norm_stages: 1}; O adds stream_overlap: 1
#   .gpu/pk/S128all, O128all  every Llama band's layer entry so, with block_k 128
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/device.txt" 2>&1
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
L=llama-3.2-1b-sm_90/sm_90
bench() { echo "--- $1 $2"; timeout 120 python3 -m monobuild.cli.main bench .gpu/pk/$1/$L --context $2 --mode persistent \
  --no-baseline --band r1t1 2>&1 | tail -$(( $(tr -cd , <<< "$2" | wc -c) + 2 )); }
{
for band in r1t1 r8t1; do
  echo "=== layer 0, O128all $band"
  timeout 90 python3 tools/executor_diff.py .gpu/pk/O128all/$L --band $band 2>&1 | tail -16
done
echo "=== GPU tests (O128all)"
MONOBUILD_TEST_PACKAGES=.gpu/pk/O128all timeout 200 python3 -m pytest -q -m gpu tests/test_runtime_gpu.py -x 2>&1 | tail -15
echo "=== bench, 1 row"
for v in T O128all S128all O S T O128all; do (( SECONDS < 520 )) && bench $v 128,1024,8192,32768; done
} 2>&1 | tee "$OUT/run1.log"
