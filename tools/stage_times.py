"""Where a step's time goes: each launch of the step timed on its own, summed by program.

CUDA events around every launch of an eager step (after warm-up), medians over repeats, beside
the bytes each program moves, so each stage's achieved bandwidth shows. The staged step by
default; ``--mode persistent`` times the persistent programs' launches. An event between two
launches keeps the second from starting early, so programmatic dependent launch overlaps nothing
here, and a launch costs more than in the CUDA graph ``monobuild bench`` replays. Usage::

    python tools/stage_times.py PACKAGE [--band r1t1] [--context 1024] [--repeats 20] [--mode staged|persistent]
"""

from __future__ import annotations

import argparse
import statistics
from collections import defaultdict

import torch

from monobuild import runtime
from monobuild.bench.cases import random_band_step


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("package")
    ap.add_argument("--band", default="r1t1")
    ap.add_argument("--context", type=int, default=1024)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--mode", default="staged", choices=("staged", "persistent"))
    args = ap.parse_args()
    pkg = runtime.load(args.package)
    step, i, rows, tokens = random_band_step(pkg, args.band, args.context, args.mode)
    band = step.band_for(rows, tokens)
    inputs = band.prepare(i.tokens, i.positions, i.block_tables, i.context_lens, pkg.device)
    stream = torch.cuda.current_stream().cuda_stream
    per_program = defaultdict(list)
    for _ in range(args.repeats + 2):
        band.run(inputs, stream)  # binds the input slots, warms up
        events = [torch.cuda.Event(enable_timing=True) for _ in range(len(band.launches) + 1)]
        events[0].record()
        for launch, end in zip(band.launches, events[1:]):
            launch.kernel.launch(stream, launch.params.address)
            end.record()
        torch.cuda.synchronize()
        totals = defaultdict(float)
        for launch, start, end in zip(band.launches, events, events[1:]):
            totals[launch.name] += start.elapsed_time(end)
        for name, ms in totals.items():
            per_program[name].append(ms)
    manifest = pkg.manifest
    whole = 0.0
    print(f"{args.package} {args.band} ctx {args.context}: {args.mode} launches, summed over layers "
          f"(median of {args.repeats})")
    for name, times in per_program.items():
        ms = statistics.median(times[2:])
        whole += ms
        count = sum(1 for launch in band.launches if launch.name == name)
        stage_bytes = sum(s.weight_bytes + s.io_bytes + s.kv_bytes_per_token * args.context
                          for s in manifest.program(name).stages) * count
        print(f"{name:24} ×{count:3} {ms:8.3f} ms {stage_bytes / 1e6:9.1f} MB {stage_bytes / ms / 1e6:7.0f} GB/s")
    print(f"{'total':29} {whole:8.3f} ms")


if __name__ == "__main__":
    main()
