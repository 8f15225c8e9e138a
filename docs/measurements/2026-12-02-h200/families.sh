#!/usr/bin/env bash
# Models the table has no entries for, compiled on the CPU machine (commit 675724d) with the
# schedules the compiler derived: Llama-3.2-3B (GQA group 3), Qwen2.5-7B (group 7, q/k/v bias),
# Qwen3-1.7B. Carried in .gpu/fam (packages) and .gpu/configs (their config.json files).
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
{
  echo "=== transformers check"
  timeout 330 python3 tools/transformers_check.py --packages .gpu/fam --configs .gpu/configs \
    --models llama-3.2-3b,qwen2.5-7b,qwen3-1.7b --rows 1,8 --steps 16 2>&1 | grep -v Warning | tail -14
  for m in llama-3.2-3b qwen2.5-7b qwen3-1.7b; do
    echo "=== bench $m"
    timeout 150 python3 -m monobuild.cli.main bench ".gpu/fam/$m-sm_90/sm_90" --context 1024 --mode persistent \
      --no-baseline --band r1t1 --band r8t1 --band r1t6 2>&1 | tail -5
  done
} 2>&1 | tee "$OUT/run.log"
