#!/usr/bin/env bash
# Run 3: as run 2 (TASKS a constant), and the norms keep their rows and grid in their text (no band arguments).
# band of the default recipe: ROWS × NKV × SPLITS = 128), its rows and splits still run-time values.
# .gpu/n3: the default recipe at that tree; .gpu/old and /tmp/old as in run 1.
R=$PWD; P=llama-3.2-1b-sm_90/sm_90
python3 -m pip install -q --no-deps --no-build-isolation --target /tmp/old .gpu/head
python3 -m pip install -q --no-deps --no-build-isolation --target /tmp/new3 .
cd /tmp
for v in old n3 old n3; do [ $v = n3 ] && py=/tmp/new3 || py=/tmp/old; echo "--- $v"
  PYTHONPATH=$py timeout 90 python3 -m monobuild.cli.main bench $R/.gpu/$v/$P --context 1024 --mode staged --no-baseline 2>&1 \
    | grep -E "^r[0-9]t[0-9] +1024|rror"; done 2>&1 | tee $OUT/run3-bench.log
for v in old n3; do [ $v = n3 ] && py=/tmp/new3 && t=$R/tools || { py=/tmp/old; t=$R/.gpu/head/tools; }
  echo "--- $v r2t1"; PYTHONPATH=$py timeout 60 python3 $t/stage_times.py $R/.gpu/$v/$P --band r2t1 2>&1 | tail -13
done 2>&1 | tee $OUT/run3-stages.log
