"""The plan contracts C1–C5, read off a package's manifest (stages, regions, sync edges, resources).

Each sync edge is total: every CTA of the grid signals it once per step after finishing the
producer stage, and every CTA waits for all of those signals before the consumer stage. So a
region written in stage w and read in a later stage r is ordered exactly when an edge joins each
consecutive pair of stages from w to r (release/acquire chains are cumulative).
"""

from __future__ import annotations

from ...manifest import Manifest, ProgramSpec
from ..executor import tensordesc_block
from ..resources import Resources
from .violations import Violation

INT64_MAX = 2**63 - 1
INT32_MAX = 2**31 - 1


def param_index(p: ProgramSpec) -> dict[str, int]:
    """ABI argument → the index of its (first) parameter of the compiled kernel: a TMA descriptor
    argument is the descriptor, then its shape (i32) and strides (i64) a dimension each."""
    out, k = {}, 0
    for a in p.args:
        out[a.name] = k
        block = tensordesc_block(a.type)
        k += 1 + 2 * len(block[1]) if block else 1
    return out


def cross_cta_params(p: ProgramSpec) -> dict[int, str]:
    """Kernel parameter index → name of each region one CTA writes and another reads within this
    launch (the loads I3 constrains). The KV cache is not one: a launch reads only entries earlier
    launches wrote (its own appends are disjoint, see C1)."""
    if len(p.stages) < 2:
        return {}
    stages = {s.name for s in p.stages}
    index = param_index(p)
    return {index[r.name]: r.name for r in p.regions
            if r.kind != "kv_cache" and r.writer in stages and stages & set(r.readers) and r.name in index}


def cross_rank_params(p: ProgramSpec) -> tuple[int | None, set[int], set[int]]:
    """X1–X4's parameters (tensor parallelism): this rank's own counters (``tp_counters``), every
    rank's counters (``tp_counters_peer<s>``, which only signals touch) and the peers' buffers
    (partials and tile parts, only read)."""
    index = param_index(p)
    peers = {a.name: index[a.name] for a in p.args if a.role == "peer"}
    counters = {k for name, k in peers.items() if name.startswith("tp_counters_peer")}
    return index.get("tp_counters"), counters, set(peers.values()) - counters


def cross_rank_count_violations(p: ProgramSpec, signals: int, wait_loops: int, where: str) -> list[Violation]:
    """X4: the signals number the plan's signal sites × their ranks, the wait loops its wait sites × theirs."""
    planned = {kind: sum(c.ranks for c in p.cross_rank if c.kind == kind) for kind in ("signal", "wait")}
    out = []
    if signals != planned["signal"]:
        out.append(Violation(p.name, where, "X4", f"{signals} cross-rank signals in the code, {planned['signal']} "
                                                  "in the plan's cross-rank sites"))
    if wait_loops != planned["wait"]:
        out.append(Violation(p.name, where, "X4", f"{wait_loops} cross-rank wait loops in the code, "
                                                  f"{planned['wait']} in the plan's cross-rank sites"))
    return out


def kv_guard_params(p: ProgramSpec) -> tuple[set[int], int] | None:
    """(Kernel parameter indexes of the KV cache, that of context_lens) for C4's IR side, or None
    when the program has no KV cache argument or no liveness to guard it with (the plan side
    reports that)."""
    index = param_index(p)
    kv = {index[r.name] for r in p.regions if r.kind == "kv_cache" and r.name in index}
    if not kv or "context_lens" not in index:
        return None
    return kv, index["context_lens"]


def unguarded_kv_store(p: ProgramSpec, where: str, what: str) -> Violation:
    """C4 (IR side, either target): ``what`` stores into the KV cache without a guard on the row's
    context length."""
    return Violation(p.name, where, "C4", f"{what} into the KV cache is not guarded by the row's context length: "
                                          "a dead (padding) row would overwrite another request's cache")


def _chain_gaps(p: ProgramSpec, first: int, last: int) -> list[tuple[str, str]]:
    """Consecutive stage pairs between stage indexes first and last that no sync edge joins."""
    names = [s.name for s in p.stages]
    joined = {(e.producer, e.consumer) for e in p.syncs}
    return [(names[k], names[k + 1]) for k in range(first, last) if (names[k], names[k + 1]) not in joined]


def happens_before(p: ProgramSpec) -> list[Violation]:
    """C1: every cross-CTA read follows a wait on an edge every writer signals after its last write."""
    out = []
    order = {s.name: i for i, s in enumerate(p.stages)}
    for e in p.syncs:
        if not 0 <= e.counter < p.counters:
            out.append(Violation(p.name, f"sync {e.producer}→{e.consumer}", "C1",
                                 f"counter {e.counter} lies outside the launch's block of {p.counters}: its signals "
                                 "land in another launch's counters, and its waits read them"))
        if e.signals_per_epoch != p.grid:
            out.append(Violation(p.name, f"sync {e.producer}→{e.consumer}", "C1",
                                 f"the wait target counts {e.signals_per_epoch} signals per epoch but all {p.grid} "
                                 "CTAs signal: a consumer can pass before every producer has finished"))
    for r in p.regions:
        if r.writer not in order:
            continue  # written before this launch: the launch boundary (or PDL's wait, C2) orders it
        w = order[r.writer]
        for reader in r.readers:
            if reader not in order:
                continue
            i = order[reader]
            if i == w and not r.same_stage:
                out.append(Violation(p.name, f"region {r.name}", "C1",
                                     f"stage {reader} reads what other CTAs of the same stage write, with no sync "
                                     "edge between them and no declared reason (disjoint elements or CTA-local)"))
            for a, b in _chain_gaps(p, w, i) if i > w else ():
                out.append(Violation(p.name, f"region {r.name}", "C1",
                                     f"written by {r.writer}, read by {reader}, but no sync edge orders {a} before "
                                     f"{b}: {reader} may read it before every CTA has written it"))
    return out


