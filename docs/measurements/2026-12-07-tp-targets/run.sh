#!/usr/bin/env bash
# Llama-3.2-1B and Qwen3-30B-A3B (routed) split over 2, 4 and 8 ranks for sm_90, gfx942 and gfx950:
# the recipe of tests/data/llama-3.2-1b-tp2-sm_90.yaml (staged programs, bands 1 and 4, a 1 x 3
# verify band, a greedy head) with each model's config and each target's SM/CU count; a cold
# compile of each (an empty code-object cache) and `monobuild check` of all of them. CPU only;
# run from the repo root. MODELS (default: both) picks the configs of recipes/configs/.
set -eu -o pipefail
WORK=$(mktemp -d)
for model in ${MODELS:-llama-3.2-1b qwen3-30b-a3b}; do
  for t in sm_90:132 gfx942:304 gfx950:256; do
    for n in 2 4 8; do
      sed -e "s/target: sm_90/target: ${t%%:*}/" -e "s/sm_count: 132/sm_count: ${t##*:}/" \
          -e "s/tensor_parallel: 2/tensor_parallel: $n/" \
          -e "s#../../recipes/configs/llama-3.2-1b.json#$PWD/recipes/configs/$model.json#" \
          tests/data/llama-3.2-1b-tp2-sm_90.yaml > "$WORK/$model-tp$n-${t%%:*}.yaml"
    done
  done
done
for r in "$WORK"/*.yaml; do
  start=$(date +%s.%N)
  monobuild compile "$r" --out "$WORK/out" --cache "$WORK/cache-$(basename "$r" .yaml)" --jobs 2 --quiet
  printf '%-28s cold compile %6.1f s\n' "$(basename "$r" .yaml)" "$(echo "$(date +%s.%N) - $start" | bc)"
done
monobuild check "$WORK"/*.yaml --jobs 2
rm -rf "$WORK"
