#!/usr/bin/env bash
# Session 10, run 1: Llama-3.2-1B long-walk variants (sub-tiles 8, 4 tiles in flight) against base.
O=$OUT
b() { for v in "$@"; do echo "bench:$v/llama-3.2-1b-sm_90:1024:r1t1,r8t1:no-baseline,mode=persistent bench:$v/llama-3.2-1b-sm_90:32768:r1t1,r8t1:no-baseline,mode=persistent"; done; }
OUT=$O/a BUDGET_S=200 bash tools/gpu_session.sh gpu_pkgs $(b base s8 d9 d9s8)
OUT=$O/b BUDGET_S=200 bash tools/gpu_session.sh gpu_pkgs $(b d9s8 d9 s8 base)
c() { for v in "$@"; do echo "clock:$v/llama-3.2-1b-sm_90-clock:r8t1 clock:$v/llama-3.2-1b-sm_90-clock:r1t1,r8t1:32768"; done; }
OUT=$O/clk BUDGET_S=150 bash tools/gpu_session.sh gpu_pkgs $(c base s8 d9 d9s8)
