"""The emitter: a ProgramPlan becomes a Program — the kernel's source, its named ABI and options.

The plan's executor's driver writes the kernel from the plan's ops: each op's functions with the
parameters they declare, and around them the waits, signals and clocks the plan's edges and the
deployment ask for — ``kernels/driver.py`` for the Triton executor, ``kernels/stream/driver.py``
for the streaming one (whose streamed ops also get the loader's walk of their weights). The ABI
is the plan's (``derive.abi``), unchanged.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from ..schema import Arg
from . import executor, kernels
from .errors import CompileError
from .kernels import stream
from .kernels.driver import DriverSpec, OpCall, program_function, program_source
from .kernels.stream import driver as stream_driver
from .plan import ProgramPlan

KERNEL_SOURCES = (Path(__file__).parent / "kernels",)
EXECUTORS = {"triton": kernels, "gluon": stream}  # where each executor's device functions are


@dataclass(frozen=True)
class Program:
    name: str
    symbol: str  # the kernel's name
    source: str  # the kernel's Triton (or Gluon) source, every constant but its band arguments written in
    args: tuple[Arg, ...]  # the runtime parameters, in order (the named ABI)
    num_warps: int
    launch_pdl: bool
    launch_cooperative: bool
    grid: int
    max_registers: int | None = None  # a thread's register cap (ptx .maxnreg); None: the compiler's choice

    def key_parts(self) -> tuple:
        """Everything about the program that changes its code."""
        return (self.symbol, self.source, self.args, self.num_warps, self.launch_pdl, self.launch_cooperative,
                self.max_registers)

    def kernel(self):
        """The @triton.jit kernel (interpreted under ``TRITON_INTERPRET``)."""
        return program_function(self.symbol, self.source)

    @property
    def constexprs(self) -> tuple:
        """None: every constant is written into the source."""
        return ()


def _device_params(module, function: str) -> tuple[str, ...]:
    """The parameters of an op's device function, after (pid, pre) for a body or pid for a prefetch."""
    fn = getattr(module, function, None)
    if fn is None:
        raise CompileError(f"no device function {function!r} in {module.__name__}")
    return tuple(fn.arg_names)


def _pick(op_name: str, module, function: str, bindings: dict, skip: int) -> tuple[tuple[str, object], ...]:
    params = _device_params(module, function)[skip:]
    missing = [n for n in params if n not in bindings]
    if missing:
        raise CompileError(f"op {op_name}: {function} takes {', '.join(missing)}, which the op spec does not bind")
    return tuple((n, bindings[n]) for n in params)


def _site(cross_rank) -> tuple[int, int] | None:
    return None if cross_rank is None else (cross_rank.site, cross_rank.ranks)


def driver_spec(plan: ProgramPlan) -> DriverSpec:
    into = {e.consumer: e.counter for e in plan.syncs}
    out = {e.producer: e.counter for e in plan.syncs}
    module = EXECUTORS[plan.executor]
    calls = []
    for op, stage in zip(plan.ops, plan.stages):
        b = dict(op.bindings)
        body, body_args, prefetch, streamed = op.body, None, op.prefetch, None
        if plan.executor == "gluon" and op.body in stream_driver.STREAMED:  # the loader streams its inputs
            fns = stream_driver.STREAMED[op.body]
            body, prefetch = fns.compute, fns.prefetch
            body_args = _pick(op.name, module, body, b, len(fns.compute_head) + (prefetch is not None))
            streamed = (fns.loader, _pick(op.name, module, fns.loader, b, len(fns.loader_head)))
        calls.append(OpCall(
            op.name, body, body_args or _pick(op.name, module, body, b, 2), prefetch,
            _pick(op.name, module, prefetch, b, 1) if prefetch else (), stage.index, into.get(op.name),
            out.get(op.name), plan.launch_pdl and op.after_previous_launch,
            plan.launch_pdl and op.releases_next_launch, streamed, _site(op.peer_wait), _site(op.peer_signal)))
    return DriverSpec(f"{plan.kind}_kernel", plan.args, tuple(calls), plan.grid, plan.wait_spins, plan.hang_slots,
                      plan.clock_slots)


def emit(plan: ProgramPlan) -> Program:
    spec = driver_spec(plan)
    source = stream_driver.program_source(spec, plan.ring) if plan.executor == "gluon" else program_source(spec)
    # a warp-specialized program of more than 256 threads is capped to its share of the registers
    cap = executor.register_cap(plan.num_warps) if plan.executor == "gluon" else None
    return Program(plan.name, spec.symbol, source, plan.args, plan.num_warps, plan.launch_pdl,
                   plan.launch_cooperative, plan.grid, cap)


def emitter_digest() -> str:
    """A digest of every source the code objects depend on (the kernels and their drivers, this
    emitter, toolchain.py, which chooses the compile options, e.g. the register budget of a retry,
    and executor.py, which sizes the streaming programs' rings)."""
    h = hashlib.sha256()
    here = Path(__file__).parent
    files = sorted(p for root in KERNEL_SOURCES for p in root.rglob("*.py")) + [Path(__file__), here / "toolchain.py",
                                                                                here / "executor.py"]
    for path in files:
        h.update(path.relative_to(here).as_posix().encode())
        h.update(path.read_bytes())
    return h.hexdigest()
