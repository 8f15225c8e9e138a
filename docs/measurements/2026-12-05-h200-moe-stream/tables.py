"""Write runs 2 to 4's schedule tables: the shipped sm_90 table (commit 1a3a369's, where no routed program
streams) with the routed 1-, 2-, 4- and 8-row programs of hidden 2048 streaming, in variants.

    python tables.py OUT_DIR
"""

import sys
from pathlib import Path

import yaml

STREAM = {"streaming": 1, "block_k": 256, "max_split_qkv": 8, "weight_stages": 2, "ctas_per_sm": 1}
VARIANTS = {
    "s1": STREAM,
    "s2": {**STREAM, "norm_stages": 0},
    "s3": {**STREAM, "max_split_k": 4},
    "s4": {**STREAM, "max_split_qkv": 4},
    "s5": {**STREAM, "max_split_qkv": 4, "norm_stages": 0},
    "s6": {**STREAM, "max_split_qkv": 2},
    "s7": {**STREAM, "max_split_qkv": 2, "norm_stages": 0},
    "s8": {**STREAM, "max_split_qkv": 1, "norm_stages": 0},
    "s9": {**STREAM, "max_split_qkv": 1},
}


def main(out: Path) -> None:
    shipped = yaml.safe_load((Path(__file__).parents[3] / "schedules" / "sm_90.yaml").read_text())
    for name, entry in VARIANTS.items():
        doc = {**shipped, "entries": [{"match": {"hidden": 2048, "kind": "moe", "rows": rows, "tokens": 1}, "set": entry}
                                      for rows in (1, 2, 4, 8)] + shipped["entries"]}
        (out / f"sm_90-{name}.yaml").write_text(yaml.safe_dump(doc, sort_keys=False, allow_unicode=True, width=10000))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
