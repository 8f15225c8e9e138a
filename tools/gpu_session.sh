#!/usr/bin/env bash
# One device-machine session: install the checkout (no deps: the GPU image brings torch,
# cuda-bindings, transformers), then the GPU tests, the transformers check and the bench over
# packages compiled on the CPU machine. Usage: tools/gpu_session.sh PACKAGES_DIR STAGES...
# Stages: tests, check:<models>:<rows>:<steps>, bench:<recipe>:<contexts>[:<bands>], stages:<recipe>:<bands>,
# hang:<debug package>. Logs go to $OUT.
set -u
PKGS=$1; shift
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 MONOBUILD_TEST_PACKAGES=$PKGS
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/device.txt" 2>&1
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
python3 -c "import torch, cuda.bindings, transformers; print(torch.__version__, cuda.bindings.__version__, transformers.__version__)" | tee -a "$OUT/device.txt"
for stage in "$@"; do
  IFS=: read -r kind a b c <<< "$stage"
  echo "=== $stage"
  case $kind in
    tests) timeout 300 python3 -m pytest -q -m gpu tests/test_runtime_gpu.py -x -s 2>&1 | tee "$OUT/tests.log" | tail -40 ;;
    check) timeout 200 python3 tools/transformers_check.py --packages "$PKGS" --models "$a" --rows "$b" --steps "$c" \
             --json "$OUT/check-${a//,/_}.json" 2>&1 | tee "$OUT/check-${a//,/_}.log" | grep -v Warning | tail -20 ;;
    bench) timeout 150 python3 -m monobuild.cli.main bench "$PKGS/$a/sm_90" --context "$b" ${c:+--band ${c//,/ --band }} \
             2> "$OUT/bench-$a.err" | tee "$OUT/bench-$a.txt"; tail -3 "$OUT/bench-$a.err" ;;
    stages) for band in ${b//,/ }; do timeout 100 python3 tools/stage_times.py "$PKGS/$a/sm_90" --band "$band" 2>&1 | tee -a "$OUT/stages.txt"; done ;;
    hang) timeout 200 python3 tools/hang_check.py "$PKGS/$a/sm_90" 2>&1 | tee "$OUT/hang-check.txt" ;;
  esac
done
