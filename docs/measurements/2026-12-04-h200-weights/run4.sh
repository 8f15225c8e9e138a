#!/usr/bin/env bash
# Issue 22: the sampler's passes read only the chunks whose tiles hold an id above their bound
# (.gpu/n4, this tree's packages), paired against run 3's build (.gpu/n3, every pass over every
# chunk); the sampling GPU tests (χ² and masks over the 128256-id vocabulary) again.
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
REPO=$PWD
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/device.txt" 2>&1
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
python3 -m pip install -q --no-deps --target /tmp/basepkg .gpu/basewheel/*.whl >> "$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
M=docs/measurements/2026-12-04-h200-weights
bench() {  # bench BUILD MODEL
  local pkg=$REPO/.gpu/$1/$2-sm_90/sm_90
  if [ "$1" = b ]; then
    (cd /tmp && PYTHONPATH=/tmp/basepkg timeout 100 python3 -m monobuild.cli.main bench "$pkg" --context 1024 \
       --mode persistent --band r1t1 --band r8t1 --no-baseline 2>&1 | grep -E "^r[18]t1 ")
  else
    timeout 100 python3 -m monobuild.cli.main bench "$pkg" --context 1024 --mode persistent --band r1t1 --band r8t1 \
      --no-baseline 2>&1 | grep -E "^r[18]t1 "
  fi
}
{
echo "=== GPU tests: sampling, integration (.gpu/n4)"
MONOBUILD_TEST_PACKAGES=.gpu/n4 timeout 200 python3 -m pytest -q -m gpu tests/test_runtime_gpu.py tests/test_integration_gpu.py \
  -k "sampled or draw or greedy_ids or end_of_sequence or matches_reference" 2>&1 | grep -v Warning | tail -8
echo "=== paired bench"
for round in 1 2; do
  for run in "n4 llama-3.2-1b" "n4 llama-3.2-1b-sample" "n3 llama-3.2-1b-sample"; do
    echo "--- round $round $run"; bench $run
  done
done
echo "=== sampling cost by setting, n4"
timeout 100 python3 $M/sampling_cost.py .gpu/n4/llama-3.2-1b-sample-sm_90/sm_90 2>&1 | grep -v Warning
echo "=== sampling cost by setting, n3"
timeout 100 python3 $M/sampling_cost.py .gpu/n3/llama-3.2-1b-sample-sm_90/sm_90 2>&1 | grep -v Warning
echo "=== done at ${SECONDS}s"
} 2>&1 | tee "$OUT/run4.log"
