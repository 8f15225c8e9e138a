"""A split package's decode step, one rank a GPU, against the whole model's package on one GPU,
in one run (issue 24's targets: Qwen3-8B over 2 ranks at 1 row ≤ 0.55× the unsplit step;
Llama-3.1-8B's geometry over 2 ranks at 8 rows ≤ 1.10× its 1-row step).

The unsplit package runs first on GPU 0 (random weights, seed 0; a random paged KV cache and
inputs, seeded by the context); then one process a rank (``torch.multiprocessing``, an NCCL
group), each on its GPU, binds its shard of the same weights and its KV heads of the same cache
(``Package.bind(..., group=)``) and times the same step, captured in a CUDA graph of its own
(``bench.run.time_replays``). Rank 0 gathers every rank's logits rows: the table gives each
band's median and p90 step on both sides, their ratio, the split logits' error relative to the
unsplit package's, and whether rank 0's ids are the unsplit package's wherever its top-2 margin
is wider than that error.

Usage::

    python tools/parallel_bench.py --split PKG_DIR --whole PKG_DIR [--context 1024]
        [--band r1t1 --band r8t1] [--mode persistent] [--iters 200] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from monobuild import runtime
from monobuild.bench.cases import blocks_needed, random_case, random_kv_cache, random_state_dict
from monobuild.bench.run import time_replays
from monobuild.parallel import TensorParallel
from monobuild.runtime.shards import shard_state_dict


def _case(pkg, band, context: int):
    blocks = blocks_needed(pkg, band.rows, context)
    cache = random_kv_cache(pkg, blocks, seed=context)
    inputs = random_case(pkg, [context] * band.rows, band.tokens, blocks, seed=context).inputs
    return cache, (inputs.tokens, inputs.positions, inputs.block_tables, inputs.context_lens)


def _bands(pkg, names: list[str]):
    bands = sorted({s.band for s in pkg.manifest.steps}, key=lambda b: (b.tokens, b.rows))
    return [b for b in bands if not names or b.name in names]


def whole_side(path: str, names: list[str], mode: str, context: int, iters: int) -> dict:
    """The unsplit package on GPU 0: each band's step times, logits and ids."""
    pkg = runtime.load(path, 0)
    weights = pkg.bind_weights(random_state_dict(pkg, seed=0))
    out = {}
    for band in _bands(pkg, names):
        cache, args = _case(pkg, band, context)
        step = pkg.bind(weights, cache, mode)
        times = time_replays(lambda step=step, args=args: step(*args), iters)
        ids = step(*args).clone()
        out[band.name] = {"times": times, "logits": step.logits.float().cpu(), "ids": ids.cpu()}
        del cache, step
        torch.cuda.empty_cache()
    return out


def rank_side(rank: int, ranks: int, port: int, path: str, names: list[str], mode: str, context: int, iters: int,
              result: str) -> None:
    """One rank of the split package on GPU ``rank`` (a process of ``mp.spawn``)."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=ranks, device_id=torch.device("cuda", rank))
    pkg = runtime.load(path, rank)
    g, tp = pkg.geometry, TensorParallel(ranks)
    sd = random_state_dict(pkg, seed=0)  # the whole model's, the same bits on every GPU
    shard = shard_state_dict(sd, g, tp, rank)
    out = {}
    for band in _bands(pkg, names):
        cache, args = _case(pkg, band, context)
        heads = tp.kv_heads(g, rank)
        mine = runtime.KVCache(tuple(t[..., heads, :].clone() for t in cache.k),
                               tuple(t[..., heads, :].clone() for t in cache.v))
        del cache
        step = pkg.bind(shard, mine, mode)
        times = time_replays(lambda step=step, args=args: step(*args), iters)
        ids = step(*args).clone()
        rows = step.logits.float().contiguous()
        gathered = [torch.empty_like(rows) for _ in range(ranks)]
        dist.all_gather(gathered, rows)
        if rank == 0:
            logits = torch.cat(gathered, dim=-1)[:, :g.vocab]
            out[band.name] = {"times": times, "logits": logits.cpu(), "ids": ids.cpu()}
        del mine, step
        torch.cuda.empty_cache()
    if rank == 0:
        torch.save(out, result)
    dist.barrier()
    dist.destroy_process_group()


def compare(whole: dict, split: dict) -> list[dict]:
    rows = []
    for name, w in whole.items():
        s = split[name]
        err = ((s["logits"].double() - w["logits"].double()).norm() / w["logits"].double().norm()).item()
        top2 = w["logits"].topk(2, dim=-1).values
        decided = top2[:, 0] - top2[:, 1] > (s["logits"] - w["logits"]).abs().amax(-1)
        same = bool(torch.equal(s["ids"].long()[decided], w["ids"].long()[decided]))
        w_med, s_med = statistics.median(w["times"]), statistics.median(s["times"])
        rows.append({"band": name, "whole_ms": w_med, "split_ms": s_med, "ratio": s_med / w_med,
                     "whole_p90": sorted(w["times"])[int(0.9 * len(w["times"]))],
                     "split_p90": sorted(s["times"])[int(0.9 * len(s["times"]))],
                     "logits_rel_err": err, "ids_decided": int(decided.sum()), "ids_same_where_decided": same})
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--split", required=True, help="the package split over ranks (its <target> directory)")
    parser.add_argument("--whole", required=True, help="the same model's unsplit package")
    parser.add_argument("--context", type=int, default=1024)
    parser.add_argument("--band", action="append", default=[], help="only these bands (default: every band)")
    parser.add_argument("--mode", default="persistent", choices=["persistent", "staged"])
    parser.add_argument("--iters", type=int, default=200)
    parser.add_argument("--json", help="also write the rows here")
    a = parser.parse_args()
    ranks = runtime.read_manifest(a.split).deployment.tensor_parallel
    if ranks < 2 or torch.cuda.device_count() < ranks:
        print(f"{a.split}: {ranks} ranks, {torch.cuda.device_count()} GPUs visible", file=sys.stderr)
        return 2
    whole = whole_side(a.whole, a.band, a.mode, a.context, a.iters)
    with socket.socket() as s:  # a free port for the ranks' rendezvous
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    result = Path(a.json or "parallel_bench").with_suffix(".pt")
    mp.spawn(rank_side, args=(ranks, port, a.split, a.band, a.mode, a.context, a.iters, str(result)), nprocs=ranks)
    rows = compare(whole, torch.load(result))
    print(f"{torch.cuda.get_device_name(0)} x{ranks}, context {a.context}, mode {a.mode}, {a.iters} replays")
    print(f"{'band':6} {'unsplit ms':>11} {'split ms':>9} {'ratio':>6} {'p90 ms':>13} {'logits err':>11} ids")
    for r in rows:
        print(f"{r['band']:6} {r['whole_ms']:11.3f} {r['split_ms']:9.3f} {r['ratio']:6.3f} "
              f"{r['whole_p90']:6.3f}/{r['split_p90']:6.3f} {r['logits_rel_err']:11.2e} "
              f"{'same' if r['ids_same_where_decided'] else 'DIFFER'} ({r['ids_decided']} decided)")
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))
    return 0 if all(r["ids_same_where_decided"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
