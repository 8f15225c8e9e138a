#!/usr/bin/env bash
# Routed layers on the streaming executor, run 2: Qwen3-30B-A3B's 1-, 2-, 4- and 8-row programs
# (qwen3-30b-a3b-sm_90.yaml here) built with the shipped table (t0: the routed programs on the
# Triton executor) and with tables.py's streaming variants (s1: as run 1; s2: without norm
# stages; s3: max_split_k 4, the o and down K splits; s4: max_split_qkv 4), paired on the same weights in three rounds.
# Packages (on the CPU machine, ir/ left out):
#   python $D/tables.py /tmp/ms
#   monobuild compile $D/qwen3-30b-a3b-sm_90.yaml --out .gpu/N/t0
#   monobuild compile $D/qwen3-30b-a3b-sm_90.yaml --schedule /tmp/ms/sm_90-sN.yaml --out .gpu/N/sN
# with D=docs/measurements/2026-12-05-h200-moe-stream.
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
R=docs/measurements/2026-12-05-h200-moe
P=qwen3-30b-a3b-sm_90/sm_90
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.total --format=csv > "$OUT/device.txt" 2>&1
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
{
echo "=== paired"
timeout 500 python3 $R/paired.py 1024 3 .gpu/N/t0/$P .gpu/N/s1/$P .gpu/N/s2/$P .gpu/N/s3/$P .gpu/N/s4/$P 2>&1 \
  | grep -v Warning
echo "=== done at ${SECONDS}s"
} 2>&1 | tee "$OUT/run2.log"
