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
by construction: unit i is in slot i mod slots, completing phase (i div slots) mod 2. A routed
layer's program also allocates the step's slot table (``slot_table``) and the mbarrier the compute
warps arrive on once they have routed (``routed_bar``), which the loader waits on before the experts'
units (``moe.py``): the one place where the stream depends on what the launch computes; and the
rows' routing weights (``routing_weights``), which experts_up's tasks read from shared memory.
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
                                               launch_dependents, load_experts_down, load_experts_up, load_kv,
                                               load_weights, norm_op, signal, step_target, stream_attention,
                                               stream_attention_prefetch, stream_experts_down, stream_experts_up,
                                               stream_gemv, tile_smem, wait)
"""


@dataclass(frozen=True)
class Streamed:
    """The functions of an op whose inputs the loader streams."""

    compute: str  # the compute warps' body: takes the rings (and the prefetch's result), returns the stream's place
    loader: str  # the loader's walk of the op's units
    prefetch: str | None = None  # what the compute warps load before the op's wait, if anything
    routed: bool = False  # both functions also take the step's slot table, its mbarrier and the weights (ROUTING)
    body_routes: bool = False  # its compute function routes the band's rows (and so binds E_P)

    @property
    def loader_head(self) -> tuple[str, ...]:
        return LOADER_HEAD + (ROUTING if self.routed else ())

    @property
    def compute_head(self) -> tuple[str, ...]:
        return COMPUTE_HEAD + (ROUTING if self.routed else ())


#: A ring unit's element type: the projections' dtype (attention's KV tiles reinterpret the bytes).
GL_DTYPES = {"bf16": "gl.bfloat16", "fp8e4nv": "gl.float8e4nv"}
#: Triton-executor body → the streaming executor's functions for it.
STREAMED = {"gemv_op": Streamed("stream_gemv", "load_weights"),
            "attention_op": Streamed("stream_attention", "load_kv", "stream_attention_prefetch"),
            "experts_up_op": Streamed("stream_experts_up", "load_experts_up", routed=True, body_routes=True),
            "experts_down_op": Streamed("stream_experts_down", "load_experts_down", routed=True)}
#: What each partition takes before the kernel's own arguments (the rings the kernel allocates).
LOADER_RINGS = ("pid", "ring", "ready", "empty")
COMPUTE_RINGS = (*LOADER_RINGS, "xring")
#: The leading parameters of a streamed op's functions, which the driver passes itself: the
#: partition's rings and ``i``, the CTA's place in its weight stream (returned advanced).
LOADER_HEAD = ("pid", "i", *LOADER_RINGS[1:])
COMPUTE_HEAD = ("pid", "i", *COMPUTE_RINGS[1:])
#: What a routed program's partitions and routed ops take besides: the slot table, its mbarrier,
#: the band's rows' routing weights ([experts, rows], fp32: each expert's column of the routing).
ROUTING = ("slot_table", "routed_bar", "routing_weights")


def _routing(spec: DriverSpec) -> tuple[int, int]:
    """The slot table's entries and the routing's experts (its ops' SLOTS_P and E_P), (0, 0)
    where no op is routed."""
    for op in spec.ops:
        if op.streamed is not None and STREAMED[_body_of(op)].body_routes:
            return dict(op.body_args)["SLOTS_P"], dict(op.body_args)["E_P"]
    return 0, 0


def _body_of(op) -> str:
    """The Triton executor's body an op call streams (its key in STREAMED)."""
    return next(k for k, v in STREAMED.items() if v.compute == op.body)


def _loader_source(spec: DriverSpec, rings: tuple[str, ...], loader_args: tuple[str, ...]) -> list[str]:
    lines = ["", "", "@gluon.jit", f"def _loader({', '.join(rings + loader_args)}):", "    i = 0"]
    for op in spec.ops:
        if op.streamed is not None:
            head = STREAMED[_body_of(op)].loader_head
            lines.append(f"    i = {_call(op.streamed[0], ', '.join(head), op.streamed[1])}")
    return lines


GLUON = Spelling("launch_dependents()", "grid_dependency_wait()", "clock_start(stage_clock, {slot}, {slots})",
                 "clock_end(stage_clock, {slot}, {slots})", "target = step_target(counters, {grid})")


def _body(op, pre: str) -> str:
    """A streamed op's body takes the rings (and its prefetch's result) and returns the CTA's
    advanced place in the stream."""
    if op.streamed is not None:
        head = ", ".join(STREAMED[_body_of(op)].compute_head + ((pre,) if op.prefetch else ()))
        return f"i = {_call(op.body, head, op.body_args)}"
    return _call(op.body, "pid, " + pre, op.body_args)


def _compute_source(spec: DriverSpec, rings: tuple[str, ...], compute_args: tuple[str, ...]) -> list[str]:
    lines = ["", "", "@gluon.jit", f"def _compute({', '.join(rings + compute_args)}):", "    i = 0",
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
              f"tile_smem({ring.x_rows}, {ring.cols}))"]
    slots, experts = _routing(spec)
    routing = ROUTING if slots else ()
    if slots:
        kernel += [f"    slot_table = gl.allocate_shared_memory(gl.int32, [{slots}], "
                   "gl.SwizzledSharedLayout(1, 1, 1, [0]))",
                   "    routed_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())",
                   "    mbarrier.init(routed_bar, count=1)",
                   f"    routing_weights = gl.allocate_shared_memory(gl.float32, [{experts}, {ring.x_rows}], "
                   "gl.SwizzledSharedLayout(1, 1, 1, [1, 0]))"]
    loader_rings, compute_rings = LOADER_RINGS + routing, COMPUTE_RINGS + routing
    kernel += [f"    gl.warp_specialize([(_compute, ({', '.join(compute_rings + compute_args)})),",
               f"                        (_loader, ({', '.join(loader_rings + loader_args)}))], [1], [{ring.loader_regs}])"]
    return PRELUDE + "\n".join(_loader_source(spec, loader_rings, loader_args)
                               + _compute_source(spec, compute_rings, compute_args) + kernel) + "\n"
