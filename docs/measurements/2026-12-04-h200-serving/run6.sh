#!/usr/bin/env bash
# Issue 22, run 5 again with the distribution's mass summed in a pass of its own before the rejection
# rounds (in run 5 the first round summed it under a branch; the sampling tests' failures had another
# cause, see run7.sh): the sampling head (head: sample; llama-3.2-1b-sample-sm_90.yaml here) beside the greedy
# package of recipes/llama-3.2-1b-sm_90.yaml, both compiled on the CPU machine at this commit (.gpu/pk1).
# 1. the GPU tests (the sampler's χ² and masks, reproducible draws, graph replays; the rest again:
#    the step's input handling changed);
# 2. the step with the sampling head against the greedy one, 1 and 8 rows at context 1024, and the
#    sampler's cost by setting (temperature 1 alone; top-k 50; top-p 0.9), random weights.
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/device.txt" 2>&1
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
{
export MONOBUILD_TEST_PACKAGES=.gpu/pk1
timeout 300 python3 -m pytest -q -m gpu -s tests/test_runtime_gpu.py tests/test_integration_gpu.py 2>&1 | grep -v Warning | grep -E "χ²|passed|failed|Error|assert|FAIL" | tail -20
echo "=== tests done at ${SECONDS}s"
for model in llama-3.2-1b llama-3.2-1b-sample; do
  timeout 100 monobuild bench .gpu/pk1/$model-sm_90/sm_90 --context 1024 --mode persistent --band r1t1 --band r8t1 \
    --no-baseline 2>&1 | grep -E "^r[18]t1 "
done
timeout 120 python3 - <<'PY'
import statistics, torch
from monobuild import runtime
from monobuild.bench.cases import random_band_step
from monobuild.bench.run import time_replays
pkg = runtime.load(".gpu/pk1/llama-3.2-1b-sample-sm_90/sm_90")
for band in ("r1t1", "r8t1"):
    step, i, rows, _ = random_band_step(pkg, band, 1024, "persistent")
    dev = pkg.device
    for name, (t, k, p) in {"greedy (temperature 0)": (0.0, 0, 1.0), "temperature 1": (1.0, 0, 1.0),
                            "temperature 1, top-k 50": (1.0, 50, 1.0), "temperature 1, top-p 0.9": (1.0, 0, 0.9),
                            "temperature 0.7, top-k 50, top-p 0.9": (0.7, 50, 0.9)}.items():
        s = runtime.Sampling(torch.full((rows,), t, device=dev), torch.full((rows,), k, dtype=torch.int32, device=dev),
                             torch.full((rows,), p, device=dev), torch.arange(rows, device=dev) + 5)
        ms = statistics.median(time_replays(lambda: step(i.tokens, i.positions, i.block_tables, i.context_lens, sampling=s), 200))
        print(f"{band} ctx 1024 persistent, {name}: {ms:.3f} ms")
PY
echo "=== done at ${SECONDS}s"
} 2>&1 | tee "$OUT/run6.log"
