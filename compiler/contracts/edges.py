"""I5, target-neutral: every sync edge has its own counter, signalled once and waited for once,
and each wait's target is the end of the step's epoch.

The frontends (nvidia.py on PTX, amd.py on LLVM IR) read each counter access of a program into
a ``CounterSite``: which counter of the block it addresses (its address minus the ``counters``
parameter, evaluated by arith.py), and for a poll the count from which its wait is over, for a
range of counts the step may begin with. The rules here compare those with the plan's edges.
A signal aimed at another edge's counter lets that edge's waits pass a step early (two adds
per CTA) while its own never end; a lowered target lets the consumer start before the last
producer CTA has signalled. I1/I2 cannot see either: the instructions keep their semantics.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ...manifest import ProgramSpec
from .arith import NotEvaluable, Op, epoch_samples, evaluate, expected_target, threshold
from .violations import Violation

COUNTER_BYTES = 8  # int64 counters (C5)


@dataclass(frozen=True)
class CounterSite:
    where: str  # "ptx line 167", "llir block %293"
    kind: str  # signal | poll | epoch
    counter: int | None  # the counter it addresses; None: not a counter of the block (see why)
    why: str = ""
    wait: object = None  # a poll's wait loop (None: a first poll, before its loop)
    # a poll's compares: for each, (count the step began with, count from which the wait is over)
    # per sample, or why the target could not be followed back to the epoch read
    compares: tuple[tuple[tuple[tuple[int, int], ...] | str, str], ...] = ()


IN_A_LOOP = ("the signal is inside a loop: a CTA adds once an iteration, so its count a step is the loop's trip "
             "count (for a routed op, what routing chose) and the edge's waits, which count one a CTA, pass early "
             "or never end")


def counter_of(offset: Callable[[], int], counters: int) -> tuple[int | None, str]:
    """(counter index, "") of an access whose byte offset from the counters parameter ``offset``
    evaluates, or (None, why)."""
    try:
        off = offset()
    except NotEvaluable as e:
        return None, f"its address is not the counters parameter plus a constant the check can evaluate ({e})"
    if off % COUNTER_BYTES or not 0 <= off < COUNTER_BYTES * counters:
        return None, f"its address is the counters parameter + {off} B, not one of the block's {counters} counters"
    return off // COUNTER_BYTES, ""


def _thresholds(past: Callable[[int], int | None], signals_per_epoch: int) -> tuple[tuple[int, int], ...] | str:
    """``past(seen)``: the count from which a wait is over when the step began with the first
    edge's counter at ``seen``, per epoch sample; or why it cannot be evaluated."""
    try:
        out = []
        for seen in epoch_samples(signals_per_epoch):
            t = past(seen)
            if t is None:
                return "it tests the count for equality, which a count past the target never meets"
            out.append((seen, t))
        return tuple(out)
    except NotEvaluable as e:
        return f"the value it compares the count with is not computed from the epoch read alone ({e})"


def compare_thresholds(op: Op, values: set[str], define: Callable[[str], Op], epoch: set[str],
                       signals_per_epoch: int) -> tuple[tuple[int, int], ...] | str:
    """A compare ``op`` of a poll's value (one of ``values``) with a target: for each epoch sample,
    the count from which the wait is over, the target computed from the epoch read's registers
    ``epoch`` through ``define``; or why it cannot be."""
    poll_first = op.operands[0] in values
    other = op.operands[1] if poll_first else op.operands[0]

    def past(seen: int) -> int | None:
        value = other if isinstance(other, int) else evaluate(other, define, dict.fromkeys(epoch, seen))
        return threshold(op.predicate, poll_first, value)

    return _thresholds(past, signals_per_epoch)


def edge_counter_violations(p: ProgramSpec, sites: list[CounterSite], code: str) -> list[Violation]:
    """I5 over a program's counter accesses; ``code`` names the IR for program-wide findings (ptx, llir)."""
    edges = {s.counter: s for s in p.syncs}
    out: list[Violation] = []

    def edge(k: int) -> str:
        s = edges[k]
        return f"counter {k} ({s.producer}→{s.consumer})"

    for site in sites:
        if site.counter is None:
            out.append(Violation(p.name, site.where, "I5", f"a counter {site.kind}: {site.why}"))
        elif site.counter not in edges:
            out.append(Violation(p.name, site.where, "I5", f"a counter {site.kind} addresses counter {site.counter}, "
                                                           "which no sync edge of the plan uses"))
    signalled: dict[int, list[CounterSite]] = {}
    waited: dict[int, set] = {}
    for site in sites:
        if site.counter in edges and site.kind == "signal":
            signalled.setdefault(site.counter, []).append(site)
        elif site.counter in edges and site.kind == "poll" and site.wait is not None:
            waited.setdefault(site.counter, set()).add(site.wait)
    for k in edges:
        at = signalled.get(k, [])
        if not at:
            out.append(Violation(p.name, code, "I5",
                                 f"no signal adds to {edge(k)}: its consumer's waits never end, or end on another "
                                 "edge's signals"))
        elif len(at) > 1:
            out.append(Violation(p.name, at[1].where, "I5",
                                 f"{edge(k)} is signalled at {len(at)} sites ({', '.join(s.where for s in at)}): "
                                 "a CTA adds more than once a step, so its waits pass before every producer CTA "
                                 "has signalled"))
        if not waited.get(k):
            out.append(Violation(p.name, code, "I5", f"no wait loop polls {edge(k)}: its consumer may start before "
                                                     "every producer CTA has signalled"))
        elif len(waited[k]) > 1:
            out.append(Violation(p.name, code, "I5", f"{edge(k)} is waited for by {len(waited[k])} loops; its edge "
                                                     "has one consumer stage"))
    for site in sites:
        if site.kind != "poll" or site.counter not in edges:
            continue
        g = edges[site.counter].signals_per_epoch
        if not site.compares:
            out.append(Violation(p.name, site.where, "I5", f"the poll of {edge(site.counter)} decides nothing: no "
                                                           "compare reads its value"))
        for found, at in site.compares:
            if isinstance(found, str):
                out.append(Violation(p.name, at, "I5", f"the wait on {edge(site.counter)}: {found}"))
                continue
            wrong = [(seen, t) for seen, t in found if t != expected_target(seen, g)]
            if wrong:
                seen, t = wrong[0]
                end = expected_target(seen, g)
                then = ("the consumer may start before every producer CTA has signalled" if t < end
                        else "the wait never ends")
                out.append(Violation(p.name, at, "I5", f"the wait on {edge(site.counter)} is over at count {t} in "
                                                       f"the step that begins at {seen}, not at the epoch's end "
                                                       f"({end}, {g} signals an epoch): {then}"))
    return out
