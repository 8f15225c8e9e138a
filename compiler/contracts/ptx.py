"""Read a Triton kernel's PTX for the contract checks: instructions, loops, and where values come from.

PTX from Triton is the kernel (``.entry``) and, where a jit function is not inlined
(``@triton.jit(noinline=True)``; no shipped program has one), functions it calls (``.func``): virtual registers,
one instruction per line (inline asm included, between ``// begin inline asm`` markers). That
is enough to answer, without a GPU: which kernel parameter an address derives from (a register's
*pointer sources*), which parameters' *loaded values* a register depends on (for predicates: "is
this store guarded by a value read from context_lens?"), and which instructions sit inside a
loop (a label and a later branch back to it). A call passes its arguments through the param
space: what the caller stores into each argument slot flows into the callee's parameter of
that position, so a function's loads and stores trace back to the kernel's parameters too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from .cfg import control_flow_loops

_LABEL = re.compile(r"^\s*(\$?[\w.]+):(?!:)")  # not a state space: `fence.proxy.async.shared::cta;`
_INSTR = re.compile(r"^\s*(?:@(!?%?\w+)\s+)?([a-z][\w.:]*)\s*(.*?);\s*$")
_REG = re.compile(r"%[\w]+")
_PARAM = re.compile(r"\[\s*([\w$]+)_param_(\d+)\s*\]")
_PARAM_SYMBOL = re.compile(r"^([\w$]+)_param_(\d+)$")  # a parameter's address taken (mov %rd, k_param_3)
_FUNCTION = re.compile(r"^\s*(?:\.visible\s+|\.weak\s+)?\.(entry|func)\s+(?:\([^)]*\)\s*)?([\w$]+)")
_CALL = re.compile(r"^\s*([\w$]+)\s*,\s*\(([^)]*)\)")


@dataclass(frozen=True)
class Instr:
    index: int
    line: int  # 1-based line in the PTX file
    predicate: str | None  # "%p3" or "!%p3"
    opcode: str  # "atom.global.gpu.release.add.u64"
    operands: tuple[str, ...]
    function: int = 0  # which function of the file (0: the kernel): registers are named per function

    @property
    def base(self) -> str:
        return self.opcode.split(".", 1)[0]

    def has(self, *parts: str) -> bool:
        pieces = self.opcode.split(".")
        return all(p in pieces for p in parts)

    @property
    def address(self) -> str | None:
        """The register of the global memory operand ``[ %rd5 + 8 ]``, if any (for
        ``cp.async``, the second memory operand: the first is the shared-memory destination)."""
        memory = [op for op in self.operands if op.startswith("[")]
        if self.base == "cp":
            memory = memory[1:]
        for op in memory:
            regs = _REG.findall(op)
            return regs[0] if regs else None
        return None

    @property
    def displacement(self) -> int | None:
        """The constant added to the global memory operand's register (``[ %rd5 + 8 ]``: 8; none
        written: 0), None where it is not a constant."""
        memory = [op for op in self.operands if op.startswith("[")][1 if self.base == "cp" else 0:]
        if not memory:
            return None
        plus = memory[0].strip("[] ").split("+")
        return 0 if len(plus) == 1 else immediate(plus[1].strip())

    @property
    def site(self) -> str:
        """Where a violation is, as a reader of the PTX file finds it."""
        return f"ptx line {self.line}"

    @property
    def mbarrier(self) -> tuple[str, int | None] | None:
        """The last memory operand ``[%r + k]``, which names the mbarrier of a TMA copy, an
        ``expect_tx``, an arrive or a wait: (its register or symbol, k: 0 where none is written,
        None where it is not a constant); None where the instruction has no memory operand."""
        memory = [op for op in self.operands if op.startswith("[")]
        if not memory:
            return None
        parts = [x.strip() for x in memory[-1].strip("[] ").split("+")]
        return parts[0], immediate(parts[1]) if len(parts) == 2 else 0 if len(parts) == 1 else None

    def loaded_param(self) -> int | None:
        """The kernel parameter an ``ld.param`` of the kernel (function 0) reads, else None."""
        p = _PARAM.search(self.operands[-1]) if self.base == "ld" and self.has("param") and self.operands else None
        return int(p.group(2)) if p and self.function == 0 else None


# A register, told apart from the same name in another function: (function, name).
Reg = tuple[int, str]


@dataclass
class Ptx:
    instrs: list[Instr]
    labels: dict[str, int]  # label → index of the first instruction after it
    # each loop: (its header's first instruction, the instructions of its body)
    loops: list[tuple[int, frozenset[int]]]
    functions: tuple[str, ...] = ()  # names, the kernel first
    # (callee, position) → the caller registers stored into that argument, at every call site
    call_args: dict[tuple[str, int], set[Reg]] = field(default_factory=dict)
    pointer_sources: dict[Reg, frozenset[int]] = field(default_factory=dict)
    value_sources: dict[Reg, frozenset[int]] = field(default_factory=dict)

    def in_loop(self, index: int) -> int | None:
        """The innermost loop holding instruction ``index``, named by its header's first instruction."""
        holding = [lp for lp in self.loops if index in lp[1]]
        return min(holding, key=lambda lp: len(lp[1]))[0] if holding else None

    def address_params(self, instr: Instr) -> frozenset[int]:
        return self.pointer_sources.get((instr.function, instr.address or ""), frozenset())

    def never_executes(self, instr: Instr) -> bool:
        """Guarded by a predicate that is a constant false (``mov.pred %p, 0`` as its only
        definition): Triton emits such stores for padding lanes that a mask rules out statically."""
        if not instr.predicate:
            return False
        reg = instr.predicate.lstrip("!")
        defs = [i for i in self.instrs if i.function == instr.function and i.operands and i.operands[0] == reg
                and i.base not in ("st", "bra")]
        constant = "1" if instr.predicate.startswith("!") else "0"
        return bool(defs) and all(d.opcode == "mov.pred" and d.operands[1:] == (constant,) for d in defs)

    def predicate_loads(self, instr: Instr) -> frozenset[int]:
        """Parameters whose pointed-to values the instruction's predicate depends on."""
        if not instr.predicate:
            return frozenset()
        return self.value_sources.get((instr.function, instr.predicate.lstrip("!")), frozenset())


