"""The shipped sm_90 table with experts_up's K split allowed in two (max_split_up 2) in the routed
1- and 2-row entries of hidden 2048 (Qwen3-30B-A3B's, and the GPU tests' qwen3-moe-mixed). The
planner takes the split where it lowers the units experts_up's busiest CTA waits for
(``Tiling.up_split``): at 1 row, 8 slots × 24 tiles are 192 tasks on 132 CTAs, 16 units for the
60 CTAs with two tasks; split, 384 tasks of 4 units, 12 at most. At 2 rows (16 slots, 384 tasks)
it finds no gain and keeps K whole.

    python tables.py OUT    # writes OUT/split.yaml
"""
import sys
from pathlib import Path

import yaml

shipped = yaml.safe_load(Path("schedules/sm_90.yaml").read_text())
out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
entries = []
for entry in shipped["entries"]:
    m = entry["match"]
    if m.get("hidden") == 2048 and m.get("kind") == "moe" and m.get("rows") in (1, 2) and m.get("tokens") == 1:
        entry = dict(entry, set=dict(entry["set"], max_split_up=2))
    entries.append(entry)
(out / "split.yaml").write_text(yaml.safe_dump(dict(shipped, entries=entries), sort_keys=False))
