"""Where a persistent step's time goes, per stage, from a profiling build's in-kernel clocks.

Compile with ``monobuild compile RECIPE --stage-clock`` (the package is named <recipe>-clock),
then on the GPU::

    python tools/stage_clock.py PACKAGE [--band r1t1] [--context 1024] [--mode persistent] [--eager] [--save clock.pt]

Runs the step a few times — replays of a CUDA graph, as ``monobuild bench`` times it, or with
``--eager`` launch by launch (whose launch boundaries cost more: the 2026-12-01 clocks of
eager steps put 2.6 µs at each, docs/PERFORMANCE.md) — then prints per program stage, over the
launches that ran it:
the span (first CTA's start to last CTA's end, summed), the work per CTA and the wait before it
(medians over launches of the median and the max over CTAs), the gap before it in which no CTA
was inside a stage (summed), and how the first layer launch's CTAs were spread over the SMs
(bench/clock.py says what each column means). ``--save`` keeps the raw clocks (the
[launches, CTAs, slots] tensor and each launch's program) for analysis off the device.
"""

from __future__ import annotations

import argparse

import torch

from monobuild import runtime
from monobuild.bench.cases import random_band_step
from monobuild.bench.clock import placement, rows_text, stage_rows
from monobuild.bench.run import time_replays
from monobuild.schema import LAYER_KINDS


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("package")
    ap.add_argument("--band", default="r1t1")
    ap.add_argument("--context", type=int, default=1024)
    ap.add_argument("--mode", default="persistent", choices=("persistent", "staged"))
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--eager", action="store_true", help="launch the step's programs one by one, not a CUDA graph")
    ap.add_argument("--save", help="write the raw clocks here (torch.save)")
    args = ap.parse_args()
    pkg = runtime.load(args.package)
    step, i, rows, tokens = random_band_step(pkg, args.band, args.context, args.mode)
    time_replays(lambda: step(i.tokens, i.positions, i.block_tables, i.context_lens), args.repeats,
                 graph=not args.eager)  # the clocks are the last run's
    clock, spec = step.stage_clock(rows, tokens)
    clock = clock.cpu()
    programs = {p.name: p for p in pkg.manifest.programs}
    total = (clock[..., 2::2].max() - clock[..., 1::2][clock[..., 1::2] > 0].min()).item() / 1e6
    how = "eager" if args.eager else "graph replay"
    print(f"{args.package} {args.band} ctx {args.context} {args.mode} ({how}): first start to last end {total:.3f} ms")
    rows = stage_rows(clock, programs, spec.launches)
    print(rows_text(rows))
    gaps = sum(r.gap_us for r in rows if r.gap_us is not None) / 1e3
    print(f"between stages (no CTA inside one): {gaps:.3f} ms; in stages (spans): "
          f"{sum(r.span_us for r in rows) / 1e3:.3f} ms")
    if args.save:
        torch.save({"clock": clock, "launches": [launch.program for launch in spec.launches],
                    "package": args.package, "band": args.band, "context": args.context, "mode": args.mode},
                   args.save)
    first_layer = next(n for n, launch in enumerate(spec.launches) if programs[launch.program].kind in LAYER_KINDS)
    grid = programs[spec.launches[first_layer].program].grid
    print(f"CTAs per SM in the first layer launch ({grid} CTAs): "
          + ", ".join(f"{n} SMs ran {c}" for c, n in placement(clock, first_layer, grid).items()))


if __name__ == "__main__":
    main()
