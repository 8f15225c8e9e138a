"""The IR contracts on sm_90, read from a program's PTX (parsed by ptx.py).

A *signal* is an atomic add whose address derives from the ``counters`` parameter; a *wait* is a
loop that reads such an address; the epoch read (a relaxed read outside any loop, before the
first signal) is neither. Regions are told apart by the kernel parameter their addresses derive
from, through the register dataflow.
"""

from __future__ import annotations

from ...manifest import ProgramSpec
from .arith import NotEvaluable, evaluate
from .edges import IN_A_LOOP, CounterSite, compare_thresholds, counter_of, edge_counter_violations
from .plan_rules import (
    cross_cta_params,
    cross_rank_count_violations,
    cross_rank_params,
    kv_guard_params,
    param_index,
    unguarded_kv_store,
)
from .ptx import Instr, Ptx, definitions, integer_definition, integer_op
from .ring import check_ring
from .violations import Violation

_STRONG_SCOPES = ("gpu", "sys")
_COHERENT_LOADS = ("cg", "cv", "volatile", "acquire", "relaxed")
STREAMABLE = ("layer_weight", "model_weight", "kv_cache")  # the roles a TMA copy may read (S1)


def _is_global_memory(ins: Instr) -> bool:
    if ins.base == "cp":  # cp.async.*.shared.global: a global source, when it has one
        return ins.has("async") and ins.address is not None
    return ins.base in ("ld", "st", "atom", "red") and not ins.has("param") and not ins.has("shared")


def check_ptx(p: ProgramSpec, ptx: Ptx) -> list[Violation]:
    out: list[Violation] = []
    counters = param_index(p).get("counters")
    signals, wait_loops = [], set()
    accesses = [ins for ins in ptx.instrs
                if counters is not None and _is_global_memory(ins) and counters in ptx.address_params(ins)]
    kinds = []
    for k, ins in enumerate(accesses):
        if _is_signal(ins):
            signals.append(ins)
            kinds.append("signal")
            out += _check_signal(p, ptx, ins)
        elif ins.base in ("ld", "atom"):
            loop = ptx.in_loop(ins.index)
            strong = (ins.has("acquire") or ins.has("acq_rel")) and any(ins.has(s) for s in _STRONG_SCOPES)
            epoch = loop is None and not strong and k + 1 < len(accesses) and _is_signal(accesses[k + 1])
            kinds.append("epoch" if epoch else "poll")
            if loop is not None:
                wait_loops.add(loop)
                if not strong:
                    out.append(Violation(p.name, ins.site, "I2",
                                         f"a wait loop reads the counter with `{ins.opcode}`: not an acquire at gpu "
                                         "scope, so the consumer's later loads may see data older than the signal"))
            elif not strong and not epoch:
                # a relaxed read outside a loop is the epoch read only if a signal follows it; before a wait
                # loop it is the wait's first poll, which may find the target reached and end the wait
                out.append(Violation(p.name, ins.site, "I2",
                                     f"the wait's first poll reads the counter with `{ins.opcode}`, not an acquire at "
                                     "gpu scope: when it already finds the target, no acquire orders the consumer's "
                                     "loads after the signal"))
        else:
            kinds.append("other")
    if counters is not None:
        out += edge_counter_violations(p, _counter_sites(p, ptx, accesses, kinds, counters), "ptx")
    syncs = len(p.syncs)
    if len(signals) != syncs:
        out.append(Violation(p.name, "ptx", "I4", f"{len(signals)} signal sites in the code, {syncs} sync edges in "
                                                  "the plan"))
    if len(wait_loops) != syncs:
        out.append(Violation(p.name, "ptx", "I4", f"{len(wait_loops)} wait loops in the code, {syncs} sync edges "
                                                  "in the plan"))
    out += _check_cross_rank(p, ptx)
    out += _check_loads(p, ptx)
    out += _check_kv_stores(p, ptx)
    out += _check_grid_dependency(p, ptx)
    out += _check_tensor_copies(p, ptx)
    out += check_ring(p, ptx)
    return out


_BASE = 1 << 40  # the counters parameter's value while an address is evaluated (any value far from 0)


