#!/usr/bin/env bash
# The op-built programs on the H200: correctness (GPU tests, transformers check, a debug build's
# hang report) and the bench against the hand-written kernel they replace, in one command.
#   .gpu/new      packages compiled from this commit: llama-3.2-1b-sm_90 (+ -clock, -debug), qwen3-8b-sm_90
#   .gpu/old      the source tree of cdf3190 (the hand-written layer kernel), for its runtime
#   .gpu/oldpkgs  its packages (code objects + manifest)
# Bench runs alternate old, new, old, new, so drift shows as a spread.
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/device.txt" 2>&1
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
mkdir -p /tmp/oldpkg/monobuild && cp -r .gpu/old/{compiler,runtime,cli,bench,recipes,schedules} /tmp/oldpkg/monobuild/ \
  && cp .gpu/old/monobuild/__init__.py /tmp/oldpkg/monobuild/
bench() {  # bench <old|new> <recipe> <bands...>
  local which=$1 recipe=$2; shift 2
  local bands=""; for b in "$@"; do bands="$bands --band $b"; done
  if [ "$which" = old ]; then
    PYTHONPATH=/tmp/oldpkg timeout 200 python3 -m monobuild.cli.main bench ".gpu/oldpkgs/$recipe/sm_90" --context 1024 \
      --mode persistent --no-baseline $bands
  else
    timeout 200 python3 -m monobuild.cli.main bench ".gpu/new/$recipe/sm_90" --context 1024 --mode persistent \
      --no-baseline $bands
  fi
}
{
  echo "=== GPU tests (new packages)"
  MONOBUILD_TEST_PACKAGES=.gpu/new timeout 300 python3 -m pytest -q -m gpu tests/test_runtime_gpu.py -x 2>&1 | tail -15
  echo "=== hang report (debug build)"
  timeout 120 python3 tools/hang_check.py .gpu/new/llama-3.2-1b-sm_90-debug/sm_90 2>&1 | tail -8
  for i in 1 2; do
    for which in old new; do
      echo "=== bench $which llama-3.2-1b ($i)"; bench $which llama-3.2-1b-sm_90 r1t1 r2t1 r4t1 r8t1 r1t6 2>&1 | tail -9
      echo "=== bench $which qwen3-8b ($i)"; bench $which qwen3-8b-sm_90 r1t1 r4t1 r8t1 2>&1 | tail -6
    done
  done
  echo "=== transformers check (new packages)"
  timeout 240 python3 tools/transformers_check.py --packages .gpu/new --models llama-3.2-1b,qwen3-8b --rows 1,8 \
    --steps 32 2>&1 | grep -v Warning | tail -12
} 2>&1 | tee "$OUT/run.log"
