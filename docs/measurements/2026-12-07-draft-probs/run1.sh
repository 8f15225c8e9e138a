#!/usr/bin/env bash
# One device call, two trees:
#  B. this tree (verify.draft_probs): run3.sh, the GPU tests of the sampling head (.gpu/Q: Llama-3.2-1B's
#     default package, which the GPU tests require; the draft-probability package,
#     tests/data/llama-3.2-1b-draft-probs-sm_90.yaml; the sampling package,
#     docs/measurements/2026-12-04-h200-serving/llama-3.2-1b-sample-sm_90.yaml), then what the
#     verdict costs a step (verify_cost.py); first, as it is short;
#  A. the routed FP8 streaming change (docs/measurements/2026-12-07-moe-fp8/stream-fp8.patch, not
#     landed), its tree extracted into .gpu/sf, run by that folder's run2.sh against .gpu/N (that
#     tree's packages) and .gpu/OLD (af53948's).
# `run1.sh 1` runs B and A's steps 1-2, `run1.sh 2` A's steps 3-4 (two calls of at most ten minutes).
set -u -o pipefail
ROOT=$PWD
PART=${1:-all}
[ "$PART" != 2 ] && bash docs/measurements/2026-12-07-draft-probs/run3.sh
mkdir -p .gpu/sf/.gpu && ln -sfn "$ROOT/.gpu/N" .gpu/sf/.gpu/N && ln -sfn "$ROOT/.gpu/OLD" .gpu/sf/.gpu/OLD
cd .gpu/sf && bash docs/measurements/2026-12-07-moe-fp8/run2.sh "$PART"
