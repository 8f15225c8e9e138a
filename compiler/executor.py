"""Which executor writes a program, and what the streaming executor adds to a plan.

Two executors run the same ops (``compiler/ops``) over the same regions and edges:

- **triton** — the Triton-language programs (``compiler/kernels``): every target, staged and
  persistent, and the only one Triton's CPU interpreter runs (the numerics tests);
- **gluon** — the streaming executor for sm_90 (``compiler/kernels/stream``): a persistent layer
  program whose loader warp streams every GEMV's weights through a shared-memory ring by TMA,
  ahead of the sync edges, while the compute warps run the ops.

A schedule entry turns the streaming executor on (``streaming: 1``). Where it is on, the layer's
GEMVs are tiled for its units (16 weight rows a compute warp, in both modes, so that the staged
programs and the head agree with it on the hidden state's split-K partials) and the RMSNorms are
ops of their own; the persistent layer program is the streaming one wherever its dtypes are the
ones it is written for (bf16), the Triton executor's otherwise.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from ..schema import Arg
from .ops.spec import Op

WARP_ROWS = 16  # a compute warp's rows of a streamed GEMV tile: the tensor cores' m16
X_DEPTH = 4  # activation chunks a GEMV keeps in flight, plus the one it multiplies
LOADER_REGS = 40  # registers a loader thread keeps; the compute warps get the rest
# Dynamic shared memory a streaming CTA may take on sm_90 (the opt-in maximum, 227 KB), less what
# its other buffers need: the tiles' layout conversions, attention's operand staging, barriers.
SHARED_MAX = 232448
SHARED_OTHER = 24 * 1024
STREAMED_BODIES = ("gemv_op",)  # the ops whose weights the loader streams, tile by tile
DTYPE = "bf16"  # the dtype of the weights, activations and KV cache the streaming programs are written for


@dataclass(frozen=True)
class Ring:
    """The shared-memory rings of a streaming program."""

    slots: int  # weight units in flight a CTA
    rows: int  # a unit's weight rows (a GEMV tile)
    cols: int  # a unit's columns (the K chunk)
    x_depth: int  # activation chunk slots (copies in flight + the one being multiplied)
    x_rows: int  # an activation chunk's rows: the band's, padded to the product's 8-column minimum
    loader_regs: int

    @property
    def unit_bytes(self) -> int:
        return self.rows * self.cols * 2

    @property
    def shared_bytes(self) -> int:
        """The rings' shared memory, the weight ring's barriers included."""
        return self.slots * self.unit_bytes + self.x_depth * self.x_rows * self.cols * 2 + self.slots * 16


def stream_rows(num_warps: int) -> int:
    """A streamed GEMV tile's output rows: 16 a compute warp."""
    return WARP_ROWS * num_warps


def ring(slots_wanted: int, num_warps: int, block_k: int, m: int) -> Ring:
    """The rings of a streaming program: as many weight slots as the table asks for (its
    ``stream_slots``; 0: no limit) and shared memory holds, at least two."""
    x_rows = max(8, 1 << (m - 1).bit_length())
    one = Ring(1, stream_rows(num_warps), block_k, X_DEPTH, x_rows, LOADER_REGS)
    fits = (SHARED_MAX - SHARED_OTHER - one.shared_bytes) // (one.unit_bytes + 16) + 1
    return replace(one, slots=max(2, min(slots_wanted or fits, fits)))


def _swizzle(cols: int, elem_bytes: int) -> int:
    """The widest swizzle a row of ``cols`` elements allows (Gluon's default for a TMA block)."""
    row = cols * elem_bytes
    return next((w for w in (128, 64, 32) if row >= w and row % w == 0), 0)


def tensordesc_type(dtype: str, rows: int, cols: int) -> str:
    """The signature type of a TMA descriptor argument for [rows, cols] blocks of a 2-D tensor."""
    layout = (f"NVMMASharedLayout(swizzle_byte_width={_swizzle(cols, 2) if rows >= 8 else 0}, element_bitwidth=16, "
              "rank=2, transposed=False, fp4_padded=False, cga_layout=[])")
    return f"tensordesc<{dtype}[{rows}, {cols}],{layout}>"


_TENSORDESC = re.compile(r"^tensordesc<(\w+)\[([\d, ]+)\]")


def tensordesc_block(type_: str) -> tuple[str, tuple[int, ...]] | None:
    """(dtype, block shape) of a descriptor argument's type, None for any other type."""
    m = _TENSORDESC.match(type_)
    if m is None:
        return None
    return m.group(1), tuple(int(x) for x in m.group(2).split(","))


def streamed(ops: tuple[Op, ...], unit: Ring) -> tuple[Op, ...]:
    """The ops with each streamed weight bound as a TMA descriptor of the ring's unit (the ABI
    then names it so: the runtime builds the descriptor over the bound tensor)."""
    out = []
    for op in ops:
        if op.body in STREAMED_BODIES:
            w = op.binding("w_ptr")
            desc = Arg(w.name, tensordesc_type(w.type.lstrip("*"), unit.rows, unit.cols), w.role)
            op = replace(op, bindings=tuple((k, desc if k == "w_ptr" else v) for k, v in op.bindings))
        out.append(op)
    return tuple(out)
