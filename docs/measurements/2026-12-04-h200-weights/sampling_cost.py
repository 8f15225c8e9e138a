"""The step of a sampling package by setting (greedy, temperature alone, top-k, top-p, both), 1 and
8 rows at context 1024, persistent, random weights: median of 200 CUDA-graph replays each.
Usage: python sampling_cost.py PACKAGE"""

import statistics
import sys

import torch

from monobuild import runtime
from monobuild.bench.cases import random_band_step
from monobuild.bench.run import time_replays

pkg = runtime.load(sys.argv[1])
for band in ("r1t1", "r8t1"):
    step, i, rows, _ = random_band_step(pkg, band, 1024, "persistent")
    dev = pkg.device
    for name, (t, k, p) in {"greedy (temperature 0)": (0.0, 0, 1.0), "temperature 1": (1.0, 0, 1.0),
                            "temperature 1, top-k 50": (1.0, 50, 1.0), "temperature 1, top-p 0.9": (1.0, 0, 0.9),
                            "temperature 0.7, top-k 50, top-p 0.9": (0.7, 50, 0.9)}.items():
        s = runtime.Sampling(torch.full((rows,), t, device=dev), torch.full((rows,), k, dtype=torch.int32, device=dev),
                             torch.full((rows,), p, device=dev), torch.arange(rows, device=dev) + 5)
        run = lambda step=step, i=i, s=s: step(i.tokens, i.positions, i.block_tables, i.context_lens,  # noqa: E731
                                               sampling=s)
        ms = statistics.median(time_replays(run, 200))
        print(f"{band} ctx 1024 persistent, {name}: {ms:.3f} ms", flush=True)
