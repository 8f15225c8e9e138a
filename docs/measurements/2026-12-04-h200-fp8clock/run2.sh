#!/usr/bin/env bash
# Nsight Compute's per-instruction view of one layer launch of Qwen3-8B-FP8's 1-row persistent
# program (.gpu/R, as run 1): the warp stall samples per SASS instruction, to see where a CTA's
# FP8 GEMV spends its issue slots.
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
NCU=/usr/local/cuda/bin/ncu
{
timeout 300 $NCU --kernel-name layer_kernel --launch-skip 60 --launch-count 1 --section SourceCounters \
  --section WarpStateStats --section InstructionStats -o "$OUT/fp8" -f \
  python3 tools/stage_times.py .gpu/R/qwen3-8b-fp8-sm_90/sm_90 --mode persistent --band r1t1 --repeats 3 2>&1 | tail -3
$NCU -i "$OUT/fp8.ncu-rep" --page source --print-source sass --csv > "$OUT/fp8-sass.csv" 2> "$OUT/fp8-sass.err"
echo "sass rows: $(wc -l < "$OUT/fp8-sass.csv")"; head -c 600 "$OUT/fp8-sass.csv"; echo
$NCU -i "$OUT/fp8.ncu-rep" --page details --print-details all 2>&1 | grep -v "^\s*$" | head -120 > "$OUT/fp8-details.txt"
rm -f "$OUT/fp8.ncu-rep"
echo "=== done at ${SECONDS}s"
} 2>&1 | tee "$OUT/run2.log"
