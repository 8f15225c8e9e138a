#!/usr/bin/env bash
# Run 2's bench ran past its time limit before its table: the same package (pk2, Mistral-7B v0.1,
# its persistent programs the streaming executor's), persistent mode only, the whole table with
# the PyTorch CUDA-graph baseline of the same run: below, at and past the 4096-position window.
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/device.txt" 2>&1
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
{
timeout 480 python3 -m monobuild.cli.main bench .gpu/pk2/mistral-7b-v0.1-sm_90/sm_90 --context 1024,4096,8000 \
  --band r1t1 --band r8t1 --mode persistent 2>&1 | tail -12
echo "=== done at ${SECONDS}s"
} 2>&1 | tee "$OUT/run3.log"
