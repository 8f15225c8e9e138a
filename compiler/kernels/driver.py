"""The driver: writes a program's kernel from its op list, owning waits, signals, clocks and order.

An op's device functions (``gemv.py``, ``attention.py``, …) hold only its math. The driver
writes, for each op in program order:

1. the PDL release of the next launch, where the op says the next launch may start (``down``);
2. the op's prefetch, if it has one: inputs no earlier op of the launch writes (the first weight
   chunk, attention's context lengths and first KV tile), loaded before the wait so that the
   wait hides under them;
3. the wait: for the previous launch (``griddepcontrol.wait``) before the first op that reads
   what it wrote, or on the sync edge into the op;
4. the op's clocks around its body (profiling builds), in slots numbered by the op's place;
5. its signal on the edge out of it, the step's epoch read before the program's first signal.

The kernel takes exactly the program's named ABI; every constant is written into its text, so
the source is the program's whole specialisation (and its cache key). Staged programs are the
same text for one op, with no edges and no PDL; their band constants (rows, KV splits, grid) are
arguments (``plan.band_generic``), so the text of a staged op is the same in every band of its tiles.
"""

from __future__ import annotations

import linecache
from dataclasses import dataclass

from ...schema import Arg
from ..ops.parallel import SLOTS as PEER_SLOTS

PRELUDE = """import triton
import triton.language as tl

from monobuild.compiler.kernels.attention import attention_op, attention_prefetch
from monobuild.compiler.kernels.combine import combine_op
from monobuild.compiler.kernels.gemv import gemv_op, gemv_prefetch
from monobuild.compiler.kernels.head import argmax_op, embed_op, logits_op
from monobuild.compiler.kernels.moe import experts_down_op, experts_up_op
from monobuild.compiler.kernels.norm import norm_op
from monobuild.compiler.kernels.reduce import gather_op, ranks_argmax_op, reduce_op
from monobuild.compiler.kernels.sample import sample_op, verdict_op
from monobuild.compiler.kernels.sync import clock_end, clock_start, peer_signal, peer_wait, signal, step_epoch, wait
"""


@dataclass(frozen=True)
class OpCall:
    """One op as the driver places it: its functions and the parameters each takes."""

    name: str
    body: str
    body_args: tuple[tuple[str, object], ...]  # (parameter, Arg or constant) for the body
    prefetch: str | None
    prefetch_args: tuple[tuple[str, object], ...]
    index: int  # the op's place in its kind's op list (its clock slots)
    wait_edge: int | None  # the counter of the edge into it (persistent programs)
    signal_edge: int | None  # the counter of the edge out of it
    pdl_wait: bool  # griddepcontrol.wait before it
    pdl_release: bool  # griddepcontrol.launch_dependents before it
    # a streaming program's op whose weights the loader streams: (the loader's function, its parameters)
    streamed: tuple[str, tuple[tuple[str, object], ...]] | None = None
    # tensor parallelism: the cross-rank site it waits on before its body / signals after it
    # (``ops/parallel.py``), as (site, ranks)
    peer_wait: tuple[int, int] | None = None
    peer_signal: tuple[int, int] | None = None


@dataclass(frozen=True)
class DriverSpec:
    symbol: str
    args: tuple[Arg, ...]
    ops: tuple[OpCall, ...]
    grid: int
    wait_spins: int
    hang_slots: int
    clock_slots: int


def _value(v) -> str:
    if isinstance(v, Arg):
        return v.name
    if isinstance(v, (bool, int, float)) or v is None:
        return repr(v)
    raise TypeError(f"cannot write {v!r} into a program")


def _call(fn: str, head: str, params: tuple[tuple[str, object], ...]) -> str:
    return f"{fn}({head}, " + ", ".join(f"{k}={_value(v)}" for k, v in params) + ")"


@dataclass(frozen=True)
class Spelling:
    """How an executor's device code spells what the driver places around the ops (format
    strings over the placement's numbers)."""

    release_next: str  # griddepcontrol.launch_dependents
    wait_previous: str  # griddepcontrol.wait
    clock_start: str  # {slot} {slots}
    clock_end: str
    epoch: str  # the step's wait target, read before the program's first signal: {grid}


