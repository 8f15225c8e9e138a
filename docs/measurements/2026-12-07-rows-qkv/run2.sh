#!/usr/bin/env bash
# Run 2: q1, R and q2 benched in turn three more times (the packages of run 1), context 1024.
P=llama-3.2-1b-sm_90
for v in q1 R q2 q1 R q2 q1 R q2; do
  echo "--- $v"
  timeout 100 monobuild bench .gpu/v/$v/$P/sm_90 --context 1024 --mode persistent --no-baseline \
    --band r1t1 --band r2t1 --band r4t1 --band r8t1 2>&1 | grep -E "^r.t1 "
done 2>&1 | tee "$OUT/run2.log"
