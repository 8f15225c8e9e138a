#!/usr/bin/env bash
# The streaming executor's epoch read as a per-thread relaxed load (no broadcast, no barrier)
# issued once the first signalling op's wait returns, instead of a relaxed atomic (broadcast to
# the CTA) just before that op's signal. .gpu/E: Llama-3.2-1B and Qwen3-8B compiled with it;
# .gpu/F: the same recipes at 14e2fd0; .gpu/CE, .gpu/CH: the 1-row Llama clock recipe of
# ../2026-12-04-h200-fold, each way. 1. E's Llama step against the reference; 2. benches
# alternating F / E twice; 3. stage clocks of both.
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/device.txt" 2>&1
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
bench() { echo "--- $1 $2"; timeout 60 python3 -m monobuild.cli.main bench .gpu/$1/sm_90 --context 1024 --mode persistent \
  $2 --no-baseline 2>&1 | grep "persistent" | grep -v "^r.t. ctx"; }
{
echo "=== GPU tests (E)"
MONOBUILD_TEST_PACKAGES=.gpu/E timeout 60 python3 -m pytest -q -m gpu tests/test_runtime_gpu.py -k "matches_reference and not fp8 or replay" \
  2>&1 | grep -v Warning | tail -2
echo "=== bench at ${SECONDS}s"
for v in F E F E; do
  bench $v/llama-3.2-1b-sm_90 "--band r1t1 --band r8t1"
  bench $v/qwen3-8b-sm_90 "--band r1t1"
done
echo "=== stage clocks at ${SECONDS}s"
for v in CH CE; do
  timeout 40 python3 tools/stage_clock.py .gpu/$v/llama-clock-clock/sm_90 --band r1t1 --context 1024 2>&1 | grep -v Warning | head -10
done
echo "=== done at ${SECONDS}s"
} 2>&1 | tee "$OUT/run2.log"
