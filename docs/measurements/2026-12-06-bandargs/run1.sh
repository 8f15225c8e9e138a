#!/usr/bin/env bash
# Run 1: every GPU test with packages of the band-argument build (staged programs that take their
# band's rows, KV splits and grid at launch), then Llama-3.2-1B's staged step at every band of the
# default recipe, benched in turn: O (the parent commit's package, run by the parent commit's own
# runtime, installed apart) and N (this build).
# Packages (ir/ left out; the runtime reads none of it): .gpu/tp the GPU tests' (recipes/llama-3.2-1b-sm_90.yaml,
# recipes/qwen3-8b-fp8-sm_90.yaml, tests/data/qwen3-moe-mixed-sm_90.yaml, tests/data/qwen3-235b-layers-sm_90.yaml; N is
# its Llama package); .gpu/old the default recipe compiled at the parent commit; .gpu/head the parent's source.
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.total --format=csv > "$OUT/device.txt" 2>&1
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
python3 -m pip install -q --no-deps --no-build-isolation --target /tmp/old .gpu/head >> "$OUT/install.log" 2>&1 \
  || { cat "$OUT/install.log"; exit 1; }
P=llama-3.2-1b-sm_90/sm_90
bench() {
  echo "--- $1"
  if [ "$1" = O ]; then
    PYTHONPATH=/tmp/old timeout 90 python3 -m monobuild.cli.main bench .gpu/old/$P --context 1024 --mode staged --no-baseline
  else
    timeout 90 python3 -m monobuild.cli.main bench .gpu/tp/$P --context 1024 --mode staged --no-baseline
  fi 2>&1 | grep -E "staged|copy" | grep -v "on NVIDIA"
}
{
echo "=== GPU tests"
MONOBUILD_TEST_PACKAGES=.gpu/tp timeout 240 python3 -m pytest -q -m gpu tests/test_runtime_gpu.py 2>&1 | tail -6
echo "=== staged step, O / N in turn"
for v in O N O N; do bench $v; done
echo "=== done at ${SECONDS}s"
} > "$OUT/run1.log" 2>&1
cat "$OUT/run1.log"
