#!/usr/bin/env bash
# experts_up's K split in two at one row (tables.py's split.yaml) against the shipped table: the
# routed GPU tests of the split programs (bf16 and FP8 experts, 1 row, against the float64
# reference), the paired builds B (shipped) and S2 (split) on the same weights, three rounds, and
# both builds' 1-row stage clocks. Packages (ir/ left out), compiled on the CPU machine:
#   python docs/measurements/2026-12-07-moe-up-split/tables.py /tmp/us
#   monobuild compile $D/qwen3-30b-a3b-sm_90.yaml --out .gpu/u/B
#   monobuild compile $D/qwen3-30b-a3b-sm_90.yaml --schedule /tmp/us/split.yaml --out .gpu/u/S2
#   monobuild compile $D/qwen3-30b-a3b-sm_90.yaml [--schedule /tmp/us/split.yaml] --stage-clock --out .gpu/u/K{B,S}
#   monobuild compile tests/data/qwen3-moe-mixed-sm_90.yaml tests/data/qwen3-moe-mixed-fp8-sm_90.yaml \
#     --schedule /tmp/us/split.yaml --out .gpu/u/T    (and any llama-3.2-1b-sm_90 package beside them)
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
P=qwen3-30b-a3b-sm_90
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.total --format=csv > "$OUT/device.txt" 2>&1
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
{
echo "=== GPU tests, routed, split at 1 row"
MONOBUILD_TEST_PACKAGES=.gpu/u/T timeout 200 python3 -m pytest -q -p no:cacheprovider tests/test_runtime_gpu.py \
  -k "routed and 1-1" 2>&1 | grep -v Warning | tail -6
echo "=== paired, at ${SECONDS}s"
timeout 240 python3 docs/measurements/2026-12-05-h200-moe/paired.py 1024 3 .gpu/u/B/$P/sm_90 .gpu/u/S2/$P/sm_90 2>&1 \
  | grep -v Warning
for k in KB KS; do
  echo "=== stage clock, $k, at ${SECONDS}s"
  timeout 100 python3 tools/stage_clock.py .gpu/u/$k/$P-clock/sm_90 --band r1t1 --context 1024 \
    --save "$OUT/clock-$k.pt" 2>&1 | grep -v Warning
done
echo "=== done at ${SECONDS}s"
} 2>&1 | tee "$OUT/run1.log"
