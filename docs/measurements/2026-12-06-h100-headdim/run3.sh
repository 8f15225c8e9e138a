#!/usr/bin/env bash
# Run 3: every GPU test at this stop's code (commit 16b2644: padded heads, 128 query rows a task,
# load_halves), on packages compiled on the CPU machine into .gpu/all (their code and manifests;
# the IR stays behind, as the runtime does not read it): the default recipe and its --stage-clock
# build, qwen3-8b-fp8, tests/data/qwen3-moe-mixed-sm_90.yaml, tests/data/qwen3-235b-layers-sm_90.yaml
# and ../2026-12-04-h200-serving/llama-3.2-1b-sample-sm_90.yaml.
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.total --format=csv > "$OUT/device.txt" 2>&1
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
MONOBUILD_TEST_PACKAGES=.gpu/all timeout 560 python3 -m pytest -q -p no:cacheprovider -m gpu tests/ -rs > "$OUT/run3.log" 2>&1
echo "rc $?" >> "$OUT/run3.log"
tail -25 "$OUT/run3.log"
