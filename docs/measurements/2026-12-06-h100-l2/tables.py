"""The schedule tables of this folder's variants: the shipped table (schedules/sm_90.yaml) with
``l2_ahead: N`` set in every entry that streams (aN.yaml), and the same with Llama-3.2-1B's 1-row
layer entry at max_split_qkv 2 instead of 8 (aNs2.yaml; s2 of ../2026-12-06-h100-verify).
Usage: python tables.py OUT_DIR N [N ...]"""

import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[3]
LLAMA_ONE_ROW = {"hidden": 2048, "kind": "layer", "rows": 1, "tokens": 1}


def main() -> None:
    out, depths = Path(sys.argv[1]), [int(a) for a in sys.argv[2:]]
    table = yaml.safe_load((ROOT / "schedules" / "sm_90.yaml").read_text())
    out.mkdir(parents=True, exist_ok=True)
    for depth in depths:
        for name, qkv_splits in ((f"a{depth}", None), (f"a{depth}s2", 2)):
            entries = []
            for e in table["entries"]:
                s = dict(e["set"])
                if s.get("streaming"):
                    s["l2_ahead"] = depth
                if qkv_splits and e["match"] == LLAMA_ONE_ROW:
                    s["max_split_qkv"] = qkv_splits
                entries.append({**e, "set": s})
            (out / f"{name}.yaml").write_text(yaml.safe_dump({"defaults": table["defaults"], "entries": entries},
                                                             sort_keys=False))


if __name__ == "__main__":
    main()
