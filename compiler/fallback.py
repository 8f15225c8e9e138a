"""Schedules the compiler derives itself where the table's entry does not compile to a servable
persistent program (issue 21: a served geometry is never refused for a schedule reason).

The shipped table is tuned for the shipped models; another model of a served family falls back
to its defaults, which may keep state in local memory (contract C3) or not fit co-resident. Then
the compiler tries, for that (kind, band) alone, a short ladder of settings that each lower the
program's registers or its occupancy needs, cumulatively, until the compiled program is
servable. Each rung costs some speed where the table's entry would have won it, which is why the
table stays first: it only ever makes programs faster. Where a program came from is recorded in
the package (the manifest's ``schedule``) and printed by ``monobuild compile``.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..schema import Band
from .schedule import Schedule

#: (what the rung changes, the settings), applied cumulatively in this order: the cheapest first.
LADDER: tuple[tuple[str, dict[str, int]], ...] = (
    ("one walk of the KV cache (no long-tile loop compiled in)", {"long_kv_tile": 0, "kv_substreams": 1}),
    ("8 warps a CTA, one CTA per SM", {"num_warps": 8, "ctas_per_sm": 1}),
    ("shallower pipelines", {"weight_stages": 2, "kv_stages": 1, "long_kv_stages": 0}),
    ("16-token KV tiles, one x̂ row a load", {"kv_tile": 16, "norm_rows": 1}),
    # the rungs above are written for the Triton executor's programs; a streaming entry none of them
    # makes servable (e.g. a verify band whose streaming program keeps a stack frame) runs on it
    ("the Triton executor", {"streaming": 0}),
)


@dataclass(frozen=True)
class Derived:
    """A schedule entry the compiler derived for one program kind and band."""

    kind: str
    band: Band
    rung: int  # how many rungs of LADDER are applied
    why: str  # what the table's entry compiled to

    @property
    def settings(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for _, step in LADDER[: self.rung]:
            out.update(step)
        return out

    def describe(self) -> str:
        steps = "; ".join(what for what, _ in LADDER[: self.rung])
        return f"{self.kind} {self.band.name}: derived ({steps}), since the table's entry {self.why}"


def with_derived(schedule: Schedule, hidden: int, weights: str, derived: tuple[Derived, ...]) -> Schedule:
    """The table with each derived entry taking precedence for its (kind, hidden, rows, tokens):
    the entry the table gives that program, with the ladder's settings over it."""
    if not derived:
        return schedule
    entries = []
    for d in derived:
        base = schedule.entry(d.kind, hidden, d.band.rows, d.band.tokens, weights=weights).__dict__
        match = (("hidden", hidden), ("kind", d.kind), ("rows", d.band.rows), ("tokens", d.band.tokens),
                 ("weights", weights))
        entries.append((match, tuple(sorted({**base, **d.settings}.items()))))
    source = schedule.source + "; " + "; ".join(d.describe() for d in derived)
    return Schedule(source, schedule.defaults, tuple(entries) + schedule.entries)