def _split_operands(text: str) -> tuple[str, ...]:
    out, depth, cur = [], 0, ""
    for ch in text:
        if ch in "[{(":
            depth += 1
        elif ch in "]})":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur.strip())
    return tuple(out)


def parse_ptx(text: str) -> Ptx:
    instrs: list[Instr] = []
    labels: dict[str, int] = {}
    functions: list[str] = []
    current = 0
    in_body = False
    # Braces inside a body open scopes whose labels are their own: inline PTX such as an mbarrier
    # wait's `waitLoop:` appears once per call site. Such a label is named label@scope, and a
    # branch inside the scope to it is resolved to that name.
    scopes: list[int] = []
    opened = 0
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.split("//", 1)[0]
        header = _FUNCTION.match(line)
        if header:  # a function's header (a declaration has no body: its name is taken again below)
            name = header.group(2)
            if name not in functions:
                functions.append(name)
            current = functions.index(name)
            scopes = []
            continue
        if not in_body:
            in_body = line.strip() == "{"
            continue
        if line.strip() == "{":
            opened += 1
            scopes.append(opened)
            continue
        if line.strip() == "}":
            if scopes:
                scopes.pop()
            continue
        label = _LABEL.match(line)
        if label:
            labels[f"{label.group(1)}@{scopes[-1]}" if scopes else label.group(1)] = len(instrs)
            continue
        m = _INSTR.match(line)
        if m:
            operands = _split_operands(m.group(3))
            if m.group(2).startswith("bra") and operands:
                local = next((f"{operands[-1]}@{s}" for s in reversed(scopes) if f"{operands[-1]}@{s}" in labels), None)
                if local:
                    operands = (*operands[:-1], local)
            instrs.append(Instr(len(instrs), lineno, m.group(1), m.group(2), operands, current))
    loops = control_flow_loops(instrs, labels)
    kernel = next((i for i, n in enumerate(functions) if _is_entry(text, n)), 0)
    order = (functions[kernel], *(n for i, n in enumerate(functions) if i != kernel))
    renumber = {functions.index(n): k for k, n in enumerate(order)}
    instrs = [Instr(i.index, i.line, i.predicate, i.opcode, i.operands, renumber[i.function]) for i in instrs]
    ptx = Ptx(instrs, labels, loops, order, _call_args(instrs))
    _dataflow(ptx)
    return ptx


