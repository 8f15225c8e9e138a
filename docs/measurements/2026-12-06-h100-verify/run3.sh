#!/usr/bin/env bash
# Run 3: the loader gated at attention (gate.patch, an experiment applied to compiler/kernels/stream/
# driver.py for the build only): it streams o's and up's units only once the compute warps have
# passed attention's wait, so the edge into attention is crossed with the rings quiet. G (the
# shipped table, gated) against R (run 1's packages), compiled at commit 596cdcb + gate.patch.
# Benches in turn at contexts 128 and 1024, G's stage clock, G's 1-row GPU test.
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.total --format=csv > "$OUT/device.txt" 2>&1
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
P=llama-3.2-1b-sm_90
bench() { echo "--- $1"; timeout 100 monobuild bench .gpu/v/$1/$P/sm_90 --context 128,1024 --mode persistent --no-baseline \
  --band r1t1 2>&1 | grep -E "persistent|copy" | grep -v "^r.t. ctx" | grep -v "on NVIDIA"; }
{
echo "=== bench"
for v in R G R G R G; do bench $v; done
echo "=== stage clock"
timeout 60 python3 tools/stage_clock.py .gpu/v/G/$P-clock/sm_90 --band r1t1 --context 1024 --save "$OUT/clock-G-r1t1.pt" \
  2>&1 | grep -v Warning | tail -12
echo "=== GPU test"
MONOBUILD_TEST_PACKAGES=.gpu/v/G timeout 120 python3 -m pytest -q -p no:cacheprovider tests/test_runtime_gpu.py \
  -k "test_step_matches_reference and persistent and 1-1" 2>&1 | tail -1
echo "=== done at ${SECONDS}s"
} > "$OUT/run3.log" 2>&1
cat "$OUT/run3.log"
