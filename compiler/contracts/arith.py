"""Integer arithmetic read back from the IR: the value an address or a wait target computes.

I5 needs two numbers the register dataflow alone does not give: which counter of the block a
signal or a poll addresses (its address minus the ``counters`` parameter), and the target a
wait compares its polls with, as a function of the step's epoch read. Both are short chains of
integer instructions (an add of 8·k to the parameter; ``q = seen / G`` by multiply-high and
shifts, then ``q·G + G``). Each frontend (PTX, LLVM IR) turns a value's defining instruction
into an ``Op``; ``evaluate`` runs the chain on concrete inputs, in the instructions' own bit
widths, and raises ``NotEvaluable`` where the chain leaves integer arithmetic on known inputs
(a load, a phi, a second definition): the check then says it cannot follow the value, rather
than guessing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

M64 = (1 << 64) - 1


class NotEvaluable(Exception):
    """A value whose chain holds something other than integer arithmetic on known inputs."""


@dataclass(frozen=True)
class Op:
    """One defining instruction, target-neutral: ``kind`` (below), the operation's bit width,
    operands (a value's name or an int), and for ``cmp`` its predicate (lt/le/gt/ge/eq/ne, with
    ``signed``), for ``sext``/``zext`` the source width and for a widening ``mul``/``mad`` its
    factors' width."""

    kind: str
    bits: int
    operands: tuple[str | int | Op, ...]  # an Op operand: an operation without a name of its own (LLVM's GEP)
    signed: bool = True
    predicate: str = ""
    from_bits: int = 0


def _signed(x: int, bits: int) -> int:
    x &= (1 << bits) - 1
    return x - (1 << bits) if x >> (bits - 1) else x


def _trunc_div(a: int, b: int) -> int:
    if b == 0:
        raise NotEvaluable("division by zero")
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


def _apply(op: Op, args: list[int]) -> int:
    bits, mask = op.bits, (1 << op.bits) - 1
    s = [_signed(a, bits) for a in args] if op.signed else [a & mask for a in args]
    k = op.kind
    if k == "mov":
        r = args[0]
    elif k == "add":
        r = args[0] + args[1]
    elif k == "sub":
        r = args[0] - args[1]
    elif k in ("mul", "mad"):
        a, b = args[0], args[1]
        if op.from_bits:  # a widening multiply: its factors are from_bits wide
            ext = (lambda x: _signed(x, op.from_bits)) if op.signed else (lambda x: x & ((1 << op.from_bits) - 1))
            a, b = ext(a), ext(b)
        r = a * b + (args[2] if k == "mad" else 0)
    elif k == "mulhi":
        r = (s[0] * s[1]) >> bits
    elif k == "shl":
        r = args[0] << (args[1] & (bits - 1))
    elif k == "shr":  # arithmetic when signed
        r = s[0] >> (args[1] & (bits - 1))
    elif k in ("and", "or", "xor"):
        r = {"and": args[0] & args[1], "or": args[0] | args[1], "xor": args[0] ^ args[1]}[k]
    elif k == "div":
        r = _trunc_div(s[0], s[1])
    elif k == "rem":
        r = s[0] - _trunc_div(s[0], s[1]) * s[1]
    elif k in ("min", "max"):
        r = min(s) if k == "min" else max(s)
    elif k == "neg":
        r = -args[0]
    elif k == "not":
        r = ~args[0]
    elif k == "sext":
        r = _signed(args[0], op.from_bits)
    elif k == "zext":
        r = args[0] & ((1 << op.from_bits) - 1)
    elif k == "select":
        r = args[1] if args[0] & 1 else args[2]
    elif k == "cmp":
        r = int(compare(op.predicate, s[0], s[1]))
    else:
        raise NotEvaluable(f"operation {k}")
    return r & mask


def compare(predicate: str, a: int, b: int) -> bool:
    return {"lt": a < b, "le": a <= b, "gt": a > b, "ge": a >= b, "eq": a == b, "ne": a != b}[predicate]


def evaluate(value: str, define: Callable[[str], Op], inputs: dict[str, int]) -> int:
    """``value`` computed from ``inputs`` (values by name) through the definitions ``define``
    gives (which raises NotEvaluable for anything it cannot express as an Op). Values are
    unsigned in their width; a 64-bit count is far below 2⁶³ (C5), so it reads the same signed."""
    memo: dict[str, int] = dict(inputs)

    def run(name: str, depth: int) -> int:
        if name in memo:
            return memo[name]
        if depth > 64:
            raise NotEvaluable("a chain longer than 64 instructions")
        memo[name] = apply(define(name), depth)
        return memo[name]

    def apply(op: Op, depth: int) -> int:
        return _apply(op, [a if isinstance(a, int) else apply(a, depth + 1) if isinstance(a, Op) else run(a, depth + 1)
                           for a in op.operands])

    return run(value, 0)


def threshold(predicate: str, poll_first: bool, target: int) -> int | None:
    """The count from which a poll compared by ``predicate`` with ``target`` is past it: a wait
    loop leaves, and its first poll skips the loop, once the count is at least this. None for
    an equality test (which a count that overshoots never meets)."""
    if predicate in ("eq", "ne"):
        return None
    if not poll_first:
        predicate = {"lt": "gt", "gt": "lt", "le": "ge", "ge": "le"}[predicate]
    return target if predicate in ("lt", "ge") else target + 1


def epoch_samples(signals_per_epoch: int) -> tuple[int, ...]:
    """Counts a step may begin with, for each of which a wait's target must be the next epoch's
    end: the first epoch, around an epoch's end, and far into a deployment's life."""
    g = signals_per_epoch
    return (0, 1, g - 1, g, g + 1, 7 * g + 3, 1_000_003 * g + g - 1)


def expected_target(seen: int, signals_per_epoch: int) -> int:
    """The target of every wait in a step that began with the counter at ``seen``: the end of the
    epoch after the one ``seen`` lies in."""
    return (seen // signals_per_epoch + 1) * signals_per_epoch
