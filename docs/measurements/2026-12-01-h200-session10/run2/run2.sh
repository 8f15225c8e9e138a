#!/usr/bin/env bash
# Session 10, run 2: timing-only bounds for Llama-3.2-1B's 8 rows: attention without reading qkv
# (wo), and also without its wait (wonw), against base; two benches in opposite orders, and clocks.
O=$OUT
b() { for v in "$@"; do echo "bench:$v/llama-3.2-1b-sm_90:1024:r1t1,r8t1:no-baseline,mode=persistent"; done; }
OUT=$O/a BUDGET_S=150 bash tools/gpu_session.sh gpu_pkgs $(b base wo wonw)
OUT=$O/b BUDGET_S=150 bash tools/gpu_session.sh gpu_pkgs $(b wonw wo base)
c() { for v in "$@"; do echo "clock:$v/llama-3.2-1b-sm_90-clock:r1t1,r8t1"; done; }
OUT=$O/clk BUDGET_S=120 bash tools/gpu_session.sh gpu_pkgs $(c wo wonw)
