"""The IR contracts on gfx942 / gfx950, read from a program's LLVM IR (``llir.LlvmFunction``).

On AMD, Triton's atomics stay LLVM instructions: a signal is ``atomicrmw add`` on a pointer
derived from the ``counters`` argument, a wait read is an ``atomicrmw`` of 0 (or an atomic load)
inside a loop (a strongly connected part of the control-flow graph), and the CTA barrier is
``@llvm.amdgcn.s.barrier``.

C4's IR side is checked here as a branch: a masked store is a block entered only through a
conditional branch whose condition depends on a value loaded from ``context_lens``. C2's PDL
wait is sm_90 only (there is no PDL on AMD).
"""

from __future__ import annotations

import re

from ...manifest import ProgramSpec
from .arith import NotEvaluable, Op, evaluate
from .edges import IN_A_LOOP, CounterSite, compare_thresholds, counter_of, edge_counter_violations
from .llir import NAME, Instr, LlvmFunction, integer_op
from .plan_rules import (
    cross_cta_params,
    cross_rank_count_violations,
    cross_rank_params,
    kv_guard_params,
    unguarded_kv_store,
)
from .violations import Violation

_STRONG = ('syncscope("agent")', "syncscope(\"\")")


def _site(ins: Instr) -> str:
    return f"llir block {ins.block}"


def check_llir(p: ProgramSpec, fn: LlvmFunction) -> list[Violation]:
    names = [a.name for a in p.args]
    out: list[Violation] = []
    counters = names.index("counters") if "counters" in names else None
    signals, wait_loops = [], set()
    accesses = [ins for ins in fn.instrs if counters is not None and _is_atomic(ins)
                and counters in fn.pointer_params(ins)]
    kinds = []
    for k, ins in enumerate(accesses):
        scoped = any(s in ins.text for s in _STRONG)
        if _is_llvm_signal(ins):
            signals.append(ins)
            kinds.append("signal")
            if ins.block in fn.loop_of:  # I4: a signal site executes once a step
                out.append(Violation(p.name, _site(ins), "I4", IN_A_LOOP))
            if not ("release" in ins.text or "acq_rel" in ins.text) or not scoped:
                out.append(Violation(p.name, _site(ins), "I1", "the signal is not a release at agent scope, so a "
                                                               "consumer that sees the count may not see the stores"))
            if not _barrier_before(fn, ins):
                out.append(Violation(p.name, _site(ins), "I1", "no CTA barrier (s_barrier) between the CTA's "
                                                               "stores and the signal"))
            continue
        strong = ("acquire" in ins.text or "acq_rel" in ins.text) and scoped
        epoch = ins.block not in fn.loop_of and not strong and k + 1 < len(accesses) \
            and _is_llvm_signal(accesses[k + 1])
        kinds.append("epoch" if epoch else "poll")
        if ins.block in fn.loop_of:
            wait_loops.add(fn.loop_of[ins.block])
            if not strong:
                out.append(Violation(p.name, _site(ins), "I2", "a wait loop reads the counter without an acquire at "
                                                               "agent scope"))
        elif not strong and not epoch:  # as on sm_90: a relaxed first poll may end the wait unordered
            out.append(Violation(p.name, _site(ins), "I2", "the wait's first poll reads the counter without an "
                                                           "acquire at agent scope: when it already finds the "
                                                           "target, nothing orders the consumer's loads after the "
                                                           "signal"))
    if counters is not None:
        out += edge_counter_violations(p, _counter_sites(p, fn, accesses, kinds, counters), "llir")
    for what, found in (("signal sites", len(signals)), ("wait loops", len(wait_loops))):
        if found != len(p.syncs):
            out.append(Violation(p.name, "llir", "I4", f"{found} {what} in the code, {len(p.syncs)} sync edges in "
                                                       "the plan"))
    out += _check_cross_rank(p, fn)
    out += _check_loads(p, fn)
    out += _check_kv_stores(p, fn)
    return out


def _is_atomic(ins: Instr) -> bool:
    return ins.opcode == "atomicrmw" or ins.opcode == "load" and " atomic " in ins.text


def _is_llvm_signal(ins: Instr) -> bool:
    """An atomic add to a counter; an acquire add (of 0, not acq_rel) is a read."""
    is_add = ins.opcode == "atomicrmw" and ins.text.split("=", 1)[1].split()[1] == "add"
    return is_add and not (" acquire" in ins.text and "acq_rel" not in ins.text)