def _counter_sites(p: ProgramSpec, ptx: Ptx, accesses: list[Instr], kinds: list[str],
                   counters: int) -> list[CounterSite]:
    """I5's reading of the PTX: each counter access's counter, and each poll's compares as the
    count from which its wait is over, for a range of counts the step's epoch read may see."""
    defs = definitions(ptx)
    bases = {i.operands[0] for i in ptx.instrs if i.loaded_param() == counters}  # registers of the kernel

    def define(function: int):
        return lambda name: integer_definition(defs, function, name)

    def offset(ins: Instr) -> int:
        if ins.address is None or ins.displacement is None:
            raise NotEvaluable(f"the memory operand of `{ins.opcode}`")
        inputs = dict.fromkeys(bases, _BASE) if ins.function == 0 else {}
        return evaluate(ins.address, define(ins.function), inputs) + ins.displacement - _BASE

    epoch = {(a.function, r) for a, kind in zip(accesses, kinds) if kind == "epoch"
             for r in _broadcast(ptx, a, accesses)}
    sites = []
    for ins, kind in zip(accesses, kinds):
        if kind == "other":
            continue
        counter, why = counter_of(lambda ins=ins: offset(ins), p.counters)
        compares = ()
        g = next((s.signals_per_epoch for s in p.syncs if s.counter == counter), 0)
        if kind == "poll" and g:
            compares = tuple(_compares(ptx, ins, accesses, define(ins.function),
                                       {r for f, r in epoch if f == ins.function}, g))
        sites.append(CounterSite(ins.site, kind, counter, why, ptx.in_loop(ins.index), compares))
    return sites


def _window(ptx: Ptx, ins: Instr, accesses: list[Instr]) -> list[Instr]:
    """The instructions after a counter access up to the function's next one."""
    later = [a.index for a in accesses if a.index > ins.index and a.function == ins.function]
    end = later[0] if later else len(ptx.instrs)
    return [i for i in ptx.instrs[ins.index + 1:end] if i.function == ins.function]


def _broadcast(ptx: Ptx, ins: Instr, accesses: list[Instr]) -> set[str]:
    """The registers holding a counter read's value: its destination, where one thread read it
    for the CTA the shared-memory load that broadcasts it, and their copies."""
    values = {ins.operands[0]}
    stored = False
    for i in _window(ptx, ins, accesses):
        if i.base == "st" and i.has("shared") and i.operands[-1] in values:
            stored = True
        elif stored and i.base == "ld" and i.has("shared"):
            values.add(i.operands[0])
            stored = False
        elif i.opcode.startswith("mov") and len(i.operands) == 2 and i.operands[1] in values:
            values.add(i.operands[0])
    return values


def _compares(ptx: Ptx, ins: Instr, accesses: list[Instr], define, epoch: set[str], g: int):
    """Each ``setp`` on the poll's value: (thresholds per epoch sample, or why not, its site)."""
    values = _broadcast(ptx, ins, accesses)
    for i in _window(ptx, ins, accesses):
        if i.base != "setp" or len(i.operands) != 3 or not values & set(i.operands[1:]):
            continue
        try:
            op = integer_op(i)
        except NotEvaluable as e:
            yield str(e), i.site
            continue
        yield compare_thresholds(op, values, define, epoch, g), i.site


def _is_signal(ins: Instr) -> bool:
    """An add to a counter; an acquire add (of 0, not acq_rel) is a read."""
    return ins.base in ("atom", "red") and ins.has("add") and not (ins.has("acquire") and not ins.has("acq_rel"))


def _is_tensor_copy(ins: Instr) -> bool:
    return ins.opcode.startswith("cp.async.bulk.tensor")


