"""S3, the streaming ring's handshake, read from a program's PTX (parsed by ptx.py).

The loader refills slot s of the ring (arms ``ready[s]`` with ``mbarrier.arrive.expect_tx``,
then copies into it) only after waiting, in the same walk, for ``empty[s]``: the compute warps'
release of the unit the slot held before. The compute warps read slot s only after waiting for
``ready[s]``, and release it (a plain ``mbarrier.arrive`` on ``empty[s]``) after a
``fence.proxy.async``: their reads of the slot go through the generic proxy, the loader's next
copy into it through the async proxy, and only the fence orders the one before the other.

A barrier's shared-memory address is the slot's barrier array plus 8 bytes a slot, so the wait
that guards a refill or a release must address the same slot as the refill or release does, in
the other array: the two addresses differ by the distance between the arrays, the same for
every pair in the program (``ready`` and ``empty`` are two arrays, allocated once). The slot
itself comes from a loop-carried count, which no integer chain reaches, so the difference is
evaluated with every value the chains cannot follow (a loop's count, a thread's id, a load) set
to random numbers, three times: a difference that changes with them is not one slot.
"""

from __future__ import annotations

import random

from ...manifest import ProgramSpec
from .arith import NotEvaluable, evaluate
from .cfg import blocks_and_successors
from .ptx import Instr, Ptx, definitions, integer_definition
from .violations import Violation

_M32 = (1 << 32) - 1  # shared-memory addresses are 32-bit


def _kind(ins: Instr) -> str | None:
    """wait (try_wait.parity), fill (arrive.expect_tx), release (arrive), fence (fence.proxy.async)."""
    if ins.opcode.startswith("mbarrier.try_wait"):
        return "wait"
    if ins.opcode.startswith("mbarrier.arrive.expect_tx"):
        return "fill"
    if ins.opcode.startswith("mbarrier.arrive"):
        return "release"
    if ins.opcode.startswith("fence.proxy.async"):
        return "fence"
    return None


class _Leaf(Exception):
    """A register whose value no integer chain gives (a loop's count, a load, a thread's id)."""

    def __init__(self, name: str):
        self.name = name


def _barrier_operand(ins: Instr) -> tuple[str, int] | None:
    """The mbarrier operand as a register plus a constant, (register, k); None for any other form
    (a symbol, a displacement that is not a constant)."""
    operand = ins.mbarrier
    if operand is None or not operand[0].startswith("%") or operand[1] is None:
        return None
    return operand


def _difference(defs, a: Instr, b: Instr) -> int | None:
    """a's barrier address minus b's (mod 2³²) where it is one number for every value of what the
    chains cannot follow; None where it is not, or where either address is a constant."""
    ops = (_barrier_operand(a), _barrier_operand(b))
    if None in ops or a.function != b.function:
        return None

    def define(name: str):
        try:
            return integer_definition(defs, a.function, name)
        except NotEvaluable:
            raise _Leaf(name) from None

    (ra, ka), (rb, kb) = ops
    seen = set()
    for seed in range(3):
        rng, inputs = random.Random(seed), {}
        for _ in range(256):
            try:
                seen.add((evaluate(ra, define, inputs) + ka - evaluate(rb, define, inputs) - kb) & _M32)
                break
            except _Leaf as leaf:
                inputs[leaf.name] = rng.getrandbits(32)
            except NotEvaluable:
                return None
        else:
            return None
    return seen.pop() if len(seen) == 1 else None


def check_ring(p: ProgramSpec, ptx: Ptx) -> list[Violation]:
    """S3 over the program's mbarrier operations (module docstring), along every path of the
    control-flow graph: a fill or a release must find, on each path into it, a wait since the
    previous fill or release (LLVM places blocks in any order, so the text's order says nothing)."""
    if not any(i.opcode.startswith("mbarrier.arrive.expect_tx") for i in ptx.instrs):
        return []
    blocks, succ = blocks_and_successors(ptx.instrs, ptx.labels)
    defs = definitions(ptx)
    fixed = _fixed_barrier_arrives(ptx, defs)
    # a state: the latest wait not yet claimed by a fill or a release on this path (its index, -1:
    # none), and whether a fence came after it; a block's entry holds every state a path brings
    entry: list[set[tuple[int, bool]]] = [set() for _ in blocks]
    has_pred = {j for out in succ for j in out}
    todo = [k for k in range(len(blocks)) if k not in has_pred]
    for k in todo:
        entry[k].add((-1, False))
    seen_at: dict[int, set[tuple[int, bool]]] = {}  # each fill's and release's states
    while todo:
        k = todo.pop()
        states = set(entry[k])
        first, last = blocks[k]
        for ins in ptx.instrs[first:last + 1]:
            kind = _kind(ins)
            if kind == "wait":
                states = {(ins.index, False)}
            elif kind == "fence":
                states = {(w, w >= 0) for w, _ in states}
            elif kind == "fill" or kind == "release" and ins.index not in fixed:
                seen_at.setdefault(ins.index, set()).update(states)
                states = {(-1, False)}
        for j in succ[k]:
            if not states <= entry[j]:
                entry[j] |= states
                todo.append(j)
    out: list[Violation] = []
    gaps = {"fill": set(), "release": set()}  # fill − its wait (ready − empty); release − its wait (empty − ready)
    for index in sorted(seen_at):
        ins = ptx.instrs[index]
        kind = _kind(ins)
        for wait, fenced in sorted(seen_at[index]):
            gap = _difference(defs, ins, ptx.instrs[wait]) if wait >= 0 else None
            if gap is None:
                out.append(Violation(p.name, ins.site, "S3", _UNGUARDED[kind]))
                break
            gaps[kind].add(gap)
            if kind == "release" and not fenced:
                out.append(Violation(p.name, ins.site, "S3", "a slot is released with no fence.proxy.async after "
                                                               "its reads: the loader's next copy (async proxy) is "
                                                               "not ordered after them"))
                break
    fills, releases = gaps["fill"], gaps["release"]
    if len(fills) > 1 or len(releases) > 1 or 0 in fills | releases or \
            fills and releases and {(-g) & _M32 for g in fills} != releases:
        out.append(Violation(p.name, "ptx", "S3", "the waits before refills and releases are not each on the other "
                                                  "array's barrier of the same slot (ready and empty "
                                                  f"{sorted(fills)} / {sorted(releases)} bytes apart)"))
    return out


def _fixed_barrier_arrives(ptx: Ptx, defs) -> set[int]:
    """The plain arrives on a barrier at one address a launch (a routed layer's ``routed_bar``,
    which the compute warps arrive on once routed), not on a slot of the ring: outside any loop,
    and their address an ``mbarrier.init``'s whatever the values the chains cannot follow. A
    release in a loop is always a slot's, even one that names a fixed slot."""
    inits = [i for i in ptx.instrs if i.opcode.startswith("mbarrier.init")]
    return {i.index for i in ptx.instrs if _kind(i) == "release" and ptx.in_loop(i.index) is None
            and any(_difference(defs, i, init) == 0 for init in inits)}


_UNGUARDED = {
    "fill": "the loader refills a slot with no wait before it, on some path, for the same slot's release: it may "
            "overwrite a unit the compute warps have not read",
    "release": "the compute warps release a slot with no wait before it, on some path, for the same slot's copy: "
               "the loader may refill it before its unit was read",
}
