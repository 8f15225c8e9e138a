#!/usr/bin/env bash
# Session 11, run 2: why the layer loop (fused) is no faster than a launch a layer (base). The
# profiling builds' clocks of both, and a third set, call (call.patch: a launch a layer whose body
# is the loop's called function, not inlined), benched between them in both orders.
O=$OUT
b() { for v in "$@"; do echo "bench:$v/llama-3.2-1b-sm_90:1024:r1t1,r8t1,r1t6:no-baseline,mode=persistent"; done; }
OUT=$O/a BUDGET_S=330 bash tools/gpu_session.sh gpu_pkgs $(b base call fused fused call base) \
  bench:base/qwen3-8b-sm_90:1024:r1t1:no-baseline,mode=persistent bench:call/qwen3-8b-sm_90:1024:r1t1:no-baseline,mode=persistent \
  bench:fused/qwen3-8b-sm_90:1024:r1t1:no-baseline,mode=persistent
OUT=$O/clk BUDGET_S=150 bash tools/gpu_session.sh gpu_pkgs clock:base/llama-3.2-1b-sm_90-clock:r1t1,r8t1 \
  clock:fused/llama-3.2-1b-sm_90-clock:r1t1,r8t1
