#!/usr/bin/env bash
# Session 10, run 5: the final code's packages (fin10): GPU tests with a profiling build, the
# transformers check (three models, 1 and 8 rows, both modes), and Llama-3.2-1B in staged mode.
O=$OUT
OUT=$O/check BUDGET_S=400 bash tools/gpu_session.sh gpu_pkgs/fin10 tests check:llama-3.2-1b,qwen3-0.6b,qwen3-8b:1,8:8 \
  bench:llama-3.2-1b-sm_90:1024:r1t1,r2t1,r4t1,r8t1,r1t6:no-baseline,mode=staged
