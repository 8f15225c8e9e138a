"""The shipped sm_90 table with an entry for Llama-3.2-1B's 1 × 6 layer program in front (first
entry wins): v1 streams it at block_k 128 with norm stages, v2 without them, v3 at block_k 256."""
import sys
from pathlib import Path

import yaml

VARIANTS = {
    "v1": {"streaming": 1, "block_k": 128, "max_split_qkv": 8, "weight_stages": 2, "ctas_per_sm": 1},
    "v2": {"streaming": 1, "block_k": 128, "max_split_qkv": 8, "weight_stages": 2, "ctas_per_sm": 1, "norm_stages": 0},
    "v3": {"streaming": 1, "block_k": 256, "max_split_qkv": 8, "weight_stages": 2, "ctas_per_sm": 1},
}
shipped = yaml.safe_load(Path("schedules/sm_90.yaml").read_text())
out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
for name, entry in VARIANTS.items():
    doc = dict(shipped, entries=[{"match": {"hidden": 2048, "kind": "layer", "rows": 1, "tokens": 6}, "set": entry}]
               + shipped["entries"])
    (out / f"{name}.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
