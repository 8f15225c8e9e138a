"""The shipped sm_90 table with an entry for one of Llama-3.2-1B's layer programs in front (first
entry wins). Run 1, the 1 × 6 program: v1 streams it at block_k 128 with norm stages, v2 without
them, v3 at block_k 256. Run 2: v4 and v5 are v1 and v2 with qkv's K whole (max_split_qkv 1); s1
and s2 the shipped 1-row entry with max_split_qkv 1 and 2."""
import sys
from pathlib import Path

import yaml

VARIANTS = {
    "v1": {"streaming": 1, "block_k": 128, "max_split_qkv": 8, "weight_stages": 2, "ctas_per_sm": 1},
    "v2": {"streaming": 1, "block_k": 128, "max_split_qkv": 8, "weight_stages": 2, "ctas_per_sm": 1, "norm_stages": 0},
    "v3": {"streaming": 1, "block_k": 256, "max_split_qkv": 8, "weight_stages": 2, "ctas_per_sm": 1},
    "v4": {"streaming": 1, "block_k": 128, "max_split_qkv": 1, "weight_stages": 2, "ctas_per_sm": 1},
    "v5": {"streaming": 1, "block_k": 128, "max_split_qkv": 1, "weight_stages": 2, "ctas_per_sm": 1, "norm_stages": 0},
}
ONE_ROW = {"streaming": 1, "block_k": 256, "weight_stages": 2, "ctas_per_sm": 1, "norm_stages": 0}
ROW_VARIANTS = {"s1": {**ONE_ROW, "max_split_qkv": 1}, "s2": {**ONE_ROW, "max_split_qkv": 2}}
shipped = yaml.safe_load(Path("schedules/sm_90.yaml").read_text())
out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
for tokens, variants in ((6, VARIANTS), (1, ROW_VARIANTS)):
    for name, entry in variants.items():
        match = {"hidden": 2048, "kind": "layer", "rows": 1, "tokens": tokens}
        doc = dict(shipped, entries=[{"match": match, "set": entry}] + shipped["entries"])
        (out / f"{name}.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
