"""The shipped sm_90 table with Llama-3.2-1B's 1-, 2-, 4- and 8-row layer entries (hidden 2048,
streaming) given qkv's K in fewer splits: q1 leaves it whole (max_split_qkv 1), q2 in two. Every
band's attention then reads as many partials of q, k and v, so the staged programs still share
their attention code object (the reason the 1-row program alone kept 8 splits,
../2026-12-06-h200-up-s2). The 1 × 6 band's streamed program measured 1.222 → 1.166 ms with qkv's K whole
(../2026-12-06-h100-verify run 2), its attention reading one partial of q, k and v instead of
eight; the multi-row bands' programs read eight today.

    python tables.py OUT    # writes OUT/q1.yaml, OUT/q2.yaml
"""
import sys
from pathlib import Path

import yaml

SPLITS = {"q1": 1, "q2": 2}
shipped = yaml.safe_load(Path("schedules/sm_90.yaml").read_text())
out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
for name, split in SPLITS.items():
    entries = []
    for entry in shipped["entries"]:
        m = entry["match"]
        if m.get("hidden") == 2048 and m.get("kind") == "layer" and m.get("rows") in (1, 2, 4, 8) and m.get("tokens") == 1:
            entry = dict(entry, set=dict(entry["set"], max_split_qkv=split))
        entries.append(entry)
    (out / f"{name}.yaml").write_text(yaml.safe_dump(dict(shipped, entries=entries), sort_keys=False))