def _is_entry(text: str, name: str) -> bool:
    return re.search(rf"\.entry\s+{re.escape(name)}\b", text) is not None


def _call_args(instrs: list[Instr]) -> dict[tuple[str, int], set[Reg]]:
    """For each callee parameter, the caller registers stored (``st.param``) into the argument
    slot the call passes in that position."""
    out: dict[tuple[str, int], set[Reg]] = {}
    slots: dict[str, set[Reg]] = {}  # this call sequence's argument slots
    for ins in instrs:
        if ins.base == "st" and ins.has("param"):
            slot = re.match(r"\[\s*(\w+)", ins.operands[0])
            if slot:
                slots.setdefault(slot.group(1), set()).update((ins.function, r) for r in _REG.findall(ins.operands[1]))
        elif ins.base == "call":
            call = _CALL.match(", ".join(ins.operands))
            if call:
                args = [a.strip() for a in call.group(2).split(",") if a.strip()]
                for k, arg in enumerate(args):
                    out.setdefault((call.group(1), k), set()).update(slots.get(arg, ()))
            slots = {}
    return out


def _dataflow(ptx: Ptx) -> None:
    """Propagate, to a fixed point, which parameters each register's value points into (pointer
    sources) and which parameters' memory its value was computed from (value sources). A load
    of the kernel's parameter k points into k; a load of a called function's parameter takes what
    the callers' registers for that argument point into."""
    ptr: dict[Reg, set[int]] = {}
    val: dict[Reg, set[int]] = {}
    kernel = ptx.functions[0] if ptx.functions else None
    changed = True
    while changed:
        changed = False
        for ins in ptx.instrs:
            f = ins.function
            if not ins.operands or ins.base in ("st", "bra", "atom", "red", "cp", "bar", "ret", "call"):
                if ins.base == "atom" and ins.operands:  # the old value is data from memory
                    changed |= _add(val, _dests(f, ins.operands[0]), _pointees(ins, ptr))
                continue
            dests = _dests(f, ins.operands[0])
            sources = ins.operands[1:]
            if ins.base == "ld" and ins.has("param"):
                p = _PARAM.search(ins.operands[-1])
                if p and p.group(1) == kernel:
                    changed |= _add(ptr, dests, {int(p.group(2))})
                elif p:
                    callers = ptx.call_args.get((p.group(1), int(p.group(2))), set())
                    changed |= _add(ptr, dests, _union_regs(ptr, callers))
                    changed |= _add(val, dests, _union_regs(val, callers))
                continue
            if ins.base == "ld":
                changed |= _add(val, dests, _pointees(ins, ptr) | _union(val, f, sources))
                continue
            symbol = _PARAM_SYMBOL.match(sources[0]) if ins.base == "mov" and len(sources) == 1 else None
            if symbol and symbol.group(1) == kernel:  # a by-value parameter's address (a TMA descriptor)
                changed |= _add(ptr, dests, {int(symbol.group(2))})
                continue
            regs = [r for s in sources for r in _REG.findall(s)]
            changed |= _add(ptr, dests, _union(ptr, f, regs))
            changed |= _add(val, dests, _union(val, f, regs))
    ptx.pointer_sources = {k: frozenset(v) for k, v in ptr.items()}
    ptx.value_sources = {k: frozenset(v) for k, v in val.items()}


def _dests(function: int, op: str) -> list[Reg]:
    return [(function, r) for r in _REG.findall(op)]


def _pointees(ins: Instr, ptr: dict[Reg, set[int]]) -> set[int]:
    return set(ptr.get((ins.function, ins.address or ""), ()))


def _union(table: dict[Reg, set[int]], function: int, regs) -> set[int]:
    out: set[int] = set()
    for r in regs:
        for reg in _REG.findall(r) if not r.startswith("%") else [r]:
            out |= table.get((function, reg), set())
    return out


def _union_regs(table: dict[Reg, set[int]], regs) -> set[int]:
    out: set[int] = set()
    for reg in regs:
        out |= table.get(reg, set())
    return out


def _add(table: dict[Reg, set[int]], keys: list[Reg], values: set[int]) -> bool:
    grew = False
    for k in keys:
        cur = table.setdefault(k, set())
        if not values <= cur:
            cur |= values
            grew = True
    return grew


# -- integer arithmetic, for arith.evaluate -----------------------------------------------------

