#!/usr/bin/env bash
# Run 2: the staged attention with its task count a constant (TASKS, which is the same in every
# band of the default recipe: ROWS × NKV × SPLITS = 128), its rows and splits still run-time values.
# .gpu/n2: the default recipe at that tree; .gpu/old and /tmp/old as in run 1.
R=$PWD; P=llama-3.2-1b-sm_90/sm_90
python3 -m pip install -q --no-deps --no-build-isolation --target /tmp/old .gpu/head
python3 -m pip install -q --no-deps --no-build-isolation --target /tmp/new2 .
cd /tmp
for v in old n2 old n2; do [ $v = n2 ] && py=/tmp/new2 || py=/tmp/old; echo "--- $v"
  PYTHONPATH=$py timeout 90 python3 -m monobuild.cli.main bench $R/.gpu/$v/$P --context 1024 --mode staged --no-baseline 2>&1 \
    | grep -E "^r[0-9]t[0-9] +1024|rror"; done 2>&1 | tee $OUT/run2-bench.log
for v in old n2; do [ $v = n2 ] && py=/tmp/new2 && t=$R/tools || { py=/tmp/old; t=$R/.gpu/head/tools; }
  echo "--- $v r2t1"; PYTHONPATH=$py timeout 60 python3 $t/stage_times.py $R/.gpu/$v/$P --band r2t1 2>&1 | tail -13
done 2>&1 | tee $OUT/run2-stages.log
