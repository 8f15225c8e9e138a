#!/usr/bin/env bash
# Run 1: the loader's L2 prefetch ahead of its ring (README.md). Packages compiled on the CPU
# machine into .gpu/l2/<variant> from this folder's recipes (persistent mode): R at the parent
# commit (3b334f2, the shipped table), aN with the kept commit plus l2.patch (its bulk-prefetch
# form: one cp.async.bulk.prefetch.L2 a weight row) under tables.py's aN table (l2_ahead N; a0:
# the kept flat loader walk, no prefetch). Llama-3.2-1B at 1 and 8 rows, Qwen3-8B at 1 row,
# contexts 128 and 1024, benches in turn, then the transformers check of a8 and a16.
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.total --format=csv > "$OUT/device.txt" 2>&1
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
bench() {  # variant recipe band contexts
  echo "--- $1 $2 $3"
  timeout 90 monobuild bench .gpu/l2/$1/$2-sm_90/sm_90 --context $4 --mode persistent --no-baseline --band $3 2>&1 \
    | grep -E "persistent|copy" | grep -v "ctx" | grep -v "on NVIDIA"
}
{
echo "=== Llama-3.2-1B, 1 row"
for v in R a0 a4 a8 a16 a16 a8 a4 a0 R; do bench $v llama-3.2-1b r1t1 128,1024; done
echo "=== Llama-3.2-1B, 8 rows"
for v in R a8 a16 R a8 a16; do bench $v llama-3.2-1b r8t1 1024; done
echo "=== Qwen3-8B, 1 row"
for v in R a8 a16 R a8 a16; do bench $v qwen3-8b r1t1 1024; done
echo "=== transformers check"
for v in a8 a16; do
  timeout 150 python3 tools/transformers_check.py --packages .gpu/l2/$v --models llama-3.2-1b --rows 1,8 --steps 24 \
    --json "$OUT/check-$v.json" 2>&1 | grep -v Warning | tail -6
done
echo "=== done at ${SECONDS}s"
} > "$OUT/run1.log" 2>&1
cat "$OUT/run1.log"
