#!/usr/bin/env bash
# One device-machine call: install the checkout (no deps: the GPU image brings torch,
# cuda-bindings, transformers), then the GPU tests, the transformers check and the bench over
# packages compiled on the CPU machine. Usage: tools/gpu_session.sh PACKAGES_DIR STAGES...
# Stages: tests, check:<models>:<rows>:<steps>, bench:<recipe>:<contexts>[:<bands>[:<flags>]],
# stages:<recipe>:<bands>, clock:<clock package>:<bands>[:<context>], hang:<debug package>, tune:<recipe>:<bands>, compile:<recipe> (into
# PACKAGES_DIR, with the table the tune stages wrote when there is one). <flags> are bench options
# without their dashes, comma-separated (e.g. no-baseline,no-pin-occupancy,mode=persistent).
# Logs go to $OUT, one file per stage.
set -u
PKGS=$1; shift
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 MONOBUILD_TEST_PACKAGES=$PKGS
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/device.txt" 2>&1
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
python3 -c "import torch, cuda.bindings, transformers; print(torch.__version__, cuda.bindings.__version__, transformers.__version__)" | tee -a "$OUT/device.txt"
BUDGET_S=${BUDGET_S:-540}  # stages that would start later are skipped, so the logs still come back
for stage in "$@"; do
  if (( SECONDS > BUDGET_S )); then echo "=== $stage: skipped (${SECONDS}s used of ${BUDGET_S}s)"; continue; fi
  IFS=: read -r kind a b c d <<< "$stage"
  log=$(echo "$stage" | tr ':,=/' '____')
  flags=""
  for f in ${d//,/ }; do flags="$flags --${f/=/ }"; done
  echo "=== $stage"
  case $kind in
    tests) timeout 300 python3 -m pytest -q -m gpu tests/test_runtime_gpu.py -x -s 2>&1 | tee "$OUT/tests.log" | tail -40 ;;
    check) timeout 200 python3 tools/transformers_check.py --packages "$PKGS" --models "$a" --rows "$b" --steps "$c" \
             --json "$OUT/check-${a//,/_}.json" 2>&1 | tee "$OUT/check-${a//,/_}.log" | grep -v Warning | tail -20 ;;
    bench) timeout 300 python3 -m monobuild.cli.main bench "$PKGS/$a/sm_90" --context "$b" ${c:+--band ${c//,/ --band }} \
             $flags 2> "$OUT/$log.err" | tee "$OUT/$log.txt"; tail -3 "$OUT/$log.err" ;;
    stages) for band in ${b//,/ }; do timeout 100 python3 tools/stage_times.py "$PKGS/$a/sm_90" --band "$band" 2>&1 | tee -a "$OUT/stages.txt"; done ;;
    clock) for band in ${b//,/ }; do timeout 100 python3 tools/stage_clock.py "$PKGS/$a/sm_90" --band "$band" \
             --context "${c:-1024}" --save "$OUT/clock-${a//\//_}-$band-${c:-1024}.pt" 2>&1 | tee -a "$OUT/clock.txt"; done ;;
    hang) timeout 200 python3 tools/hang_check.py "$PKGS/$a/sm_90" 2>&1 | tee "$OUT/hang-check.txt" ;;
    compile) timeout 200 python3 -m monobuild.cli.main compile "recipes/$a.yaml" --out "$PKGS" --jobs 16 \
               $( [ -f "$OUT/sm_90.yaml" ] && echo --schedule "$OUT/sm_90.yaml" ) 2>&1 | tail -3 ;;
    tune) timeout $(( BUDGET_S + 40 - SECONDS )) python3 -m monobuild.cli.main tune "recipes/$a.yaml" ${b:+--band ${b//,/ --band }} --jobs 8 \
            --out "$OUT/sm_90.yaml" 2>&1 | tee "$OUT/$log.txt" | tail -40 ;;
  esac
done
# One archive: the device returns a limited number of files.
(cd "$OUT" && tar czf /tmp/logs.tar.gz --exclude=logs.tar.gz . && find . -mindepth 1 -delete && mv /tmp/logs.tar.gz .)
