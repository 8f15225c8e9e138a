#!/usr/bin/env bash
# The op-built programs on the H200: correctness (GPU tests, transformers check, a debug build's
# hang report) and the bench against the hand-written kernel they replace, in one command.
#   .gpu/new      packages compiled from this commit: llama-3.2-1b-sm_90 (+ -clock, -debug), qwen3-8b-sm_90
#   .gpu/old      the source tree of cdf3190 (the hand-written layer kernel), for its runtime
#   .gpu/oldpkgs  its packages (code objects + manifest)
#   .peers/hazy   the Hazy Research megakernel (../shared/peers/hazy), built and timed by its own script
# Bench runs alternate old, new, old, new, so drift shows as a spread; each tree is laid out as the
# package monobuild on PYTHONPATH and run from /tmp (the checkout's own monobuild/ folder would
# shadow it). The correctness stage runs from the checkout with it pip-installed in editable mode.
# STAGES picks what runs (default: all).
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
STAGES=${STAGES:-"correctness bench"}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/device.txt" 2>&1
tree() {  # tree <source dir> <package root>: the source laid out as the import package monobuild
  mkdir -p "$2/monobuild" && cp -r "$1"/{compiler,runtime,cli,bench,recipes,schedules} "$2/monobuild/" \
    && cp "$1"/monobuild/*.py "$2/monobuild/"
}
REPO=$PWD
tree .gpu/old /tmp/oldpkg && tree . /tmp/newpkg || exit 1
bench() {  # bench <old|new> <recipe> <bands...>
  local which=$1 recipe=$2; shift 2
  local bands=""; for b in "$@"; do bands="$bands --band $b"; done
  local pkgs=.gpu/new; [ "$which" = old ] && pkgs=.gpu/oldpkgs
  (cd /tmp && PYTHONPATH=/tmp/${which}pkg timeout 200 python3 -m monobuild.cli.main bench "$REPO/$pkgs/$recipe/sm_90" \
    --context 1024 --mode persistent --no-baseline $bands)
}
{
  if [[ $STAGES == *correctness* ]]; then
  python3 -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
  echo "=== GPU tests (new packages)"
  MONOBUILD_TEST_PACKAGES=.gpu/new timeout 300 python3 -m pytest -q -m gpu tests/test_runtime_gpu.py -x 2>&1 | tail -15
  echo "=== hang report (debug build)"
  timeout 120 python3 tools/hang_check.py .gpu/new/llama-3.2-1b-sm_90-debug/sm_90 2>&1 | tail -8
  echo "=== transformers check (new packages)"
  timeout 240 python3 tools/transformers_check.py --packages .gpu/new --models llama-3.2-1b,qwen3-8b --rows 1,8 \
    --steps 32 2>&1 | grep -v Warning | tail -12
  fi
  if [[ $STAGES == *bench* ]]; then
  python3 -m pip uninstall -q -y monobuild > /dev/null 2>&1  # an editable install would shadow PYTHONPATH
  for which in old new; do
    (cd /tmp && PYTHONPATH=/tmp/${which}pkg python3 -c "import monobuild.runtime as r; print('$which:', r.__file__)")
  done
  for i in 1 2; do
    for which in old new; do
      echo "=== bench $which llama-3.2-1b ($i)"; bench $which llama-3.2-1b-sm_90 r1t1 r2t1 r4t1 r8t1 r1t6 2>&1 | tail -9
      echo "=== bench $which qwen3-8b ($i)"; bench $which qwen3-8b-sm_90 r1t1 r4t1 r8t1 2>&1 | tail -6
    done
  done
  fi
  if [[ $STAGES == *peer* ]]; then
  python3 -m pip uninstall -q -y monobuild > /dev/null 2>&1
  for ctx in 128 512 1024 2048; do
    echo "=== peer: Hazy megakernel, context $ctx"
    (cd .peers/hazy && CTX=$ctx OUT="$OUT/peer-$ctx" bash run_h200.sh 2>&1 | grep -E "^PEER|calib|workload" | tail -4)
  done
  echo "=== bench new llama-3.2-1b, 1 row, the peer's contexts"
  (cd /tmp && PYTHONPATH=/tmp/newpkg timeout 200 python3 -m monobuild.cli.main bench \
    "$REPO/.gpu/new/llama-3.2-1b-sm_90/sm_90" --context 128,512,1024,2048 --mode persistent --no-baseline --band r1t1) \
    2>&1 | tail -7
  fi
} 2>&1 | tee "$OUT/run.log"
# The peer's logs in one archive (the device returns a few files).
(cd "$OUT" && ls -d peer-* > /dev/null 2>&1 && tar czf peer-logs.tar.gz peer-* && rm -rf peer-*)
