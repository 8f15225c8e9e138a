"""A kernel function of Triton's LLVM IR (the AMD targets' contracts read it): its blocks, the
control-flow graph and its loops, the pointer and value dataflow back to the arguments, and
integer instructions as ``arith.Op`` for evaluating counter addresses. llvmlite parses and
verifies the module; the instructions' text gives the names the dataflow follows (unnamed values
have no other stable handle in llvmlite).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .arith import NotEvaluable, Op

NAME = re.compile(r"%[\w.]+")  # an LLVM value
_RESULT = re.compile(r"^\s*(%[\w.]+)\s*=")
_LABEL = re.compile(r"^([\w.]+):")


@dataclass(frozen=True)
class Instr:
    """One instruction of a function: its block, its index in the function and its text."""

    block: str
    index: int  # within the function
    text: str

    @property
    def result(self) -> str | None:
        m = _RESULT.match(self.text)
        return m.group(1) if m else None

    @property
    def opcode(self) -> str:
        body = self.text.split("=", 1)[1] if self.result else self.text
        return body.split()[0]


class LlvmFunction:
    """The kernel function of a Triton llir module: blocks, CFG, loops and pointer dataflow."""

    def __init__(self, text: str):
        import llvmlite.binding as llvm

        module = llvm.parse_assembly(text)
        module.verify()
        fn = next(f for f in module.functions if not f.is_declaration)
        self.args = [f"%{i}" for i in range(len(list(fn.arguments)))]
        self.blocks: list[str] = []
        self.instrs: list[Instr] = []
        self.succ: dict[str, list[str]] = {}
        for n, block in enumerate(fn.blocks):
            first = str(block).lstrip("\n").split("\n", 1)[0]
            label = _LABEL.match(first)
            name = "%" + label.group(1) if label else f"%entry{n}"
            self.blocks.append(name)
            for ins in block.instructions:
                self.instrs.append(Instr(name, len(self.instrs), str(ins).strip()))
            last = self.instrs[-1].text
            self.succ[name] = re.findall(r"label (%[\w.]+)", last) if last.startswith(("br", "switch")) else []
        self.body: dict[str, list[Instr]] = {b: [] for b in self.blocks}
        for ins in self.instrs:
            self.body[ins.block].append(ins)
        self.pred: dict[str, list[str]] = {b: [] for b in self.blocks}
        for b, targets in self.succ.items():
            for t in targets:
                self.pred.setdefault(t, []).append(b)
        self.loop_of = _loops(self.blocks, self.succ)
        self.sources = self._pointer_sources()
        self.loaded = self._value_sources()

    def _pointer_sources(self) -> dict[str, frozenset[int]]:
        table: dict[str, set[int]] = {a: {i} for i, a in enumerate(self.args)}
        changed = True
        while changed:
            changed = False
            for ins in self.instrs:
                res = ins.result
                if res is None or ins.opcode in ("load", "atomicrmw", "cmpxchg", "call", "icmp", "fcmp"):
                    continue
                body = ins.text.split("=", 1)[1]
                srcs = set().union(*(table.get(n, set()) for n in NAME.findall(body)))
                if not srcs <= table.setdefault(res, set()):
                    table[res] |= srcs
                    changed = True
        return {k: frozenset(v) for k, v in table.items()}

    def _value_sources(self) -> dict[str, frozenset[int]]:
        """Value → arguments whose memory it was computed from (a load's pointer arguments, then
        whatever is computed from the loaded value)."""
        table: dict[str, set[int]] = {}
        changed = True
        while changed:
            changed = False
            for ins in self.instrs:
                res = ins.result
                if res is None:
                    continue
                body = ins.text.split("=", 1)[1]
                srcs = set(self.pointer_params(ins)) if ins.opcode == "load" else set()
                srcs |= set().union(*(table.get(n, set()) for n in NAME.findall(body)))
                if not srcs <= table.setdefault(res, set()):
                    table[res] |= srcs
                    changed = True
        return {k: frozenset(v) for k, v in table.items()}

    def guarded_by(self, ins: Instr, arg: int, depth: int = 4) -> bool:
        """Is the instruction's block entered only through a conditional branch whose condition
        depends on memory behind argument ``arg`` (walking up single-predecessor chains)?"""
        block = ins.block
        for _ in range(depth):
            preds = self.pred.get(block, [])
            if len(preds) != 1:
                return False
            term = self.body[preds[0]][-1]
            cond = re.match(r"br i1 (%[\w.]+), label", term.text)
            if cond and arg in self.loaded.get(cond.group(1), frozenset()):
                return True
            block = preds[0]
        return False

    def pointer_params(self, ins: Instr) -> frozenset[int]:
        """Arguments the instruction's pointer operand derives from."""
        m = re.search(r"ptr(?: addrspace\(\d+\))? (%[\w.]+)", ins.text.split("=", 1)[-1])
        return self.sources.get(m.group(1), frozenset()) if m else frozenset()


