#!/usr/bin/env bash
# Session 10, run 6: the streaming floor (each CTA's copies ahead of its waits) beside the
# stage-synchronous floors and the step, on fin10; first its GPU test.
O=$OUT; mkdir -p $O/floor
python3 -m pip install -q --no-deps --no-build-isolation -e . > /dev/null 2>&1
timeout 180 python3 -m pytest -q -m gpu tests/test_floor.py 2>&1 | tee $O/floor/test_floor.log | tail -3
grep -q "3 passed" $O/floor/test_floor.log || exit 1
OUT=$O/floor BUDGET_S=480 bash tools/gpu_session.sh gpu_pkgs/fin10 \
  bench:llama-3.2-1b-sm_90:1024:r1t1,r2t1,r4t1,r8t1,r1t6:no-baseline,floor,mode=persistent \
  bench:qwen3-8b-sm_90:1024:r1t1,r8t1,r1t6:no-baseline,floor,mode=persistent \
  bench:llama-3.2-1b-sm_90:32768:r1t1,r8t1:no-baseline,floor,mode=persistent
