#!/usr/bin/env bash
# Where Qwen3-8B-FP8's 1-row step spends its time against bf16's: stage clocks of the 1-row
# persistent programs (this folder's *-clock.yaml, compiled at b6ac8b0 with --stage-clock), and,
# where the image has Nsight Compute, its counters for one layer launch of each (.gpu/R: the
# packages of docs/measurements/2026-12-04-h200-record).
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/device.txt" 2>&1
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
{
for m in qwen3-8b-clock qwen3-8b-fp8-clock; do
  timeout 120 python3 tools/stage_clock.py .gpu/C/$m-clock/sm_90 --band r1t1 --context 1024 \
    --save "$OUT/clock-$m.pt" 2>&1 | grep -v Warning | head -14
done
echo "=== ncu at ${SECONDS}s"
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
echo "ncu: ${NCU:-none}"
if [ -n "$NCU" ]; then
  for m in qwen3-8b-sm_90 qwen3-8b-fp8-sm_90; do
    timeout 200 "$NCU" --kernel-name layer_kernel --launch-skip 60 --launch-count 1 --section SpeedOfLight \
      --section WarpStateStats --section MemoryWorkloadAnalysis_Tables --section ComputeWorkloadAnalysis \
      python3 tools/stage_times.py .gpu/R/$m/sm_90 --mode persistent --band r1t1 --repeats 3 > "$OUT/ncu-$m.txt" 2>&1
    echo "--- $m rc=$?"; grep -E "Duration|Throughput|Stall|Issued|Bank|Warp Cycles|Eligible|Active Warps|ERR|==PROF==|==ERROR==" "$OUT/ncu-$m.txt" | head -40
  done
fi
echo "=== done at ${SECONDS}s"
} 2>&1 | tee "$OUT/run1.log"
