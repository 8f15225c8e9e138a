"""The IR contracts on sm_90, read from a program's PTX (parsed by ptx.py).

A *signal* is an atomic add whose address derives from the ``counters`` parameter; a *wait* is a
loop that reads such an address; the epoch read (a relaxed read outside any loop, before the
first signal) is neither. Regions are told apart by the kernel parameter their addresses derive
from, through the register dataflow.
"""

from __future__ import annotations

from ...manifest import ProgramSpec
from .plan_rules import cross_cta_params, kv_guard_params, unguarded_kv_store
from .ptx import Instr, Ptx
from .violations import Violation

_STRONG_SCOPES = ("gpu", "sys")
_COHERENT_LOADS = ("cg", "cv", "volatile", "acquire", "relaxed")


def _site(ins: Instr) -> str:
    return f"ptx line {ins.line}"


def _is_global_memory(ins: Instr) -> bool:
    if ins.base == "cp":  # cp.async.*.shared.global: a global source, when it has one
        return ins.has("async") and ins.address is not None
    return ins.base in ("ld", "st", "atom", "red") and not ins.has("param") and not ins.has("shared")


def check_ptx(p: ProgramSpec, ptx: Ptx) -> list[Violation]:
    names = [a.name for a in p.args]
    out: list[Violation] = []
    counters = names.index("counters") if "counters" in names else None
    signals, wait_loops = [], set()
    for ins in ptx.instrs:
        if counters is None or not _is_global_memory(ins) or counters not in ptx.address_params(ins):
            continue
        read_only = ins.has("acquire") and not ins.has("acq_rel")  # an acquire add of 0: a read
        if ins.base in ("atom", "red") and ins.has("add") and not read_only:
            signals.append(ins)
            out += _check_signal(p, ptx, ins)
        elif ins.base in ("ld", "atom"):
            loop = ptx.in_loop(ins.index)
            acquire = ins.has("acquire") or ins.has("acq_rel")
            if loop is not None:
                wait_loops.add(loop)
                if not acquire or not any(ins.has(s) for s in _STRONG_SCOPES):
                    out.append(Violation(p.name, _site(ins), "I2",
                                         f"a wait loop reads the counter with `{ins.opcode}`: not an acquire at gpu "
                                         "scope, so the consumer's later loads may see data older than the signal"))
    syncs = len(p.syncs)
    if len(signals) != syncs:
        out.append(Violation(p.name, "ptx", "I4", f"{len(signals)} signal sites in the code, {syncs} sync edges in "
                                                  "the plan"))
    if len(wait_loops) != syncs:
        out.append(Violation(p.name, "ptx", "I4", f"{len(wait_loops)} wait loops in the code, {syncs} sync edges "
                                                  "in the plan"))
    out += _check_loads(p, ptx)
    out += _check_kv_stores(p, ptx)
    out += _check_grid_dependency(p, ptx)
    return out


def _check_signal(p: ProgramSpec, ptx: Ptx, ins: Instr) -> list[Violation]:
    out = []
    if not (ins.has("release") or ins.has("acq_rel")) or not any(ins.has(s) for s in _STRONG_SCOPES):
        out.append(Violation(p.name, _site(ins), "I1",
                             f"the signal is `{ins.opcode}`: not a release at gpu scope, so a consumer that sees "
                             "the count may not see the producer's stores"))
    for prev in reversed(ptx.instrs[: ins.index]):
        if prev.base in ("bar", "barrier") and (prev.has("sync") or prev.opcode == "barrier"):
            break
        if _is_global_memory(prev) and prev.base in ("st", "atom", "red"):
            out.append(Violation(p.name, _site(ins), "I1",
                                 f"no CTA barrier between the store at ptx line {prev.line} and the signal: one "
                                 "thread's release does not cover the other threads' stores"))
            break
    else:
        out.append(Violation(p.name, _site(ins), "I1", "no CTA barrier before the signal"))
    return out


def _check_loads(p: ProgramSpec, ptx: Ptx) -> list[Violation]:
    """I3: loads of regions other CTAs write in this launch bypass L1 and the non-coherent path."""
    regions = cross_cta_params(p)
    out = []
    for ins in ptx.instrs:
        if ins.base not in ("ld", "cp") or not _is_global_memory(ins):
            continue
        hit = sorted(regions[k] for k in ptx.address_params(ins) if k in regions)
        if not hit:
            continue
        if ins.has("nc"):
            why = "a non-coherent (read-only path) load"
        elif ins.base == "cp" and not ins.has("cg"):
            why = "an L1-cached asynchronous copy (cp.async.ca)"
        elif ins.base == "ld" and not any(ins.has(m) for m in _COHERENT_LOADS):
            why = "an L1-cached load"
        else:
            continue
        out.append(Violation(p.name, _site(ins), "I3",
                             f"`{ins.opcode}` of {', '.join(hit)} is {why}: another CTA writes it in this launch, "
                             "and this SM may read a stale copy"))
    return out


def _check_kv_stores(p: ProgramSpec, ptx: Ptx) -> list[Violation]:
    """C4 (IR side): every store into the KV cache is predicated on a value read from context_lens."""
    guard = kv_guard_params(p)
    if guard is None:
        return []
    kv, lens = guard
    out = []
    for ins in ptx.instrs:
        if ins.base in ("st", "atom", "red") and _is_global_memory(ins) and kv & ptx.address_params(ins) \
                and lens not in ptx.predicate_loads(ins) and not ptx.never_executes(ins):
            out.append(unguarded_kv_store(p, _site(ins), f"`{ins.opcode}`"))
    return out


def _check_grid_dependency(p: ProgramSpec, ptx: Ptx) -> list[Violation]:
    """C2 (IR side): a PDL launch waits for the previous launch before it writes global memory."""
    if not p.launch_pdl:
        return []
    waits = [i.index for i in ptx.instrs if i.opcode == "griddepcontrol.wait"]
    writes = [i for i in ptx.instrs if i.base in ("st", "atom", "red") and _is_global_memory(i)]
    if not waits:
        return [Violation(p.name, "ptx", "C2", "launched with programmatic dependent launch but never executes "
                                               "griddepcontrol.wait: it may overwrite what the previous launch "
                                               "still reads")]
    early = [w for w in writes if w.index < waits[0]]
    if early:
        return [Violation(p.name, _site(early[0]), "C2",
                          f"`{early[0].opcode}` comes before griddepcontrol.wait (ptx line "
                          f"{ptx.instrs[waits[0]].line}): it may overwrite what the previous launch still reads")]
    return []
