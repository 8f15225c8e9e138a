#!/usr/bin/env bash
# Issue 22: run 1's generation with the prompts prefilled as one left-padded batch (as generate
# does) instead of a forward a row. The packages of recipes/llama-3.2-1b-sm_90.yaml and
# recipes/qwen3-8b-sm_90.yaml, compiled on the CPU machine (.gpu/pk1).
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/device.txt" 2>&1
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
{
export MONOBUILD_TEST_PACKAGES=.gpu/pk1
timeout 150 python3 -m pytest -q -m gpu -s tests/test_integration_gpu.py 2>&1 | grep -v Warning | tail -8
echo "=== tests done at ${SECONDS}s"
timeout 90 python3 tools/engine_example.py --package .gpu/pk1/llama-3.2-1b-sm_90/sm_90 2>&1 | tail -13
echo "=== example done at ${SECONDS}s"
timeout 200 python3 tools/generate_bench.py --package .gpu/pk1/llama-3.2-1b-sm_90/sm_90 \
  --config recipes/configs/llama-3.2-1b.json --rows 1,8 --prompt 128 --new 256 --json "$OUT/generate-llama.json" 2>&1 | grep -v Warn | tail -8
echo "=== llama done at ${SECONDS}s"
timeout 200 python3 tools/generate_bench.py --package .gpu/pk1/qwen3-8b-sm_90/sm_90 \
  --config recipes/configs/qwen3-8b.json --rows 1 --prompt 128 --new 256 --json "$OUT/generate-qwen3-8b.json" 2>&1 | grep -v Warn | tail -5
echo "=== done at ${SECONDS}s"
} 2>&1 | tee "$OUT/run2.log"
