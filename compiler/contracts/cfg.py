"""The control-flow graph of a PTX function body as ptx.py parsed it: basic blocks split at labels
and branches, their successors, and the loops among them. ptx.py records each instruction's loop
(``Ptx.in_loop``); S3 (ring.py) walks the graph's paths."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .ptx import Instr


def blocks_and_successors(instrs: list[Instr], labels: dict[str, int]) -> tuple[list[tuple[int, int]], list[set[int]]]:
    """The control-flow graph: its basic blocks (first and last instruction index) and each
    block's successors (block numbers). An indirect branch's targets (``brx``) are not followed."""
    starts = {0} | {i for i in labels.values() if i < len(instrs)}
    for ins in instrs:
        if ins.base in ("bra", "brx", "ret", "exit", "trap") and ins.index + 1 < len(instrs):
            starts.add(ins.index + 1)
        if ins.index and instrs[ins.index - 1].function != ins.function:
            starts.add(ins.index)
    first = sorted(starts)
    blocks = [(a, b - 1) for a, b in zip(first, first[1:] + [len(instrs)])]
    at = {a: k for k, (a, _) in enumerate(blocks)}
    succ: list[set[int]] = []
    for k, (_, last) in enumerate(blocks):
        ins, out = instrs[last], set()
        if ins.base == "bra" and ins.operands and labels.get(ins.operands[-1]) in at:
            out.add(at[labels[ins.operands[-1]]])
        falls = ins.base not in ("bra", "brx", "ret", "exit", "trap") or ins.predicate is not None
        if falls and k + 1 < len(blocks) and instrs[blocks[k + 1][0]].function == ins.function:
            out.add(k + 1)
        succ.append(out)
    return blocks, succ


def control_flow_loops(instrs: list[Instr], labels: dict[str, int]) -> list[tuple[int, frozenset[int]]]:
    """The loops of the control-flow graph: for each branch u → v such that v reaches u, the
    blocks on a path from v to u, gathered by header v. The PTX's text order says nothing here:
    LLVM may place a loop's body after the code that follows it, and branch back out of it."""
    blocks, succ = blocks_and_successors(instrs, labels)
    pred: list[set[int]] = [set() for _ in blocks]
    for k, out in enumerate(succ):
        for j in out:
            pred[j].add(k)

    def reach(start: int, edges: list[set[int]]) -> set[int]:
        seen, todo = {start}, [start]
        while todo:
            for j in edges[todo.pop()]:
                if j not in seen:
                    seen.add(j)
                    todo.append(j)
        return seen

    bodies: dict[int, set[int]] = {}
    for u, out in enumerate(succ):
        for v in out:
            if u in reach(v, succ):
                bodies.setdefault(v, set()).update(reach(v, succ) & reach(u, pred))
    return [(blocks[v][0], frozenset(i for k in body for i in range(blocks[k][0], blocks[k][1] + 1)))
            for v, body in sorted(bodies.items())]
