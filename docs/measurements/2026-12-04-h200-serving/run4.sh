#!/usr/bin/env bash
# Paired: the packages before the verdict change (.gpu/base, commit 86b629d's code) and after it
# (.gpu/pk1), benched in turn twice each, 1 row and 1 × 6 at context 1024, persistent.
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
{
for round in 1 2; do
  for pkgs in base pk1; do
    for model in llama-3.2-1b qwen3-8b; do
      echo "--- round $round $pkgs $model"
      timeout 100 monobuild bench .gpu/$pkgs/$model-sm_90/sm_90 --context 1024 --mode persistent --band r1t1 --band r1t6 \
        --no-baseline 2>&1 | grep -E "^r1t"
    done
  done
done
echo "=== done at ${SECONDS}s"
} 2>&1 | tee "$OUT/run4.log"
