#!/usr/bin/env bash
# Sliding-window attention (Mistral-7B v0.1's 4096 positions, every layer) on the Triton executor:
# the transformers check at contexts past the window (1 and 8 rows, both modes), then the step's
# time below and past the window against the PyTorch CUDA-graph baseline. pk1: compiled from
# .gpu/mistral/mistral-7b-v0.1-sm_90.yaml (bands 1 and 8, both modes, max_context 8192).
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/device.txt" 2>&1
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
PKG=.gpu/pk1/mistral-7b-v0.1-sm_90/sm_90
{
echo "=== transformers check (prompts to 6000 positions, window 4096)"
timeout 330 python3 tools/transformers_check.py --packages .gpu/pk1 --models mistral-7b-v0.1 --configs .gpu/mistral \
  --rows 1,8 --steps 32 --max-context 6000 --json "$OUT/transformers_check.json" 2>&1 | tail -8
echo "=== bench (from ${SECONDS}s)"
timeout 200 python3 -m monobuild.cli.main bench $PKG --context 1024,4096,8000 --band r1t1 --band r8t1 2>&1 | tail -16
echo "=== done at ${SECONDS}s"
} 2>&1 | tee "$OUT/run1.log"
