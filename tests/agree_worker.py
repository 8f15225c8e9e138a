"""Child process of test_tensor_parallel's agreed-refusal test: rank RANK of a split package binds
in a 2-rank gloo group on the CPU (``Package.bind(..., group=)``; the package is never launched),
rank 1 with one tensor of its shard missing. Prints what ``bind`` raised, as one JSON line.

Usage: python -m tests.agree_worker PACKAGE RANK STORE
"""

import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist

from monobuild.bench.checkpoints import random_hf_state_dict
from monobuild.manifest import read_manifest
from monobuild.parallel import TensorParallel
from monobuild.runtime.kvcache import allocate_kv_cache
from monobuild.runtime.package import Package
from monobuild.runtime.shards import shard_state_dict


def main(path: Path, rank: int, store: str) -> dict:
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    package = Package(path, read_manifest(path), torch.device("cpu"), {})
    g, tp = package.geometry, TensorParallel(2)
    shard = shard_state_dict(random_hf_state_dict(g, package.dtype, torch.Generator().manual_seed(0)), g, tp, rank)
    if rank == 1:
        del shard["model.layers.1.mlp.down_proj.weight"]
    cache = allocate_kv_cache(tp.rank_geometry(g), package.block_size, package.kv_dtype, 4, "cpu")
    try:
        package.bind(shard, cache)
        raised = None
    except Exception as e:  # noqa: BLE001 (what bind raised is the result)
        raised = f"{type(e).__name__}: {e}"
    dist.destroy_process_group()
    return {"rank": rank, "raised": raised}


if __name__ == "__main__":
    print(json.dumps(main(Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3])))
