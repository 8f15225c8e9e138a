"""Where a step's time goes inside its launches, from a profiling build's ``stage_clock``.

A build compiled with ``monobuild compile --stage-clock`` has every CTA of every launch record the
SM it ran on (slot 0) and the global timer in ns when each stage started (slot 1 + 2k, after its
wait) and ended (slot 2 + 2k, before its signal). ``stage_rows`` turns one step's clocks into,
per stage and summed or taken over the launches that ran it:

- span: the last CTA's end − the first CTA's start (what the stage costs the step),
- work: end − start per CTA (median and max over CTAs; the max is the critical one),
- wait: start − the previous stage's end per CTA, within a launch (the sync edge's cost as the
  CTA sees it: its own signal, the slowest producer, the acquire poll),
- gap: the stage's first start − the last end of the stage before it (the previous launch's last
  stage, for a launch's first), summed: time in which no CTA is inside a stage — the sync
  latency after the last producer signals, or the launch boundary between layers.

``placement`` counts the CTAs each SM ran, the check that a persistent grid is spread evenly.
"""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class StageRow:
    program: str  # the program's kind and band (layer.r1t1) with its mode
    stage: str
    launches: int
    span_us: float  # summed over the launches
    work_median_us: float  # per launch, the median over launches
    work_max_us: float
    wait_median_us: float | None  # None for a launch's first stage
    wait_max_us: float | None
    gap_us: float | None  # summed over the launches; None where no clocked stage came before


def stage_rows(clock: torch.Tensor, programs: dict, launches) -> list[StageRow]:
    """``clock``: the step's stage_clock [launches, CTAs, slots] on the host; ``programs`` the
    manifest's programs by name; ``launches`` the step's launches in order."""
    spans: dict[tuple[str, str], list[float]] = {}
    works: dict[tuple[str, str], list[tuple[float, float]]] = {}
    waits: dict[tuple[str, str], list[tuple[float, float]]] = {}
    gaps: dict[tuple[str, str], list[float]] = {}
    last_end = None  # the latest end of the stage clocked before this one, in any launch
    for i, launch in enumerate(launches):
        p = programs[launch.program]
        if not any(a.name == "stage_clock" for a in p.args):
            last_end = None  # not a profiling build
            continue
        rows = clock[i, : p.grid].double()
        previous_end = None
        for stage in p.stages:  # a stage's clock slots follow its op's place in the kind's op list
            start, end = rows[:, 1 + 2 * stage.index], rows[:, 2 + 2 * stage.index]
            key = (p.name, stage.name)
            spans.setdefault(key, []).append((end.max() - start.min()).item() / 1e3)
            if last_end is not None:
                gaps.setdefault(key, []).append((start.min() - last_end).item() / 1e3)
            last_end = end.max()
            work = (end - start) / 1e3
            works.setdefault(key, []).append((work.median().item(), work.max().item()))
            if previous_end is not None:
                wait = (start - previous_end) / 1e3
                waits.setdefault(key, []).append((wait.median().item(), wait.max().item()))
            previous_end = end
    out = []
    for key, span in spans.items():
        work, wait = works[key], waits.get(key)
        out.append(StageRow(key[0], key[1], len(span), sum(span), statistics.median(w[0] for w in work),
                            statistics.median(w[1] for w in work),
                            statistics.median(w[0] for w in wait) if wait else None,
                            statistics.median(w[1] for w in wait) if wait else None,
                            sum(gaps[key]) if key in gaps else None))
    return out


def placement(clock: torch.Tensor, launch: int, grid: int) -> dict[int, int]:
    """For one launch: CTAs per SM → how many SMs ran that many."""
    per_sm = Counter(clock[launch, :grid, 0].tolist())
    return dict(sorted(Counter(per_sm.values()).items()))


def rows_text(rows: list[StageRow]) -> str:
    lines = [f"{'program':26s} {'stage':8s} {'launches':>8s} {'span ms':>8s} {'work µs med/max':>16s} "
             f"{'wait µs med/max':>16s} {'gap ms':>7s}"]
    for r in rows:
        wait = f"{r.wait_median_us:7.2f}/{r.wait_max_us:<7.2f}" if r.wait_median_us is not None else f"{'—':>15s}"
        gap = f"{r.gap_us / 1e3:7.3f}" if r.gap_us is not None else f"{'—':>7s}"
        lines.append(f"{r.program:26s} {r.stage:8s} {r.launches:8d} {r.span_us / 1e3:8.3f} "
                     f"{r.work_median_us:7.2f}/{r.work_max_us:<7.2f}  {wait} {gap}")
    return "\n".join(lines)
