"""The streaming executor's driver: writes a persistent program's Gluon kernel from its op list.

The kernel allocates the ring (``slots`` units of [rows, cols] weight elements — a GEMV's weight
chunk or, the same bytes seen as bf16, one of attention's KV tiles — each with a ``ready`` and an
``empty`` mbarrier) and the activation
chunks' ring, then forks:

- the **loader** (one warp, few registers) walks the units of every streamed op in program order
  (a GEMV's weight chunks, ``load_weights``; attention's KV tiles, ``load_kv``), each op's tasks
  as the compute warps will run them; it waits on nothing but free slots, so it runs ahead of
  every sync edge and of the launch's ``griddepcontrol.wait``;
- the **compute warps** run the ops in order, placed by the Triton driver's ``op_lines`` with
  this executor's spelling: the PDL release, the op's prefetch, its wait (``griddepcontrol.wait``
  or the edge's counter), its clocks, its body, its signal. A streamed op's body takes the ring
  and returns the CTA's advanced place in the weight stream.

Both sides derive the stream from the same op list, so they agree on every unit's slot and phase
by construction: unit i is in slot i mod slots, completing phase (i div slots) mod 2.
"""

from __future__ import annotations

from dataclasses import dataclass

from ....schema import Arg
from ...executor import Ring
from ..driver import DriverSpec, Spelling, _call, op_lines

PRELUDE = """from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier

from monobuild.compiler.kernels.stream import (clock_end, clock_start, combine_op, grid_dependency_wait,
                                               launch_dependents, load_kv, load_weights, norm_op, signal, step_target,
                                               stream_attention, stream_attention_prefetch, stream_gemv, tile_smem,
                                               wait)
"""


@dataclass(frozen=True)
class Streamed:
    """The functions of an op whose inputs the loader streams."""

    compute: str  # the compute warps' body: takes the rings (and the prefetch's result), returns the stream's place
    loader: str  # the loader's walk of the op's units
    prefetch: str | None = None  # what the compute warps load before the op's wait, if anything


#: A ring unit's element type: the projections' dtype (attention's KV tiles reinterpret the bytes).
GL_DTYPES = {"bf16": "gl.bfloat16", "fp8e4nv": "gl.float8e4nv"}
#: Triton-executor body → the streaming executor's functions for it.
STREAMED = {"gemv_op": Streamed("stream_gemv", "load_weights"),
            "attention_op": Streamed("stream_attention", "load_kv", "stream_attention_prefetch")}
#: What each partition takes before the kernel's own arguments (the rings the kernel allocates).
LOADER_RINGS = ("pid", "ring", "ready", "empty")
COMPUTE_RINGS = (*LOADER_RINGS, "xring")
#: The leading parameters of a streamed op's functions, which the driver passes itself: the
#: partition's rings and ``i``, the CTA's place in its weight stream (returned advanced).
LOADER_HEAD = ("pid", "i", *LOADER_RINGS[1:])
COMPUTE_HEAD = ("pid", "i", *COMPUTE_RINGS[1:])


def _loader_source(spec: DriverSpec, loader_args: tuple[str, ...]) -> list[str]:
    lines = ["", "", "@gluon.jit", f"def _loader({', '.join(LOADER_RINGS + loader_args)}):", "    i = 0"]
    for op in spec.ops:
        if op.streamed is not None:
            lines.append(f"    i = {_call(op.streamed[0], ', '.join(LOADER_HEAD), op.streamed[1])}")
    return lines


GLUON = Spelling("launch_dependents()", "grid_dependency_wait()", "clock_start(stage_clock, {slot}, {slots})",
                 "clock_end(stage_clock, {slot}, {slots})", "target = step_target(counters, {grid})")


def _body(op, pre: str) -> str:
    """A streamed op's body takes the rings (and its prefetch's result) and returns the CTA's
    advanced place in the stream."""
    if op.streamed is not None:
        head = ", ".join(COMPUTE_HEAD + ((pre,) if op.prefetch else ()))
        return f"i = {_call(op.body, head, op.body_args)}"
    return _call(op.body, "pid, " + pre, op.body_args)


def _compute_source(spec: DriverSpec, compute_args: tuple[str, ...]) -> list[str]:
    lines = ["", "", "@gluon.jit", f"def _compute({', '.join(COMPUTE_RINGS + compute_args)}):", "    i = 0",
             "    target = 0"]
    return lines + op_lines(spec, GLUON, _body)


def program_source(spec: DriverSpec, ring: Ring) -> str:
    """The Gluon source of a streaming program (a module: the prelude, the two partitions, then
    the kernel, which allocates the rings and forks them)."""
    descs = tuple(a.name for a in spec.args if a.type.startswith("tensordesc"))
    weights = [a.name for a in spec.args if a.type.startswith("tensordesc") and a.role == "layer_weight"]
    if not weights:
        raise ValueError(f"{spec.symbol}: a streaming program streams at least one weight")
    loaded = {v.name for op in spec.ops if op.streamed for _, v in op.streamed[1] if isinstance(v, Arg)}
    loader_args = tuple(a.name for a in spec.args if a.name in loaded)
    compute_args = tuple(a.name for a in spec.args if a.name not in descs)
    kernel = ["", "", "@gluon.jit", f"def {spec.symbol}({', '.join(a.name for a in spec.args)}):",
              "    pid = gl.program_id(0)",
              f"    ring = gl.allocate_shared_memory({GL_DTYPES[ring.weight]}, [{ring.slots}, {ring.rows}, {ring.cols}], "
              f"{weights[0]}.layout)",
              f"    ready = gl.allocate_shared_memory(gl.int64, [{ring.slots}, 1], mbarrier.MBarrierLayout())",
              f"    empty = gl.allocate_shared_memory(gl.int64, [{ring.slots}, 1], mbarrier.MBarrierLayout())",
              f"    for s in gl.static_range({ring.slots}):",
              "        mbarrier.init(ready.index(s), count=1)",
              "        mbarrier.init(empty.index(s), count=1)",
              f"    xring = gl.allocate_shared_memory(gl.bfloat16, [{ring.x_slots}, {ring.x_rows}, {ring.cols}], "
              f"tile_smem({ring.x_rows}, {ring.cols}))",
              f"    gl.warp_specialize([(_compute, ({', '.join(COMPUTE_RINGS + compute_args)})),",
              f"                        (_loader, ({', '.join(LOADER_RINGS + loader_args)}))], [1], [{ring.loader_regs}])"]
    return PRELUDE + "\n".join(_loader_source(spec, loader_args) + _compute_source(spec, compute_args) + kernel) + "\n"
