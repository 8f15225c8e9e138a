#!/usr/bin/env bash
# Issue 22: weights bound in place (0206c11) and the sampler's first draw spread over the logits op
# (the commit after it). .gpu/n: this tree's packages; .gpu/b: 71b9765's (q/k/v and gate/up
# concatenated at bind; the whole first draw in the sample op's one CTA a row), run with 71b9765's
# own code (its wheel, .gpu/basewheel, installed apart and imported from outside the checkout).
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
REPO=$PWD
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/device.txt" 2>&1
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
python3 -m pip install -q --no-deps --target /tmp/basepkg .gpu/basewheel/*.whl >> "$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
bench() {  # bench BUILD MODEL: persistent, context 1024, 1 and 8 rows, no baseline
  local pkg=$REPO/.gpu/$1/$2-sm_90/sm_90
  if [ "$1" = b ]; then
    (cd /tmp && PYTHONPATH=/tmp/basepkg timeout 100 python3 -m monobuild.cli.main bench "$pkg" --context 1024 \
       --mode persistent --band r1t1 --band r8t1 --no-baseline 2>&1 | grep -E "^r[18]t1")
  else
    timeout 100 python3 -m monobuild.cli.main bench "$pkg" --context 1024 --mode persistent --band r1t1 --band r8t1 \
      --no-baseline 2>&1 | grep -E "^r[18]t1"
  fi
}
{
echo "=== GPU tests, this tree's packages"
MONOBUILD_TEST_PACKAGES=.gpu/n timeout 200 python3 -m pytest -q -m gpu tests/test_runtime_gpu.py tests/test_integration_gpu.py \
  2>&1 | grep -v Warning | tail -15
echo "=== transformers check, this tree's packages"
timeout 150 python3 tools/transformers_check.py --packages .gpu/n --models llama-3.2-1b,qwen3-8b --rows 1,8 --steps 8 --max-context 1024 \
  --json "$OUT/check.json" 2>&1 | grep -v Warning | tail -12
echo "=== bind memory, this tree's packages"
timeout 150 python3 tools/bind_memory.py .gpu/n/llama-3.2-1b-sm_90/sm_90 .gpu/n/qwen3-8b-sm_90/sm_90 \
  .gpu/n/qwen3-8b-fp8-sm_90/sm_90 2>&1 | grep -v Warning
echo "=== paired bench (b: 71b9765, n: this tree)"
for round in 1 2; do
  for build in b n; do
    for model in llama-3.2-1b llama-3.2-1b-sample qwen3-8b; do
      echo "--- round $round $build $model"
      bench $build $model
    done
  done
done
echo "=== done at ${SECONDS}s"
} 2>&1 | tee "$OUT/run1.log"
