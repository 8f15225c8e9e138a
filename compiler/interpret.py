"""Run a plan's programs under Triton's CPU interpreter: the numerics test on CPU.

The staged programs are the persistent program's stages, one per launch, with no waits, so
they run under ``TRITON_INTERPRET`` (the interpreter runs CTAs one after another, where a
spin-wait on a CTA that has not run would never return). The persistent programs run there too
when planned for a grid of one CTA (one SM, one CTA per SM): each of its waits is for its own
signals, and the code between them is the code the GPU runs (programmatic dependent launch,
which orders launches that run one after another anyway, is a no-op there).
"""

from __future__ import annotations

import numpy as np
import torch

from ..footprint import StepLayout
from ..runtime.buffers import RankBinding, StepBuffers, StepInputs
from ..runtime.weights import PackedWeights
from .emit import emit
from .plan import Plan
from .recipe import Band


def _widen_bf16(data: np.ndarray) -> np.ndarray:
    return (data.astype(np.uint32) << 16).view(np.float32)


def _round_to_bf16(data: np.ndarray) -> np.ndarray:
    bits = data.astype(np.float32).view(np.uint32)
    rounded = bits + 0x7FFF + ((bits >> 16) & 1)  # round to nearest, ties to even (cvt.rn.bf16.f32)
    return np.where(np.isnan(data), 0x7FC0, rounded >> 16).astype(np.uint16)


def _fix_interpreter() -> None:
    """Make Triton 3.6.0's interpreter compute bf16 as the GPU does, and let it pass PDL.

    The interpreter stores bf16 as its uint16 bit pattern; its ``dot`` multiplies those bit
    patterns as integers, and its fp32 → bf16 cast truncates where the GPU rounds to nearest even;
    its fp16 ``dot`` sums in fp16, where the GPU sums in fp32.
    Both are patched here, in the interpreter only; the compiled code is untouched. It runs no
    inline PTX either: the ``griddepcontrol`` instructions of programmatic dependent launch become
    no-ops (its launches run one after another).
    """
    import triton.language as tl
    from triton.runtime import interpreter

    builder = interpreter.InterpreterBuilder
    if getattr(builder, "_monobuild_bf16", False):
        return
    plain_dot, plain_cast = builder.create_dot, builder.cast_impl

    def widen(x):  # a 16-bit operand as fp32: the GPU's products of two are exact, its sums fp32
        if x.dtype.scalar == tl.bfloat16:
            return interpreter.TensorHandle(_widen_bf16(x.data), tl.float32)
        if x.dtype.scalar == tl.float16:
            return interpreter.TensorHandle(x.data.astype(np.float32), tl.float32)
        return x

    def create_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
        return plain_dot(self, widen(a), widen(b), d, input_precision, max_num_imprecise_acc)

    def cast_impl(self, src, dst_type):
        if src.dtype.scalar == tl.float32 and dst_type.scalar == tl.bfloat16:
            return interpreter.TensorHandle(_round_to_bf16(src.data), tl.bfloat16)
        return plain_cast(self, src, dst_type)

    builder.create_dot, builder.cast_impl = create_dot, cast_impl
    # A CPU tensor runs in place: its "host copy" is its own storage, which the interpreter copies
    # back onto itself after each launch; skipped, so that ranks launched side by side
    # (``InterpretedRanks``) do not write back a peer's counters as they were before its signals.
    restore = interpreter.GridExecutor._restore_args_dev

    def restore_args_dev(self, args_dev, args_hst, kwargs, kwargs_hst):
        if all(not hasattr(a, "data_ptr") or a.device.type == "cpu" for a in (*args_dev, *kwargs.values())):
            return
        restore(self, args_dev, args_hst, kwargs, kwargs_hst)

    interpreter.GridExecutor._restore_args_dev = restore_args_dev
    builder.create_fp_trunc = lambda self, src, dst_type: self.cast_impl(src, dst_type)
    builder._monobuild_bf16 = True
    # griddepcontrol.wait / launch_dependents (PDL): the interpreter's launches run one after another
    tl.extra.cuda.gdc_wait = tl.extra.cuda.gdc_launch_dependents = lambda *args, **kwargs: None


def require_interpreter() -> None:
    """Check the interpreter is on and patch it (``_fix_interpreter``).

    Triton decides at decoration time — its own ``triton.language`` helpers included — whether a
    function is compiled or interpreted, so the interpreter must be on (``TRITON_INTERPRET=1``)
    before Triton is first imported; the tests run the interpreted step in a child process.
    """
    from triton import knobs

    if not knobs.runtime.interpret:
        raise RuntimeError("the staged programs run under the interpreter only when TRITON_INTERPRET=1 is set "
                           "before triton is imported")
    _fix_interpreter()


