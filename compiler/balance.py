"""How a streaming program's ops spread their weight units over the CTAs.

Task t of an op runs on CTA t mod grid, so how many units (K chunks of a tile) each CTA streams
follows from the op's tasks and chunks alone, and the next op's edge waits for the busiest CTA.
``monobuild plan`` prints the spread beside each streamed op, so an uneven one (Qwen3-30B-A3B's
1-row experts_up: 16 units on 60 CTAs, 8 on 72) shows before anything runs. The planner's own
choices (``split_k``, ``gated_halves``) minimise the busiest CTA's share by the same count. It is
a count, not a time: evening that experts_up out (its K in two splits, 12 units on every CTA)
left its busiest CTA as slow and made the median one slower
(docs/measurements/2026-12-07-moe-up-split).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from .executor import EXPERTS_DOWN_BODY, EXPERTS_UP_BODY, GEMV_BODY
from .ops.spec import Op


@dataclass(frozen=True)
class Spread:
    """Units a CTA of the grid streams for one op: the busiest CTA's, the median CTA's, and how
    many CTAs of the grid stream none."""

    busiest: int
    median: float
    idle: int
    grid: int

    def text(self) -> str:
        idle = f", {self.idle} of {self.grid} CTAs idle" if self.idle else ""
        return f"busiest CTA {self.busiest} unit{'s' if self.busiest != 1 else ''} (median {self.median:g}{idle})"


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _spread(tasks: int, units_a_task: int, grid: int) -> Spread:
    per_cta = [_cdiv(max(tasks - c, 0), grid) * units_a_task for c in range(grid)]
    return Spread(max(per_cta), statistics.median(per_cta), per_cta.count(0), grid)


def unit_spread(op: Op, grid: int) -> Spread | None:
    """The spread of a streamed op's weight units over ``grid`` CTAs (ops after
    ``executor.streamed``): a GEMV's, experts_up's (at the band's most slots) and experts_down's
    (its chunks of those slots); None for any other op (attention's KV tiles follow the context)."""
    b = op.binding
    if op.body == GEMV_BODY:
        chunks = _cdiv(b("K") // b("SPLIT"), b("BK"))
        return _spread(op.tasks, chunks * (2 if b("GATED") and not b("HALVES") else 1), grid)
    if op.body == EXPERTS_UP_BODY:
        return _spread(op.tasks, _cdiv(b("K"), b("BK")), grid)
    if op.body == EXPERTS_DOWN_BODY:
        chunks = b("SLOTS") * _cdiv(b("INTER"), b("BK"))
        return _spread(op.tasks, max(_cdiv(chunks, b("SPLIT")), 1), grid)
    return None
