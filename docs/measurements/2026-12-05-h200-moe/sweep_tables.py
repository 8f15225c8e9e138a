"""Write run 3's schedule tables: the shipped sm_90 table with one entry more for the routed
1- and 8-row programs of Qwen3-30B-A3B (hidden 2048), each table one set of keys.

    python sweep_tables.py OUT_DIR      # then, per table: monobuild compile qwen3-30b-a3b-sm_90.yaml
                                        #   --schedule OUT_DIR/sm_90-vN.yaml --out .gpu/S/vN
"""

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
VARIANTS = {
    "v4": "max_split_qkv: 8, weight_stages: 5, block_n: 8",
    "v8": "weight_stages: 5",
    "v9": "block_n: 8",
    "v10": "block_n: 8, weight_stages: 5",
    "v11": "weight_stages: 4",
    "v12": "max_split_qkv: 8, block_n: 8",
    "v13": "max_split_qkv: 8, block_n: 8, weight_stages: 4",
    "p1": "l2_prefetch: 64",
    "p2": "l2_prefetch: 128",
    "p3": "l2_prefetch: 64, block_n: 8",
}


def main(out: Path) -> None:
    shipped = (REPO / "schedules" / "sm_90.yaml").read_text()
    out.mkdir(parents=True, exist_ok=True)
    for name, keys in VARIANTS.items():
        entries = "".join(f"- match: {{hidden: 2048, kind: moe, rows: {rows}, tokens: 1}}\n  set: {{{keys}}}\n"
                          for rows in (1, 8))
        (out / f"sm_90-{name}.yaml").write_text(shipped.replace("\nentries:\n", "\nentries:\n" + entries, 1))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
