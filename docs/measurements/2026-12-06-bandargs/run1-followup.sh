#!/usr/bin/env bash
# Run 1's follow-up on the same warm machine: run1.sh's O benches printed nothing (the checkout's
# editable install shadowed the parent's runtime, which then refused its format-6 manifest), so
# both builds were installed apart (--target) and run from outside the checkout.
# run1-bench.log: the staged step, O (parent) / N (band arguments) in turn.
# run1-stages.log: tools/stage_times.py, each staged launch timed alone, both builds, r2t1 and r1t1.
R=$PWD; P=llama-3.2-1b-sm_90/sm_90
python3 -m pip uninstall -y -q monobuild; python3 -m pip install -q --no-deps --no-build-isolation --target /tmp/new .
cd /tmp
for v in old tp old tp; do [ $v = tp ] && py=/tmp/new || py=/tmp/old; echo "--- $v"
  PYTHONPATH=$py timeout 90 python3 -m monobuild.cli.main bench $R/.gpu/$v/$P --context 1024 --mode staged --no-baseline 2>&1 \
    | grep -E "^r[0-9]t[0-9] +1024|rror"; done 2>&1 | tee $OUT/run1-bench.log
for v in old tp; do [ $v = tp ] && py=/tmp/new && t=$R/tools || { py=/tmp/old; t=$R/.gpu/head/tools; }
  for b in r2t1 r1t1; do echo "--- $v $b"; PYTHONPATH=$py timeout 60 python3 $t/stage_times.py $R/.gpu/$v/$P --band $b 2>&1 | tail -14; done
done 2>&1 | tee $OUT/run1-stages.log
