"""The logits and temperatures verify_cost.py and flat_cost.py time their settings at, saved for
reading their allowed sets offline: the 2 × 4 verify band's (seed 5, as verify_cost.py binds
it) and the sampling package's 1-row band's (as flat_cost.py binds it).

    python3 dump_logits.py DRAFT_PROBS_PACKAGE SAMPLE_PACKAGE OUT.pt
"""

import sys

import torch

from monobuild import runtime
from monobuild.bench.cases import random_band_step, random_case, random_kv_cache, random_state_dict

out = {}
pkg = runtime.load(sys.argv[1])
dev, vocab = pkg.device, pkg.geometry.vocab
step = pkg.bind(pkg.bind_weights(random_state_dict(pkg, seed=5)), random_kv_cache(pkg, 640, 3), "persistent")
i = random_case(pkg, [1024, 1024], 4, 640, 3).inputs
sampling = runtime.Sampling(torch.zeros(2, device=dev), torch.zeros(2, dtype=torch.int32, device=dev),
                            torch.ones(2, device=dev), torch.tensor([1, 2], device=dev),
                            torch.full((2, 3, vocab), 1 / vocab, device=dev))
step(i.tokens, i.positions, i.block_tables, i.context_lens, sampling=sampling)
top = step.logits[0].double().sort(descending=True).values
out["verify"] = (step.logits.float().cpu().clone(), float(top[0] - top[19]) / 3)
pkg = runtime.load(sys.argv[2])
step, i, rows, _ = random_band_step(pkg, "r1t1", 1024, "persistent")
s = runtime.Sampling(torch.zeros(rows, device=dev), torch.zeros(rows, dtype=torch.int32, device=dev),
                     torch.ones(rows, device=dev), torch.arange(rows, device=dev) + 5)
step(i.tokens, i.positions, i.block_tables, i.context_lens, sampling=s)
top = step.logits[0].double().sort(descending=True).values
out["r1t1"] = (step.logits.float().cpu().clone(), float(top[0] - top[19]) / 3)
torch.save(out, sys.argv[3])
for name, (logits, t) in out.items():
    print(name, tuple(logits.shape), f"temperature {t:.3f}")
