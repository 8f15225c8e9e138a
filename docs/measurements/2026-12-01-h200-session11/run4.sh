#!/usr/bin/env bash
# Session 11, run 4: the profiling build's clocks of the shipped programs (base) in CUDA-graph
# replay, as the bench times the step, beside eager steps as tools/stage_clock.py ran them until now.
O=$OUT; mkdir -p $O/clk
python3 -m pip install -q --no-deps --no-build-isolation -e . > /dev/null 2>&1
for band in r1t1 r8t1; do for how in "" --eager; do
  timeout 90 python3 tools/stage_clock.py gpu_pkgs/base/llama-3.2-1b-sm_90-clock/sm_90 --band $band $how 2>&1 \
    | tee -a $O/clk/clock.txt; done; done