_BASE = 1 << 40  # the counters argument's value while an address is evaluated
def _counter_sites(p: ProgramSpec, fn: LlvmFunction, accesses: list[Instr], kinds: list[str],
                   counters: int) -> list[CounterSite]:
    """I5's reading of the LLVM IR, as nvidia.py's of the PTX: each counter access's counter, each
    poll's compares as the count from which its wait is over."""
    defined = {ins.result: ins for ins in fn.instrs if ins.result}

    def define(name: str) -> Op:
        if name not in defined:
            raise NotEvaluable(f"{name} is an argument or undefined")
        return integer_op(defined[name])

    def offset(ins: Instr) -> int:
        m = re.search(r"ptr(?: addrspace\(\d+\))? (%[\w.]+)", ins.text.split("=", 1)[-1])
        if m is None:
            raise NotEvaluable("its pointer operand")
        return evaluate(m.group(1), define, {fn.args[counters]: _BASE}) - _BASE

    epoch = set().union(*(_broadcast(fn, a, accesses) for a, kind in zip(accesses, kinds) if kind == "epoch"))
    sites = []
    for ins, kind in zip(accesses, kinds):
        counter, why = counter_of(lambda ins=ins: offset(ins), p.counters)
        g = next((s.signals_per_epoch for s in p.syncs if s.counter == counter), 0)
        compares = tuple(_compares(fn, ins, accesses, define, epoch, g)) if kind == "poll" and g else ()
        sites.append(CounterSite(_site(ins), kind, counter, why, fn.loop_of.get(ins.block), compares))
    return sites


def _window(fn: LlvmFunction, ins: Instr, accesses: list[Instr]) -> list[Instr]:
    later = [a.index for a in accesses if a.index > ins.index]
    return fn.instrs[ins.index + 1:later[0] if later else len(fn.instrs)]


def _broadcast(fn: LlvmFunction, ins: Instr, accesses: list[Instr]) -> set[str]:
    """The values holding a counter read's result: itself and the LDS load that broadcasts it."""
    values, stored = {ins.result}, False
    for i in _window(fn, ins, accesses):
        if i.opcode == "store" and "addrspace(3)" in i.text and re.match(rf"store i64 {re.escape(ins.result)},", i.text):
            stored = True
        elif stored and i.opcode == "load" and "addrspace(3)" in i.text:
            values.add(i.result)
            stored = False
    return values


def _compares(fn: LlvmFunction, ins: Instr, accesses: list[Instr], define, epoch: set[str], g: int):
    values = _broadcast(fn, ins, accesses)
    for i in _window(fn, ins, accesses):
        if i.opcode != "icmp" or not values & set(NAME.findall(i.text.split("=", 1)[1])):
            continue
        try:
            op = integer_op(i)
        except NotEvaluable as e:
            yield str(e), _site(i)
            continue
        yield compare_thresholds(op, values, define, epoch, g), _site(i)


def _check_kv_stores(p: ProgramSpec, fn: LlvmFunction) -> list[Violation]:
    """C4 (IR side): every store into the KV cache sits behind a branch on the row's context length."""
    guard = kv_guard_params(p)
    if guard is None:
        return []
    kv, lens = guard
    return [unguarded_kv_store(p, _site(ins), "a store (not behind a branch)")
            for ins in fn.instrs
            if ins.opcode == "store" and kv & fn.pointer_params(ins) and not fn.guarded_by(ins, lens)]


def _barrier_before(fn: LlvmFunction, ins: Instr, signals: frozenset[int] = frozenset()) -> bool:
    """A barrier on every path from the CTA's last global store to the signal (looking back through
    the signal's block and, if needed, its predecessors' tails); adds through ``signals`` (other
    ranks' counters, signalled one after another) may stand between."""

    def scan(block: str, before: int | None, depth: int) -> bool:
        body = [i for i in fn.body[block] if before is None or i.index < before]
        for prev in reversed(body):
            if "@llvm.amdgcn.s.barrier" in prev.text:
                return True
            if prev.opcode in ("store", "atomicrmw") and "addrspace(1)" in prev.text \
                    and not fn.pointer_params(prev) & signals:
                return False
        preds = fn.pred.get(block, [])
        return depth < 2 and bool(preds) and all(scan(b, None, depth + 1) for b in preds)

    return scan(ins.block, ins.index, 0)


def _system_scope(ins: Instr) -> bool:
    """LLVM's default synchronization scope is the system (AMDGPU's ``one-as`` variant orders one
    address space, which is all a global counter needs)."""
    return "syncscope(" not in ins.text or 'syncscope("one-as")' in ins.text


def _is_store(ins: Instr) -> bool:
    return ins.opcode in ("store", "atomicrmw", "cmpxchg") or "buffer.store" in ins.text \
        or "buffer.atomic" in ins.text