_TYPE = re.compile(r"^[sub](\d+)$")
_PTX_KINDS = {"mov": "mov", "add": "add", "sub": "sub", "mad": "mad", "shl": "shl", "shr": "shr", "and": "and",
              "or": "or", "xor": "xor", "not": "not", "neg": "neg", "div": "div", "rem": "rem", "min": "min",
              "max": "max", "selp": "select", "setp": "cmp", "cvt": "cvt", "mul": "mul"}
_IMMEDIATE = re.compile(r"^-?(?:0[xX][0-9a-fA-F]+|\d+)$")


def immediate(text: str) -> int | None:
    """An integer operand's value (PTX writes 8, -8, 0x1F; floats as 0f…/0d…), or None."""
    return int(text, 0) if _IMMEDIATE.match(text) else None


def definitions(ptx: Ptx) -> dict[Reg, list[Instr]]:
    """Each register's defining instructions (its first operand: not stores, branches, barriers)."""
    out: dict[Reg, list[Instr]] = {}
    for ins in ptx.instrs:
        if ins.operands and ins.base not in ("st", "bra", "bar", "barrier", "red", "call", "ret") \
                and ins.operands[0].startswith("%"):
            out.setdefault((ins.function, ins.operands[0]), []).append(ins)
    return out


def integer_definition(defs: dict[Reg, list[Instr]], function: int, name: str):
    """Register ``name``'s one definition in ``function`` as an arith.Op (``definitions`` gives
    ``defs``), or NotEvaluable: defined more than once or not at all (a parameter, a loop's
    count), or by what no integer chain follows."""
    from .arith import NotEvaluable

    found = defs.get((function, name), [])
    if len(found) != 1:
        raise NotEvaluable(f"{name} is defined {len(found)} times")
    return integer_op(found[0])


def integer_op(ins: Instr):
    """The instruction as an arith.Op, or NotEvaluable (a load, a float, a predicated definition)."""
    from .arith import NotEvaluable, Op

    pieces = ins.opcode.split(".")
    kind = _PTX_KINDS.get(pieces[0])
    types = [int(m.group(1)) for t in pieces[1:] if (m := _TYPE.match(t))]
    if kind is None or ins.predicate or not types and not ins.has("pred"):
        raise NotEvaluable(f"`{ins.opcode}` at ptx line {ins.line}")
    signed = any(t.startswith("s") and _TYPE.match(t) for t in pieces[1:])
    operands = []
    for text in ins.operands[1:]:
        value = immediate(text)
        if value is None and not re.fullmatch(r"%\w+", text):
            raise NotEvaluable(f"operand {text!r} of `{ins.opcode}` at ptx line {ins.line}")
        operands.append(text if value is None else value)
    bits = types[0] if types else 1
    if kind == "cvt":  # cvt.<to>.<from>: widen by the source's signedness, or narrow
        if len(types) != 2 or len(pieces) != 3:
            raise NotEvaluable(f"`{ins.opcode}` at ptx line {ins.line}")
        to, frm = types
        ext = "sext" if pieces[2].startswith("s") else "zext"
        return Op(ext if frm < to else "mov", to, tuple(operands), from_bits=min(frm, to))
    if kind == "cmp":
        if len(operands) != 2:  # setp's combining forms (setp.lt.and …) and two-predicate results
            raise NotEvaluable(f"`{ins.opcode}` at ptx line {ins.line}")
        predicate = pieces[1].lstrip("u") if pieces[1] in ("lt", "le", "gt", "ge", "eq", "ne", "lo", "ls", "hi",
                                                            "hs") else ""
        predicate = {"lo": "lt", "ls": "le", "hi": "gt", "hs": "ge"}.get(predicate, predicate)
        if not predicate:
            raise NotEvaluable(f"`{ins.opcode}` at ptx line {ins.line}")
        return Op("cmp", bits, tuple(operands), signed=signed, predicate=predicate)
    if kind == "select":
        return Op("select", bits, (operands[2], operands[0], operands[1]))
    if kind in ("mul", "mad"):
        if ins.has("hi"):
            if kind == "mad":
                raise NotEvaluable(f"`{ins.opcode}` at ptx line {ins.line}")
            return Op("mulhi", bits, tuple(operands), signed=signed)
        if ins.has("wide"):
            return Op(kind, 2 * bits, tuple(operands), signed=signed, from_bits=bits)
    return Op(kind, bits, tuple(operands), signed=signed)
