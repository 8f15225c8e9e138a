#!/usr/bin/env bash
# Session 11, run 3: what programmatic dependent launch already hides of a launch a layer. The
# base and fused steps with and without PDL (--no-pdl: the driver serializes the launches), and
# each launch timed on its own (events between launches: no overlap at all).
O=$OUT
OUT=$O/a BUDGET_S=300 bash tools/gpu_session.sh gpu_pkgs \
  bench:base/llama-3.2-1b-sm_90:1024:r1t1,r8t1:no-baseline,mode=persistent,no-pdl \
  bench:fused/llama-3.2-1b-sm_90:1024:r1t1,r8t1:no-baseline,mode=persistent,no-pdl \
  bench:fused/llama-3.2-1b-sm_90:1024:r1t1,r8t1:no-baseline,mode=persistent \
  bench:base/llama-3.2-1b-sm_90:1024:r1t1,r8t1:no-baseline,mode=persistent \
  bench:base/qwen3-8b-sm_90:1024:r1t1:no-baseline,mode=persistent,no-pdl \
  bench:fused/qwen3-8b-sm_90:1024:r1t1:no-baseline,mode=persistent,no-pdl
for v in base fused; do for band in r1t1 r8t1; do
  timeout 60 python3 tools/stage_times.py gpu_pkgs/$v/llama-3.2-1b-sm_90/sm_90 --band $band --mode persistent 2>&1 \
    | tee -a $O/a/launch_times.txt; done; done
