#!/usr/bin/env bash
# Run 2: the L2 prefetch issued by the load-store path (prefetch.global.L2, one 128-byte line a
# thread: l2.patch as it is) instead of run 1's bulk prefetches. Packages as in run 1
# (.gpu/l2/<variant>): R at the parent commit, aN with l2_ahead N (a0: the flat loader walk, no
# prefetch; a0s2: a0 with Llama-3.2-1B's 1-row qkv in 2 K splits). Llama-3.2-1B 1 row at
# contexts 128 and 1024, Qwen3-8B 1 row at 1024, benches in turn.
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
for v in R a0 a0s2 a1 a2 a4 a4 a2 a1 a0s2 a0 R; do bench $v llama-3.2-1b r1t1 128,1024; done
echo "=== Qwen3-8B, 1 row"
for v in R a0 a1 a2 a2 a1 a0 R; do bench $v qwen3-8b r1t1 1024; done
echo "=== done at ${SECONDS}s"
} > "$OUT/run2.log" 2>&1
cat "$OUT/run2.log"