def _check_tensor_copies(p: ProgramSpec, ptx: Ptx) -> list[Violation]:
    """The streaming contracts on a program's TMA copies (the async proxy).

    S1: every copy reads through the descriptor of a weight or of a KV cache. Weights are
    read-only for the launch; of the cache, a launch uses only entries earlier launches wrote
    (its own appends are disjoint from them, C1, as for every KV read). A KV box may also cover
    slots past the context in a split's last page, the step's own append slot among them, whose
    values the compute warps mask out unread. Nothing another CTA writes in the launch is then
    used through the async proxy, so no acquire needs a proxy fence after it, and the loader,
    which waits on no sync edge, cannot use a region before it is written.
    S2: the bytes an mbarrier is armed to expect (``mbarrier.arrive.expect_tx``) equal what the
    copies that complete on it move (each the box of its descriptor's tensor map): fewer, and
    the consumer reads a slot before its data lands; more, and it waits forever.
    """
    index = param_index(p)
    descs = {index[a.name]: a for a in p.args if a.type.startswith("tensordesc")}
    out: list[Violation] = []
    armed: dict[tuple[int, str], list] = {}  # barrier register → [expect_tx instr, bytes expected, bytes copied]

    def settle(key):
        ins, expected, copied = armed.pop(key)
        if expected != copied:
            then = "read the slot before its data lands" if copied > expected else "wait forever"
            out.append(Violation(p.name, ins.site, "S2", f"the mbarrier is armed for {expected} bytes, the TMA "
                                                           f"copies that complete on it move {copied}: its waiter would "
                                                           f"{then}"))

    for ins in ptx.instrs:
        if ins.opcode.startswith("mbarrier.arrive.expect_tx"):
            key = (ins.function, ins.mbarrier[0])
            if key in armed:
                settle(key)
            armed[key] = [ins, int(ins.operands[-1], 0), 0]
        elif _is_tensor_copy(ins):
            sources = ptx.address_params(ins)
            read = sorted(descs[k].name if k in descs else f"parameter {k}" for k in sources)
            if not sources or any(k not in descs or descs[k].role not in STREAMABLE for k in sources):
                out.append(Violation(p.name, ins.site, "S1",
                                     f"a TMA copy reads {', '.join(read) or 'an address from no parameter'}: the "
                                     "async proxy may stream only the weights and the KV cache's earlier steps "
                                     "(read-only for the launch), never a region another CTA writes in the launch"))
                continue
            key = (ins.function, ins.mbarrier[0])
            if key not in armed:
                out.append(Violation(p.name, ins.site, "S2", "a TMA copy completes on an mbarrier that no "
                                                               "expect_tx armed before it"))
                continue
            tmap = p.tensor_map(descs[min(sources)].name)
            n = tmap.elem_bytes
            for dim in tmap.box:
                n *= dim
            armed[key][2] += n
    for key in list(armed):
        settle(key)
    return out


