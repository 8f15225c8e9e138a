#!/usr/bin/env bash
# Routed layers on the streaming executor, run 6: `monobuild bench` of Qwen3-30B-A3B's 1-, 2-, 4-
# and 8-row programs at the shipped table (run 5's package B: commit 425baf0's programs), against
# torch.compile + a CUDA graph of the same model, at context 1024.
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.total --format=csv > "$OUT/device.txt" 2>&1
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
{
echo "=== bench"
timeout 470 monobuild bench .gpu/B/qwen3-30b-a3b-sm_90/sm_90 --context 1024 2>&1 | grep -v Warning
echo "=== done at ${SECONDS}s"
} 2>&1 | tee "$OUT/run6.log"