def _loops(blocks: list[str], succ: dict[str, list[str]]) -> dict[str, int]:
    """Block → id of its loop (a strongly connected component that cycles), by Tarjan's algorithm."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: dict[str, int] = {}
    counter = [0]

    def visit(v: str) -> None:
        work = [(v, iter(succ.get(v, ())))]
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        while work:
            node, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(succ.get(w, ()))))
                    break
                if w in on:
                    low[node] = min(low[node], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == node:
                            break
                    if len(comp) > 1 or node in succ.get(node, ()):
                        for w in comp:
                            out[w] = index[node]

    for b in blocks:
        if b not in index:
            visit(b)
    return out


_ELEMENT_BYTES = {"i8": 1, "i16": 2, "i32": 4, "i64": 8, "half": 2, "bfloat": 2, "float": 4, "double": 8}
_FLAGS = r"(?:\s+(?:nsw|nuw|exact|disjoint|samesign|nneg|inbounds|nusw))*"
_VALUE = r"(%[\w.]+|-?\d+|true|false)"
_BINARY = re.compile(rf"^(add|sub|mul|shl|ashr|lshr|and|or|xor|sdiv|udiv|srem|urem){_FLAGS} i(\d+) {_VALUE}, {_VALUE}$")
_CAST = re.compile(rf"^(sext|zext|trunc){_FLAGS} i(\d+) {_VALUE} to i(\d+)$")
_ICMP = re.compile(rf"^icmp{_FLAGS} (eq|ne|[su](?:lt|le|gt|ge)) i(\d+) {_VALUE}, {_VALUE}$")
_SELECT = re.compile(rf"^select i1 {_VALUE}, i(\d+) {_VALUE}, i\d+ {_VALUE}$")
_GEP = re.compile(rf"^getelementptr{_FLAGS} (\w+), ptr(?: addrspace\(\d+\))? (%[\w.]+), i(\d+) {_VALUE}$")
_COPY = re.compile(rf"^(?:freeze i64|ptrtoint ptr(?: addrspace\(\d+\))?|inttoptr i64) {_VALUE}(?: to .*)?$")
_BINARY_KINDS = {"ashr": "shr", "lshr": "shr", "sdiv": "div", "udiv": "div", "srem": "rem", "urem": "rem"}


def _operand(text: str):
    return {"true": 1, "false": 0}.get(text, int(text) if text.lstrip("-").isdigit() else text)


def integer_op(ins: Instr) -> Op:
    """The instruction as an arith.Op, or NotEvaluable."""
    body = ins.text.split("=", 1)[1].strip() if ins.result else ""
    body = re.sub(r",\s*!\S+.*$", "", body)  # metadata attachments
    if m := _BINARY.match(body):
        op, bits = m.group(1), int(m.group(2))
        signed = op in ("ashr", "sdiv", "srem")
        return Op(_BINARY_KINDS.get(op, op), bits, (_operand(m.group(3)), _operand(m.group(4))), signed=signed)
    if m := _CAST.match(body):
        op, frm, to = m.group(1), int(m.group(2)), int(m.group(4))
        return Op("mov" if op == "trunc" else op, to, (_operand(m.group(3)),), from_bits=min(frm, to))
    if m := _ICMP.match(body):
        pred = m.group(1)
        return Op("cmp", int(m.group(2)), (_operand(m.group(3)), _operand(m.group(4))), signed=pred[0] != "u",
                  predicate=pred if pred in ("eq", "ne") else pred[1:])
    if m := _SELECT.match(body):
        return Op("select", int(m.group(2)), tuple(_operand(m.group(k)) for k in (1, 3, 4)))
    if m := _GEP.match(body):
        size = _ELEMENT_BYTES.get(m.group(1))
        if size is None:
            raise NotEvaluable(f"a getelementptr over {m.group(1)} in block {ins.block}")
        index = _operand(m.group(4))
        if int(m.group(3)) < 64:
            index = Op("sext", 64, (index,), from_bits=int(m.group(3)))
        return Op("mad", 64, (index, size, m.group(2)))
    if m := _COPY.match(body):
        return Op("mov", 64, (_operand(m.group(1)),))
    raise NotEvaluable(f"`{body.split(' ', 1)[0] or ins.text}` in block {ins.block}")
