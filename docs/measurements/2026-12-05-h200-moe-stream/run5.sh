#!/usr/bin/env bash
# Routed layers on the streaming executor, run 5, at the shipped table (schedules/sm_90.yaml with
# the routed streaming entries): every routed GPU test (tests/data/qwen3-moe-mixed-sm_90.yaml: its
# 1- and 8-row routed programs stream, its 3-row and 1×6 ones run on the Triton executor), and
# `monobuild bench` of Qwen3-30B-A3B's 1-, 2-, 4- and 8-row programs (qwen3-30b-a3b-sm_90.yaml
# here) against torch.compile + a CUDA graph of the same model.
# Packages (ir/ left out):
#   monobuild compile recipes/llama-3.2-1b-sm_90.yaml --out .gpu/T
#   monobuild compile tests/data/qwen3-moe-mixed-sm_90.yaml --out .gpu/T
#   monobuild compile $D/qwen3-30b-a3b-sm_90.yaml --out .gpu/B
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.total --format=csv > "$OUT/device.txt" 2>&1
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
{
echo "=== GPU tests, routed, shipped table"
MONOBUILD_TEST_PACKAGES=.gpu/T timeout 200 python3 -m pytest -q -x -s tests/test_runtime_gpu.py -k "routed" 2>&1 \
  | grep -v Warning | tail -12
echo "=== bench, at ${SECONDS}s"
timeout 400 monobuild bench .gpu/B/qwen3-30b-a3b-sm_90/sm_90 --context 1024 2>&1 | grep -v Warning
echo "=== done at ${SECONDS}s"
} 2>&1 | tee "$OUT/run5.log"