def _check_cross_rank(p: ProgramSpec, ptx: Ptx) -> list[Violation]:
    """X1–X4, tensor parallelism's contracts, over the accesses whose address derives from the
    cross-rank arguments: every rank's counters (``tp_counters_peer<s>``), this rank's own
    (``tp_counters``) and the peers' partials and tile parts (the other ``peer`` arguments).

    X1: each access to a rank's counters is a signal: an add, a release at system scope (another
    GPU acquires it), after a CTA barrier with no global store of this CTA's between (the signals
    to the ranks follow one another). X2: each access to this rank's counters is a read, an
    acquire at system scope (the wait's target and its polls alike). X3: a peer's buffer is only
    read, past the L1 and the non-coherent path (volatile or system-scoped), never written. X4:
    the code holds the signals and wait loops the plan's cross-rank sites declare, a signal and
    a wait loop for each rank of each site, and no signal in a loop."""
    own, counters, buffers = cross_rank_params(p)
    out: list[Violation] = []
    signals, loops = 0, set()
    for ins in ptx.instrs:
        if not _is_global_memory(ins):
            continue
        params = ptx.address_params(ins)
        system = any(ins.has(s) for s in ("sys",))
        if params & counters:
            if not _is_signal(ins):
                out.append(Violation(p.name, ins.site, "X1", f"`{ins.opcode}` on a rank's cross-rank counters, "
                                                               "which only the ranks' signals may touch"))
                continue
            signals += 1
            if not (ins.has("release") or ins.has("acq_rel")) or not system:
                out.append(Violation(p.name, ins.site, "X1",
                                     f"the cross-rank signal is `{ins.opcode}`: not a release at system scope, so "
                                     "another GPU that sees the count may not see this rank's partial"))
            if ptx.in_loop(ins.index) is not None:
                out.append(Violation(p.name, ins.site, "X4", IN_A_LOOP))
            out += _barrier_before(p, ptx, ins, counters, "X1")
        elif own is not None and own in params:
            if _is_signal(ins) or ins.base not in ("ld", "atom"):
                out.append(Violation(p.name, ins.site, "X2", f"`{ins.opcode}` on this rank's cross-rank counters, "
                                                               "which it only reads (the ranks' signals write them)"))
                continue
            if not (ins.has("acquire") or ins.has("acq_rel")) or not system:
                out.append(Violation(p.name, ins.site, "X2",
                                     f"the cross-rank wait reads its counter with `{ins.opcode}`: not an acquire at "
                                     "system scope, so the peers' partials read after it may be older than their "
                                     "signals"))
            loop = ptx.in_loop(ins.index)
            if loop is not None:
                loops.add(loop)
        elif params & buffers:
            if ins.base != "ld":
                out.append(Violation(p.name, ins.site, "X3", f"`{ins.opcode}` through another rank's buffer: a rank "
                                                               "writes only its own"))
            elif not (ins.has("volatile") or system):
                out.append(Violation(p.name, ins.site, "X3",
                                     f"another rank's buffer is read with `{ins.opcode}`: not volatile or at system "
                                     "scope, so a cached copy may be older than that rank's signal"))
    return out + cross_rank_count_violations(p, signals, len(loops), "ptx")


def _barrier_before(p: ProgramSpec, ptx: Ptx, ins: Instr, counters: set[int], contract: str) -> list[Violation]:
    """A CTA barrier before the signal ``ins``, with no global store of the CTA between (the
    signals to other ranks' counters, ``counters``, may)."""
    for prev in reversed(ptx.instrs[: ins.index]):
        if prev.base in ("bar", "barrier") and (prev.has("sync") or prev.opcode == "barrier"):
            return []
        if _is_global_memory(prev) and prev.base in ("st", "atom", "red") and not ptx.address_params(prev) & counters:
            return [Violation(p.name, ins.site, contract,
                              f"no CTA barrier between the store at ptx line {prev.line} and the signal: one "
                              "thread's release does not cover the other threads' stores")]
    return [Violation(p.name, ins.site, contract, "no CTA barrier before the signal")]


def _check_signal(p: ProgramSpec, ptx: Ptx, ins: Instr) -> list[Violation]:
    out = []
    if ptx.in_loop(ins.index) is not None:  # I4: a signal site executes once a step
        out.append(Violation(p.name, ins.site, "I4", IN_A_LOOP))
    if not (ins.has("release") or ins.has("acq_rel")) or not any(ins.has(s) for s in _STRONG_SCOPES):
        out.append(Violation(p.name, ins.site, "I1",
                             f"the signal is `{ins.opcode}`: not a release at gpu scope, so a consumer that sees "
                             "the count may not see the producer's stores"))
    for prev in reversed(ptx.instrs[: ins.index]):
        if prev.base in ("bar", "barrier") and (prev.has("sync") or prev.opcode == "barrier"):
            break
        if _is_global_memory(prev) and prev.base in ("st", "atom", "red"):
            out.append(Violation(p.name, ins.site, "I1",
                                 f"no CTA barrier between the store at ptx line {prev.line} and the signal: one "
                                 "thread's release does not cover the other threads' stores"))
            break
    else:
        out.append(Violation(p.name, ins.site, "I1", "no CTA barrier before the signal"))
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
        out.append(Violation(p.name, ins.site, "I3",
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
            out.append(unguarded_kv_store(p, ins.site, f"`{ins.opcode}`"))
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
        return [Violation(p.name, early[0].site, "C2",
                          f"`{early[0].opcode}` comes before griddepcontrol.wait (ptx line "
                          f"{ptx.instrs[waits[0]].line}): it may overwrite what the previous launch still reads")]
    return []