def _is_scalar_load(ins: Instr) -> bool:
    """A load the scalar cache serves (constant address space, s_buffer_load, or marked invariant),
    which no acquire invalidates."""
    return "!invariant.load" in ins.text or "addrspace(4)" in ins.text or "s.buffer.load" in ins.text


def _check_cross_rank(p: ProgramSpec, fn: LlvmFunction) -> list[Violation]:
    """X1–X4 on gfx9, as nvidia.py's over PTX, over the LLVM values derived from the cross-rank
    arguments (``plan_rules.cross_rank_params``).

    X1: each access to a rank's counters is an ``atomicrmw add``, a release (or acq_rel) at system
    scope, after ``s_barrier`` with no global store of the CTA's between. X2: each access to this
    rank's own counters is an atomic read with acquire at system scope, which gfx9 lowers to a
    load with sc0 sc1 and ``buffer_inv sc0 sc1`` (every cache level, for memory another agent
    writes). X3: a peer's buffer is only read, and by vector loads: those after the acquire's
    invalidation see the peer's partial; a scalar or invariant load would be served by the
    scalar cache, which no acquire invalidates. X4: the planned signals and wait loops, as on sm_90."""
    own, counters, buffers = cross_rank_params(p)
    if own is None and not counters and not buffers:
        return []
    out: list[Violation] = []
    signals, loops = 0, set()
    for ins in fn.instrs:
        params = fn.pointer_params(ins) if ins.opcode in ("load", "store", "atomicrmw", "cmpxchg", "tail", "call") \
            else frozenset()
        if params & counters:
            if not _is_llvm_signal(ins):
                out.append(Violation(p.name, _site(ins), "X1", f"`{ins.opcode}` on a rank's cross-rank counters, "
                                                               "which only the ranks' signals may touch"))
                continue
            signals += 1
            if not ("release" in ins.text or "acq_rel" in ins.text) or not _system_scope(ins):
                out.append(Violation(p.name, _site(ins), "X1", "the cross-rank signal is not a release at system "
                                                               "scope, so another GPU that sees the count may not "
                                                               "see this rank's partial"))
            if ins.block in fn.loop_of:
                out.append(Violation(p.name, _site(ins), "X4", IN_A_LOOP))
            if not _barrier_before(fn, ins, frozenset(counters)):
                out.append(Violation(p.name, _site(ins), "X1", "no CTA barrier (s_barrier) between the CTA's "
                                                               "stores and the cross-rank signal"))
        elif own is not None and own in params:
            if not _is_atomic(ins) or _is_llvm_signal(ins):
                out.append(Violation(p.name, _site(ins), "X2", f"`{ins.opcode}` on this rank's cross-rank counters, "
                                                               "which it only reads with acquires"))
                continue
            if not ("acquire" in ins.text or "acq_rel" in ins.text) or not _system_scope(ins):
                out.append(Violation(p.name, _site(ins), "X2", "the cross-rank wait reads its counter without an "
                                                               "acquire at system scope, so the peers' partials read "
                                                               "after it may be older than their signals"))
            if ins.block in fn.loop_of:
                loops.add(fn.loop_of[ins.block])
        elif params & buffers:
            if _is_store(ins):
                out.append(Violation(p.name, _site(ins), "X3", f"`{ins.opcode}` through another rank's buffer: a rank "
                                                               "writes only its own"))
            elif _is_scalar_load(ins):
                out.append(Violation(p.name, _site(ins), "X3", "another rank's buffer is read by a scalar/invariant "
                                                               "load, which the scalar cache serves and the wait's "
                                                               "acquire does not invalidate"))
    return out + cross_rank_count_violations(p, signals, len(loops), "llir")


def _check_loads(p: ProgramSpec, fn: LlvmFunction) -> list[Violation]:
    """I3 on gfx9: loads of regions other CTAs write in this launch are vector loads from global
    memory (after the acquire's cache invalidation), never scalar/invariant loads that the K$
    would serve stale."""
    regions = cross_cta_params(p)
    out = []
    for ins in fn.instrs:
        if ins.opcode != "load" and "buffer.load" not in ins.text:
            continue
        hit = sorted(regions[k] for k in fn.pointer_params(ins) if k in regions)
        if hit and ("!invariant.load" in ins.text or "addrspace(4)" in ins.text or "s.buffer.load" in ins.text):
            out.append(Violation(p.name, _site(ins), "I3",
                                 f"an invariant/scalar load of {', '.join(hit)}, which another CTA writes in this "
                                 "launch: the scalar cache is not invalidated by the wait's acquire"))
    return out
