"""A layer launch's timeline from a stage-clock capture (tools/stage_clock.py --save): for each
stage, its CTAs' start and end times (µs from the launch's first start; the minimum, 10th
percentile, median, 90th percentile and maximum), over the CTAs that ran it, medians of each
statistic over the layer launches (the first and last left out).

    python timeline.py run2/clock-s1-r1t1.pt ...
"""
import statistics
import sys

import torch

QUANTILES = torch.tensor([0.0, 0.1, 0.5, 0.9, 1.0], dtype=torch.double)

for path in sys.argv[1:]:
    d = torch.load(path, weights_only=False)
    clock = d["clock"].double()  # [launch, CTA, slot]: slot 0 the SM, then each stage's start and end (ns)
    layers = [i for i, name in enumerate(d["launches"]) if str(name).startswith("layer")][1:-1]
    stages = max(k + 1 for k in range((clock.shape[2] - 1) // 2) if (clock[layers[0], :, 1 + 2 * k] > 0).any())
    print(f"{path} ({d['launches'][layers[0]]}), µs: stage: start quantiles | end quantiles")
    per_stage = {k: ([], []) for k in range(stages)}
    for i in layers:
        ran = clock[i][clock[i, :, 1] > 0]
        t0 = ran[:, 1].min()
        for k in range(stages):
            for side, slot in ((0, 1 + 2 * k), (1, 2 + 2 * k)):
                per_stage[k][side].append(torch.quantile((ran[:, slot] - t0) / 1000, QUANTILES))
    for k, (starts, ends) in per_stage.items():
        fmt = lambda qs: " ".join(f"{statistics.median(float(q[j]) for q in qs):6.2f}" for j in range(5))  # noqa: E731
        print(f"  {k}: {fmt(starts)} | {fmt(ends)}")
