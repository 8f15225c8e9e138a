"""Each sync edge's latency in a stage-clock capture (tools/stage_clock.py --save): per layer launch
(the first and last left out), the time from the last CTA's end of the producing stage to the first
CTA's start of the consuming one, medians over the launches, in µs.

    python edges.py run1/clock-R-r1t1.pt ...
"""
import statistics
import sys

import torch

for path in sys.argv[1:]:
    d = torch.load(path, weights_only=False)
    clock = d["clock"].double()  # [launch, CTA, slot]: slot 0 the SM, then each stage's start and end (ns)
    layers = [i for i, name in enumerate(d["launches"]) if str(name).startswith("layer")][1:-1]
    stages = (clock.shape[2] - 1) // 2
    lags = []
    for k in range(1, stages):
        per_launch = []
        for i in layers:
            end, start = clock[i, :, 2 + 2 * (k - 1)], clock[i, :, 1 + 2 * k]
            if (end > 0).any() and (start > 0).any():
                per_launch.append((start[start > 0].min() - end[end > 0].max()).item() / 1000)
        if per_launch:
            lags.append(f"{k - 1}→{k} {statistics.median(per_launch):.2f}")
    print(f"{path} ({d['launches'][layers[0]]}): " + ", ".join(lags))
