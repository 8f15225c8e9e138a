"""A sampling package's step by setting where the distribution is flat: bands r1t1 and r8t1 of
docs/measurements/2026-12-04-h200-serving/llama-3.2-1b-sample-sm_90.yaml at context 1024,
persistent, random weights, every row at a temperature that puts the 20th largest logit of the
first row three temperatures below its largest (most of the mass in the vocabulary's bulk, so
that most first draws fall outside a top-k or top-p set, as ../2026-12-07-draft-probs/verify_cost.py
has it for the verify band): greedy, every id, top-k 50, top-p 0.9; median of 200 CUDA-graph
replays each (bench.run.time_replays).

    python3 flat_cost.py PACKAGE_DIR
"""

import statistics
import sys

import torch

from monobuild import runtime
from monobuild.bench.cases import random_band_step
from monobuild.bench.run import time_replays

pkg = runtime.load(sys.argv[1])
dev = pkg.device
for band in ("r1t1", "r8t1"):
    step, i, rows, _ = random_band_step(pkg, band, 1024, "persistent")
    s = runtime.Sampling(torch.zeros(rows, device=dev), torch.zeros(rows, dtype=torch.int32, device=dev),
                         torch.ones(rows, device=dev), torch.arange(rows, device=dev) + 5)
    run = lambda step=step, i=i, s=s: step(i.tokens, i.positions, i.block_tables, i.context_lens,  # noqa: E731
                                           sampling=s)
    run()
    top = step.logits[0].double().sort(descending=True).values
    spread = float(top[0] - top[19]) / 3
    for name, (t, k, p) in {"greedy": (0.0, 0, 1.0), "every id": (spread, 0, 1.0), "top-k 50": (spread, 50, 1.0),
                            "top-p 0.9": (spread, 0, 0.9)}.items():
        s.temperature.fill_(t)
        s.top_k.fill_(k)
        s.top_p.fill_(p)
        ms = statistics.median(time_replays(run, 200))
        print(f"{band} ctx 1024 persistent, temperature {t:.3f}, {name}: {ms:.3f} ms", flush=True)