TRITON = Spelling("tl.extra.cuda.gdc_launch_dependents()", "tl.extra.cuda.gdc_wait()",
                  "clock_start(stage_clock, {slot}, True, {slots})", "clock_end(stage_clock, {slot}, True, {slots})",
                  "target = (step_epoch(counters, {grid}) + 1) * {grid}")


def op_lines(spec: DriverSpec, spelling: Spelling, body) -> list[str]:
    """The lines of a program's op sequence (indented once): for each op, the PDL release, its
    prefetch, its wait, its clocks around ``body(op, pre)`` (the line that runs the op, ``pre``
    naming its prefetch's result), its signal."""
    lines = []
    clock = spec.clock_slots > 0
    epoch_read = False
    for op in spec.ops:
        lines.append(f"    # {op.name}")  # no op index: a staged program's text is the same at any place
        if op.pdl_release:
            lines.append(f"    {spelling.release_next}")
        pre = "None"
        if op.prefetch is not None:
            pre = f"pre_{op.name}"
            lines.append(f"    {pre} = {_call(op.prefetch, 'pid', op.prefetch_args)}")
        if op.pdl_wait:
            lines.append(f"    {spelling.wait_previous}")
        hang = "hang_log" if spec.hang_slots else "None"
        if op.peer_wait is not None:
            site, ranks = op.peer_wait
            lines.append(f"    peer_wait(tp_counters, rank, {site}, {ranks}, {PEER_SLOTS}, {hang}, {spec.wait_spins}, "
                         f"{spec.hang_slots})")
        if op.wait_edge is not None:
            lines.append(f"    wait(counters + {op.wait_edge}, target, {hang}, {spec.wait_spins}, {spec.hang_slots})")
        if clock:
            lines.append("    " + spelling.clock_start.format(slot=1 + 2 * op.index, slots=spec.clock_slots))
        lines.append(f"    {body(op, pre)}")
        if clock:
            lines.append("    " + spelling.clock_end.format(slot=2 + 2 * op.index, slots=spec.clock_slots))
        if op.peer_signal is not None:
            # before the op's own edge: a consumer past that edge finds this CTA's cross-rank signal
            # in its rank's slot, which is the count a cross-rank wait takes as its target
            site, ranks = op.peer_signal
            peers = ", ".join(f"tp_counters_peer{s}" if s < ranks else "None" for s in range(PEER_SLOTS))
            lines.append(f"    peer_signal({peers}, rank, {site}, {ranks}, {PEER_SLOTS})")
        if op.signal_edge is not None:
            if not epoch_read:
                lines.append("    " + spelling.epoch.format(grid=spec.grid))
                epoch_read = True
            lines.append(f"    signal(counters + {op.signal_edge})")
    return lines


def program_source(spec: DriverSpec) -> str:
    """The Triton source of the program (a module: the prelude, then one @triton.jit kernel)."""
    lines = ["", "", "@triton.jit", f"def {spec.symbol}({', '.join(a.name for a in spec.args)}):",
             "    pid = tl.program_id(0)", "    target = 0"]
    lines += op_lines(spec, TRITON, lambda op, pre: _call(op.body, "pid, " + pre, op.body_args))
    return PRELUDE + "\n".join(lines) + "\n"


def program_function(symbol: str, source: str):
    """The @triton.jit kernel ``symbol`` of a program's source.

    Triton reads a kernel's source back through ``inspect``, so the text is registered with
    ``linecache`` under a name of its own; under ``TRITON_INTERPRET`` the same call gives the
    interpreted kernel.
    """
    filename = f"<monobuild program {symbol} {abs(hash(source)):x}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    namespace: dict = {"__name__": f"monobuild.programs.{symbol}"}
    exec(compile(source, filename, "exec"), namespace)  # noqa: S102 — our own generated source
    return namespace[symbol]
