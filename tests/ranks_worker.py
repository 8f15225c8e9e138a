"""Child process of test_runtime_gpu's one-rank-a-process test: rank RANK of a package split over
2 ranks, bound in this process (``Package.bind(..., group=)``: a gloo group over a file store, the
ranks' buffers exchanged as CUDA IPC handles), on its shard of the test's random checkpoint and
its KV heads' caches; a step, the same step again, then the step captured in a CUDA graph of its
own and replayed. Writes the ids to OUT/rank<RANK>.pt.

Usage: python -m tests.ranks_worker PACKAGE RANK STORE OUT CONTEXTS_JSON TOKENS SEED
"""

import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist

from monobuild import runtime
from monobuild.bench.cases import random_case, random_kv_cache, random_state_dict
from monobuild.parallel import TensorParallel
from monobuild.runtime.shards import shard_state_dict

NUM_BLOCKS = 640  # test_runtime_gpu's


def main(package: str, rank: int, store: str, out: Path, contexts: list[int], tokens: int, seed: int) -> None:
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    pkg = runtime.load(package)
    g, tp = pkg.geometry, TensorParallel(2)
    sd = random_state_dict(pkg, seed=9)
    cache = random_kv_cache(pkg, NUM_BLOCKS, seed)
    i = random_case(pkg, contexts, tokens, NUM_BLOCKS, seed).inputs
    heads = tp.kv_heads(g, rank)
    mine = runtime.KVCache(tuple(t[..., heads, :].clone() for t in cache.k),
                           tuple(t[..., heads, :].clone() for t in cache.v))
    del cache
    step = pkg.bind(shard_state_dict(sd, g, tp, rank), mine)
    args = (i.tokens, i.positions, i.block_tables, i.context_lens)
    first = step(*args).clone()
    again = step(*args).clone()  # the appends land in the same slots; the counters are a step further
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = step(*args)
    captured.fill_(-1)
    graph.replay()
    torch.cuda.synchronize()
    torch.save({"first": first.cpu(), "again": again.cpu(), "graph": captured.cpu()}, out / f"rank{rank}.pt")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    a = sys.argv[1:]
    main(a[0], int(a[1]), a[2], Path(a[3]), json.loads(a[4]), int(a[5]), int(a[6]))