def no_overwrite_in_flight(p: ProgramSpec) -> list[Violation]:
    """C2: nothing is rewritten while a reader of its previous contents may still read it."""
    out = []
    seen = set()
    for r in p.regions:
        if r.name in seen:
            out.append(Violation(p.name, f"region {r.name}", "C2", "declared twice: two stages write it"))
        seen.add(r.name)
    order = {s.name: i for i, s in enumerate(p.stages)}
    for r in p.regions:
        if r.writer not in order:
            continue
        w = order[r.writer]
        for reader in r.readers:
            i = order.get(reader)
            if i is None or i >= w:
                continue
            for a, b in _chain_gaps(p, i, w):
                out.append(Violation(p.name, f"region {r.name}", "C2",
                                     f"stage {r.writer} rewrites it while stage {reader} of a slower CTA may still "
                                     f"read the previous contents: no sync edge orders {a} before {b}"))
    if p.launch_pdl and not p.pdl_wait:
        out.append(Violation(p.name, "launch", "C2",
                             "launched with programmatic dependent launch, so it overlaps the previous launch, but "
                             "its code does not wait for that launch (PDL is off): it may overwrite scratch and "
                             "activations the previous layer still reads"))
    return out


def residency(p: ProgramSpec, sm_count: int, code: Resources, target: str) -> list[Violation]:
    """C3: the grid fits co-resident; a persistent program spills nothing to local/private memory.

    ``code`` is recomputed from the code object, not taken from the manifest; the manifest's
    record must agree with it field by field.
    """
    out = []
    res = p.resources
    ctas_per_unit = code.ctas_per_unit
    why = f"{code.registers} registers, {code.shared_bytes} B shared memory, {code.threads} threads per CTA"
    unit = "SM" if target.startswith("sm_") else "CU"
    if ctas_per_unit == 0:
        out.append(Violation(p.name, "launch", "C3", f"no CTA fits on an {unit} ({why})"))
    wrong = [f"{f} {getattr(res, f)!r} (the code: {getattr(code, f)})" for f in code.__dataclass_fields__
             if getattr(res, f) != getattr(code, f)]
    if wrong:
        out.append(Violation(p.name, "launch", "C3", "the manifest's resources are not the code object's: "
                                                     + ", ".join(wrong)))
    waits_on_ctas = bool(p.syncs)  # its CTAs wait on each other's signals
    if waits_on_ctas and not p.launch_cooperative:
        out.append(Violation(p.name, "launch", "C3",
                             "its CTAs wait on each other's signals (it has sync edges) but it is not launched "
                             "cooperatively: nothing makes the driver refuse a grid that is not co-resident, and a "
                             "CTA that never starts hangs the rest"))
    if p.launch_cooperative or waits_on_ctas:
        if p.grid > ctas_per_unit * sm_count:
            out.append(Violation(p.name, "launch", "C3",
                                 f"grid {p.grid} exceeds the co-resident capacity {ctas_per_unit} × {sm_count} "
                                 f"{unit}s = {ctas_per_unit * sm_count} ({why}): its CTAs would wait on CTAs that "
                                 "never start"))
        if code.spill_bytes or code.stack_bytes:
            out.append(Violation(p.name, "launch", "C3",
                                 f"a persistent program spills {code.spill_bytes} B and uses {code.stack_bytes} B of "
                                 "stack (private memory): its state must live in registers and shared memory"))
    return out


def liveness(p: ProgramSpec) -> list[Violation]:
    """C4 (plan side): a program that writes the KV cache takes the row liveness (context_lens) it
    guards those writes with. The IR side (nvidia.py) checks each store is predicated on it."""
    names = {a.name for a in p.args}
    stages = {s.name for s in p.stages}
    for r in p.regions:
        if r.kind == "kv_cache" and r.writer in stages and "context_lens" not in names:
            return [Violation(p.name, f"region {r.name}", "C4",
                              "written by this program, which has no context_lens argument: it cannot tell dead "
                              "(padding) rows from live ones")]
    return []


def epochs(p: ProgramSpec, manifest: Manifest) -> list[Violation]:
    """C5: counters grow by the grid each step; they must not wrap within the declared lifetime."""
    if not p.syncs:
        return []
    types = {a.name: a.type for a in p.args}
    limit = INT64_MAX if types.get("counters") == "*i64" else INT32_MAX
    steps = manifest.deployment.lifetime_steps
    most = max(e.signals_per_epoch for e in p.syncs)
    if (steps + 1) * most > limit:
        return [Violation(p.name, "counters", "C5",
                          f"{types.get('counters', '?')} counters reach {(steps + 1) * most} (lifetime {steps} steps "
                          f"× {most} signals per step, targets one epoch ahead), past {limit}: they would wrap and "
                          "every wait would pass at once")]
    return []


def plan_violations(manifest: Manifest, p: ProgramSpec, code: Resources) -> list[Violation]:
    return [*happens_before(p), *no_overwrite_in_flight(p),
            *residency(p, manifest.sm_count, code, manifest.target), *liveness(p), *epochs(p, manifest)]
