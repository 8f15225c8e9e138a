"""tools/kv_access.py, the KV-stream micro-benchmark: each of its walks reads every element of the
cache exactly once, whatever the block table, and its checksum tells a walk that misses a tile.
Run under the Triton interpreter (CPU) on a small cache, in fp16: the walks' addressing does not
depend on the dtype, and Triton 3.6's interpreter gets a bf16 product of a converted constant tile
(the walks' tile of ones) wrong, where fp16 and fp32 come out exact."""

import json
import os
import subprocess
import sys
from pathlib import Path

TOOL = Path(__file__).parent.parent / "tools" / "kv_access.py"

WORKER = """
import importlib.util, json, sys, torch
spec = importlib.util.spec_from_file_location("kv_access", sys.argv[1])
kv = importlib.util.module_from_spec(spec)
spec.loader.exec_module(kv)
torch.manual_seed(int(sys.argv[2]))
grid, n_tiles, tokens = kv.NKV, 2, 128  # one CTA per KV head; a tile is one page of every KV head
pages = grid * n_tiles * tokens // kv.BS // kv.NKV
cache = torch.randint(1, 3, (pages * kv.BS * kv.NKV * kv.D,)).to(torch.float16)  # > 0: a missed tile always shows
out = {}
for mode in kv.MODES:
    for name, table in (("ordered", torch.arange(pages, dtype=torch.int32)),
                        ("random", torch.randperm(pages).to(torch.int32))):
        runs = []
        for tiles in (n_tiles, n_tiles - 1):
            sink = torch.zeros(grid * kv.NKV * kv.D)
            kv.stream(mode, cache, table, sink, grid, tiles, tokens, 2)
            runs.append(kv.checksum_matches(cache, sink))
        out[f"{mode}/{name}"] = runs
print(json.dumps(out))
"""


def test_every_walk_reads_the_cache_once_and_a_short_walk_is_caught():
    seed = int.from_bytes(os.urandom(4), "little")
    env = dict(os.environ, TRITON_INTERPRET="1")
    proc = subprocess.run([sys.executable, "-c", WORKER, str(TOOL), str(seed)], env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(result) == 6, result
    for walk, (full, short) in result.items():
        assert full, f"seed {seed}: the {walk} walk's checksum is not 16 × the cache's sum"
        assert not short, f"seed {seed}: the {walk} walk missed its CTAs' last tiles and the checksum did not tell"
