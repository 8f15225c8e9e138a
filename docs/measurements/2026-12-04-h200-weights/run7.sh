#!/usr/bin/env bash
# The GPU tests again at the tree this stop leaves (.gpu/n7: the default Llama-3.2-1B recipe and
# llama-3.2-1b-sample-sm_90.yaml here): the verify verdict tests now share their check, and
# tools/bind_memory.py its vLLM fusion (bench.checkpoints.fused_like_vllm).
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/device.txt" 2>&1
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
{
echo "=== GPU tests (.gpu/n7)"
MONOBUILD_TEST_PACKAGES=.gpu/n7 timeout 240 python3 -m pytest -q -m gpu tests/test_runtime_gpu.py tests/test_integration_gpu.py \
  2>&1 | grep -v Warning | tail -6
echo "=== bind memory"
timeout 100 python3 tools/bind_memory.py .gpu/n7/llama-3.2-1b-sm_90/sm_90 2>&1 | grep -v Warning
echo "=== done at ${SECONDS}s"
} 2>&1 | tee "$OUT/run7.log"