class InterpretedStep:
    """One band's decode step, launching its programs under the interpreter: the staged ones, or
    the persistent ones of a plan for one CTA."""

    def __init__(self, plan: Plan, band: Band, weights: PackedWeights, k_caches, v_caches, mode: str = "staged",
                 ranks: int = 1):
        self.recipe = plan.recipe
        self.step = plan.step(band, mode)
        wide = [p.name for p in plan.programs if p.mode == "persistent" and p.grid > 1 and len(p.stages) > 1]
        if mode == "persistent" and wide:
            raise ValueError(f"{wide[0]}: a grid of {plan.program(wide[0]).grid} CTAs; the interpreter runs a "
                             "persistent program only on one (plan it for one SM and one CTA per SM)")
        require_interpreter()
        used = {launch.program for launch in self.step.launches}
        self.programs = {name: (plan.program(name), emit(plan.program(name))) for name in used}
        self.kernels = {name: program.kernel() for name, (_, program) in self.programs.items()}
        regions = [r for p, _ in self.programs.values() for r in p.regions]
        g = self.recipe.rank_geometry
        plans = [p for p, _ in self.programs.values()]
        layout = StepLayout(tuple(regions), len(self.step.launches), max(p.counters for p in plans),
                            max(p.hang_slots for p in plans), (0, 0))
        self.buffers = StepBuffers(g, layout, band.m, self.recipe.deployment.max_context, poison=True, ranks=ranks)
        self.weights, self.k_caches, self.v_caches = weights, k_caches, v_caches

    def __call__(self, inputs: StepInputs) -> tuple[torch.Tensor, torch.Tensor]:
        for index in range(len(self.step.launches)):
            self.launch(index, inputs)
        return self.buffers.logits, self.buffers.next_ids

    def launch(self, index: int, inputs: StepInputs) -> None:
        """Run the step's launch ``index``."""
        launch = self.step.launches[index]
        plan, program = self.programs[launch.program]
        args = self.buffers.args(program.args, index, launch.layer, plan.kind, self.weights, self.k_caches,
                                 self.v_caches, inputs, plan.scalars)
        self.kernels[launch.program][(program.grid,)](*args)


class InterpretedRanks:
    """One band's step over every rank of a tensor-parallel plan, under the interpreter. Staged:
    each launch runs on every rank, rank after rank, before the next launch, so an all-reduce's
    wait finds every rank's signals already counted (the interpreter runs one CTA at a time; a
    wait for a rank that has not run would never return). Persistent (a plan for one CTA): a
    launch's all-reduce waits inside the launch for the peers' signals of the same launch, so
    the ranks' launches run side by side, a thread each (``_side_by_side``). ``weights[rank]`` and
    the caches are each rank's shard (``runtime.shards``, its KV heads)."""

    def __init__(self, plan: Plan, band: Band, weights: list[PackedWeights], k_caches: list, v_caches: list,
                 mode: str = "staged"):
        d, g = plan.recipe.deployment, plan.recipe.geometry
        tp = d.tp
        self.mode = mode
        self.ranks = [InterpretedStep(plan, band, weights[rank], k_caches[rank], v_caches[rank], mode, tp.size)
                      for rank in range(tp.size)]
        buffers = [r.buffers for r in self.ranks]
        for rank, r in enumerate(self.ranks):
            r.buffers.rank_binding = RankBinding.of(tp, g, rank, buffers)

    def __call__(self, inputs: StepInputs) -> list[StepBuffers]:
        """Run the step on every rank; each rank's buffers (its logits are its vocabulary rows)."""
        for index in range(len(self.ranks[0].step.launches)):
            if self.mode == "persistent":
                _side_by_side([lambda r=r, k=index: r.launch(k, inputs) for r in self.ranks])
            else:
                for r in self.ranks:
                    r.launch(index, inputs)
        return [r.buffers for r in self.ranks]


def _side_by_side(launches) -> None:
    """Run the ranks' launches of one step's launch at once, a thread each (the interpreter's
    atomics are the runtime's; the GIL passes between the threads' spin-waits).

    Triton's interpreter patches ``triton.language`` for each launch (and each jit function it
    calls) and restores it when the launch returns, which would pull the language from under a
    launch still running in another thread: here each patch is made under a lock and its restore
    is held until every thread has returned, then all are restored, last first. Every launch has
    one CTA (the interpreter's CTA index is one global)."""
    import threading

    from triton.runtime import interpreter

    class _Held:
        def restore(self):
            pass

    patch, lock, scopes = interpreter._patch_lang, threading.Lock(), []

    def held_patch(fn):
        with lock:
            scopes.append(patch(fn))
        return _Held()

    interpreter._patch_lang = held_patch
    failures: list[BaseException] = []

    def run(launch):
        try:
            launch()
        except BaseException as e:  # noqa: BLE001 (re-raised in the caller's thread)
            failures.append(e)

    try:
        threads = [threading.Thread(target=run, args=(launch,)) for launch in launches]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        interpreter._patch_lang = patch
        for scope in reversed(scopes):
            scope.restore()
    if failures:
        raise failures[0]
