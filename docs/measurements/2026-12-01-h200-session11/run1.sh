#!/usr/bin/env bash
# Session 11, run 1: the layer loop (fuse_layers) — correctness first (GPU tests with its profiling
# build, the transformers check on the fused packages), then the step a launch a layer (base) and
# every layer in one launch (fused) side by side: Llama-3.2-1B at 1024 and 32768, Qwen3-8B.
O=$OUT
OUT=$O/check BUDGET_S=230 bash tools/gpu_session.sh gpu_pkgs/fused tests check:llama-3.2-1b,qwen3-0.6b,qwen3-8b:1,8:8
b() { for v in "$@"; do echo "bench:$v/llama-3.2-1b-sm_90:1024:r1t1,r2t1,r4t1,r8t1,r1t6:no-baseline,mode=persistent"; done; }
OUT=$O/a BUDGET_S=300 bash tools/gpu_session.sh gpu_pkgs $(b base fused fused base) \
  bench:base/llama-3.2-1b-sm_90:32768:r1t1,r8t1:no-baseline,mode=persistent \
  bench:fused/llama-3.2-1b-sm_90:32768:r1t1,r8t1:no-baseline,mode=persistent \
  bench:base/qwen3-8b-sm_90:1024:r1t1,r8t1,r1t6:no-baseline,mode=persistent \
  bench:fused/qwen3-8b-sm_90:1024:r1t1,r8t1,r1t6:no-baseline,mode=persistent
