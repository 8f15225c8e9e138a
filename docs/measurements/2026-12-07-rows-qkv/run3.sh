#!/usr/bin/env bash
# Run 3: q2's package (the default recipe under q2.yaml) through every GPU test it can serve and
# the transformers check (1 and 8 rows, both modes, 16 steps).
export PYTHONUNBUFFERED=1
MONOBUILD_TEST_PACKAGES=.gpu/v/q2 timeout 240 python3 -m pytest -q -p no:cacheprovider tests/test_runtime_gpu.py 2>&1 \
  | tail -4 | tee "$OUT/q2-tests.log"
timeout 200 python3 tools/transformers_check.py --packages .gpu/v/q2 --models llama-3.2-1b --rows 1,8 --steps 16 \
  --json "$OUT/q2-check.json" 2>&1 | grep -v Warning | tail -8 | tee "$OUT/q2-check.log"
