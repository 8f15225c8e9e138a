"""What the draft-probability verdict costs a step: the 2 × 4 verify band of
tests/data/llama-3.2-1b-draft-probs-sm_90.yaml (Llama-3.2-1B, context 1024, persistent, a CUDA
graph replayed 200 times a setting), both rows with one setting: greedy; a temperature over every
id; within top-k 50; within top-p 0.9; each with proposals equal to the target (every draft
kept: the verdict's probability reads, and for top-k / top-p the threshold search at each
position) and uniform ones (the first draft rejected: one correction pass as well).

    python3 verify_cost.py PACKAGE_DIR
"""

import statistics
import sys

import torch

from monobuild import runtime
from monobuild.bench.cases import random_case, random_kv_cache, random_state_dict

pkg = runtime.load(sys.argv[1])
dev, vocab = pkg.device, pkg.geometry.vocab
weights = pkg.bind_weights(random_state_dict(pkg, seed=5))
cache = random_kv_cache(pkg, 640, 3)
i = random_case(pkg, [1024, 1024], 4, 640, 3).inputs
step = pkg.bind(weights, cache, "persistent")
sampling = runtime.Sampling(torch.zeros(2, device=dev), torch.zeros(2, dtype=torch.int32, device=dev),
                            torch.ones(2, device=dev), torch.tensor([1, 2], device=dev),
                            torch.full((2, 3, vocab), 1 / vocab, device=dev))
step(i.tokens, i.positions, i.block_tables, i.context_lens, sampling=sampling)
top = step.logits[0].double().sort(descending=True).values
spread = float(top[0] - top[19]) / 3  # the 20th largest logit three temperatures below the largest
target = torch.softmax(step.logits.view(2, 4, -1)[:, :3].double() / spread, -1).float()
graph = torch.cuda.CUDAGraph()
with torch.cuda.graph(graph):
    step(i.tokens, i.positions, i.block_tables, i.context_lens, sampling=sampling)
print(f"{'setting':16} {'proposal':9} {'median ms':>10} {'kept':>5}")
for name, (temperature, top_k, top_p) in {"greedy": (0.0, 0, 1.0), "every id": (spread, 0, 1.0),
                                          "top-k 50": (spread, 50, 1.0), "top-p 0.9": (spread, 0, 0.9)}.items():
    for proposal, q in (("target", target), ("uniform", torch.full_like(target, 1 / vocab))):
        sampling.temperature.fill_(temperature)
        sampling.top_k.fill_(top_k)
        sampling.top_p.fill_(top_p)
        sampling.draft_probs.copy_(q)
        times = []
        for _ in range(220):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            graph.replay()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        kept = step.verdict[0].tolist()
        print(f"{name:16} {proposal:9} {statistics.median(times[20:]):10.4f} {str(kept):>5}")
