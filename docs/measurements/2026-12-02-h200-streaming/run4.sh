#!/usr/bin/env bash
# Fourth run: the package of record, Llama-3.2-1B with the shipped table, whose 1-row layer
# program is the streaming executor's (block_k 256), checked (GPU tests, transformers) and benched
# against the same recipe's package with the 1-row entry on the Triton executor (T), at the short
# and the long context.
#   .gpu/final/S  this commit's package            .gpu/final/T  the table before the streaming entry
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/device.txt" 2>&1
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
bench() { echo "--- $1"; timeout 120 python3 -m monobuild.cli.main bench .gpu/final/$1/llama-3.2-1b-sm_90/sm_90 \
  --context 1024,32768 --mode persistent --no-baseline --band r1t1 2>&1 | tail -2; }
{
echo "=== GPU tests (S)"
MONOBUILD_TEST_PACKAGES=.gpu/final/S timeout 200 python3 -m pytest -q -m gpu tests/test_runtime_gpu.py 2>&1 | tail -4
echo "=== transformers check (S)"
timeout 150 python3 tools/transformers_check.py --packages .gpu/final/S --models llama-3.2-1b --rows 1,8 --steps 16 \
  2>&1 | grep -v Warning | tail -8
echo "=== bench"
for v in T S T S; do (( SECONDS < 330 )) && bench $v; done
} 2>&1 | tee "$OUT/run4.log"
