#!/usr/bin/env bash
# Issue 20, run 2: the transformers check of Qwen3-30B-A3B's layers again with tools/transformers_check.py's
# routing-aware bound (run 1's 1-row run failed at one step whose routing bf16 rounding could flip);
# the 1-row step of the whole model in its --stage-clock build (.gpu/R/t0/...-clock): where a
# step's time goes, stage by stage; and three builds of its persistent 1- and 8-row programs timed on
# the same weights in rounds (paired.py): t0 the shipped table (the moe programs take the defaults: 2
# CTAs of 4 warps an SM), t1 one CTA of 8 warps an SM (sm_90-t1.yaml), t2 t1 with 4 weight chunks in
# flight (sm_90-t2.yaml), t3 t1 without norm stages (qkv stages its own x̂, sm_90-t3.yaml), t4 the
# shipped table without norm stages (sm_90-t4.yaml; its 8-row entry spills, so the planner derives t1's).
# Packages (on the CPU machine; ir/ may be left out, the runtime does not read it):
#   monobuild compile $M/qwen3-30b-a3b-sm_90.yaml [--schedule $M/sm_90-tN.yaml] --out .gpu/R/tN  (N = 0 without --schedule, 1, 2, 3, 4)
#   monobuild compile $M/qwen3-30b-a3b-sm_90.yaml --stage-clock --out .gpu/R/t0
#   monobuild compile $M/qwen3-30b-a3b-8l-sm_90.yaml --out .gpu/R
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
M=docs/measurements/2026-12-05-h200-moe
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.total --format=csv > "$OUT/device.txt" 2>&1
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
{
echo "=== paired builds"
timeout 260 python3 $M/paired.py 1024 2 .gpu/R/t0/qwen3-30b-a3b-sm_90/sm_90 .gpu/R/t1/qwen3-30b-a3b-sm_90/sm_90 \
  .gpu/R/t3/qwen3-30b-a3b-sm_90/sm_90 .gpu/R/t2/qwen3-30b-a3b-sm_90/sm_90 .gpu/R/t4/qwen3-30b-a3b-sm_90/sm_90 2>&1 | grep -v Warning
echo "=== transformers check, Qwen3-30B-A3B's layers (8), 1 and 8 rows, at ${SECONDS}s"
timeout 150 python3 tools/transformers_check.py --packages .gpu/R --models qwen3-30b-a3b-8l --rows 1,8 --steps 32 \
  --max-context 2048 --configs $M --json "$OUT/check.json" 2>&1 | grep -v Warning | tail -6
echo "=== stage clock, at ${SECONDS}s"
for band in r1t1; do
  timeout 120 python3 tools/stage_clock.py .gpu/R/t0/qwen3-30b-a3b-sm_90-clock/sm_90 --band $band --context 1024 \
    --save "$OUT/clock-$band.pt" 2>&1 | grep -v Warning
done
echo "=== done at ${SECONDS}s"
} 2>&1 | tee "$OUT/run2.log"
