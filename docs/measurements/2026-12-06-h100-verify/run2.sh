#!/usr/bin/env bash
# Run 2: qkv's K left whole (max_split_qkv 1), so attention reads one partial of q, k and v instead
# of eight: the 1 x 6 program streamed (v4 with norm stages, v5 without) and the 1-row program
# (s1; s2 with 2 splits) against the shipped table (R) and run 1's v1, compiled at commit 1963cdd
# (tables.py). Benches in turn at contexts 128 and 1024, the stage clocks of s1's 1-row and v4's
# 1 x 6 steps, the GPU tests of the changed programs.
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.total --format=csv > "$OUT/device.txt" 2>&1
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
P=llama-3.2-1b-sm_90
bench() { echo "--- $1"; timeout 100 monobuild bench .gpu/v/$1/$P/sm_90 --context 128,1024 --mode persistent --no-baseline \
  --band r1t1 --band r1t6 2>&1 | grep -E "persistent|copy" | grep -v "^r.t. ctx" | grep -v "on NVIDIA"; }
{
echo "=== bench"
for v in R s1 s2 v1 v4 v5 R s1 s2 v1 v4 v5; do bench $v; done
echo "=== stage clocks"
for vb in s1:r1t1 v4:r1t6; do v=${vb%:*}; b=${vb#*:}
  echo "--- $v $b"; timeout 60 python3 tools/stage_clock.py .gpu/v/$v/$P-clock/sm_90 --band $b --context 1024 \
    --save "$OUT/clock-$v-$b.pt" 2>&1 | grep -v Warning | tail -14
done
echo "=== GPU tests"
for vk in "v4:persistent and 6" "v5:persistent and 6" "s1:persistent and 1-1" "s2:persistent and 1-1"; do v=${vk%%:*}; k=${vk#*:}
  echo "--- $v"; MONOBUILD_TEST_PACKAGES=.gpu/v/$v timeout 120 python3 -m pytest -q -p no:cacheprovider tests/test_runtime_gpu.py \
    -k "test_step_matches_reference and $k" 2>&1 | tail -1
done
echo "=== done at ${SECONDS}s"
} > "$OUT/run2.log" 2>&1
cat "$OUT/run2.log"
