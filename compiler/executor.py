"""Which executor writes a program, and what the streaming executor adds to a plan.

Two executors run the same ops (``compiler/ops``) over the same regions and edges:

- **triton** — the Triton-language programs (``compiler/kernels``): every target, staged and
  persistent, and the only one Triton's CPU interpreter runs (the numerics tests);
- **gluon** — the streaming executor for sm_90 (``compiler/kernels/stream``): a persistent layer
  program whose loader warp streams every GEMV's weights and attention's cached K and V (below
  the step's append positions: written by earlier steps, read-only for the launch) through a
  shared-memory ring by TMA, ahead of the sync edges, while the compute warps run the ops; in a
  routed layer, the chosen experts' weights too, once the compute warps have routed the band.

A schedule entry turns the streaming executor on (``streaming: 1``). Where it is on, the
layer's GEMVs are tiled for its units (16 weight rows a compute warp, in both modes, so that the
staged programs and the head agree with it on the hidden state's split-K partials); the
RMSNorms are ops of their own or staged by each CTA of their GEMV as the entry's
``norm_stages`` says, as for the Triton executor. The persistent layer program is the
streaming one wherever its dtypes are the ones it is written for (bf16 activations, norms and
KV cache; bf16 or block-scaled FP8 projections), the Triton executor's otherwise. An FP8
projection's ring units are [rows, cols] of E4M3, cols a whole number of its scale blocks.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from ..schema import DTYPE_BYTES, Arg
from .ops.spec import Op

WARP_ROWS = 16  # a compute warp's rows of a streamed GEMV tile: the tensor cores' m16
X_DEPTH = 4  # activation chunks a GEMV keeps in flight, plus the one it multiplies
LOADER_REGS = 32  # registers a loader thread keeps; the compute warps get the rest
# The loader's one warp is a warpgroup's worth of threads in the CTA: register reallocation
# (setmaxnreg) works on whole warpgroups.
LOADER_GROUP_WARPS = 4
SM_REGISTERS = 65536
# Shared memory a streaming CTA may take on sm_90 (the opt-in maximum, 227 KB), less what its
# other buffers need (``shared_other``).
SHARED_MAX = 232448
SHARED_SCRATCH = 4 * 1024  # the layout conversions' scratch besides attention's merge (1.4 KB seen)
GEMV_BODY, ATTENTION_BODY = "gemv_op", "attention_op"  # the ops whose inputs the loader streams
EXPERTS_UP_BODY, EXPERTS_DOWN_BODY = "experts_up_op", "experts_down_op"  # and a routed layer's, once routed
DTYPE = "bf16"  # the dtype of the activations, norms and KV cache the streaming programs are written for
PROJECTIONS = ("bf16", "fp8e4nv")  # the projection weights' dtypes they stream
#: The widest head the streaming attention serves (its KV tiles share the weight ring and its warps'
#: softmax states a fixed scratch, both sized for heads of at most 128 columns, a power of two); a wider
#: head, or one of another size, runs on the Triton executor, which pads it.
HEAD_DIM = 128


@dataclass(frozen=True)
class Ring:
    """The shared-memory rings of a streaming program."""

    slots: int  # units in flight a CTA (a GEMV's weight chunks, attention's KV tiles)
    rows: int  # a unit's weight rows (a GEMV tile)
    cols: int  # a unit's columns (the K chunk), in weight elements
    x_depth: int  # activation chunk slots (copies in flight + the one being multiplied)
    x_rows: int  # an activation chunk's rows: the band's, padded to the product's 8-column minimum
    loader_regs: int
    weight: str = DTYPE  # the projections' dtype: a unit's elements

    @property
    def unit_bytes(self) -> int:
        return self.rows * self.cols * DTYPE_BYTES[self.weight]

    @property
    def x_slots(self) -> int:
        """The activation ring's slots: its chunks, and for E4M3 units one more, the chunk being
        multiplied as the f16 the FP8 product takes (E4M3 widens to f16 in one instruction a pair;
        to bf16 it takes five)."""
        return self.x_depth + (self.weight == "fp8e4nv")

    @property
    def shared_bytes(self) -> int:
        """The rings' shared memory, the weight ring's barriers included (activation chunks are
        16-bit)."""
        return self.slots * self.unit_bytes + self.x_slots * self.x_rows * self.cols * 2 + self.slots * 16


def stream_rows(num_warps: int) -> int:
    """A streamed GEMV tile's output rows: 16 a compute warp."""
    return WARP_ROWS * num_warps


def shared_other(num_warps: int, query_rows: int, head_dim: int, routing_slots: int = 0, experts: int = 0,
                 m: int = 0) -> int:
    """Shared memory a streaming CTA needs besides its rings: the scratch of attention's merge of
    its warps' softmax states (one fp32 [query rows, head_dim] a warp: 16 KB of the 17.4 KB that
    Llama-3.2-1B's 1-row program takes, compiled) and of the other layout conversions; a routed
    layer's slot table (i32), its mbarrier and its rows' routing weights (fp32 [experts, the
    band's m rows padded as an activation chunk's])."""
    routing = 4 * routing_slots + 8 + 4 * experts * activation_rows(m) if routing_slots else 0
    return num_warps * query_rows * head_dim * 4 + SHARED_SCRATCH + routing


def activation_rows(m: int) -> int:
    """An activation chunk's rows for a band of ``m`` token rows: padded to a power of two, at
    least the product's 8 columns."""
    return max(8, 1 << (m - 1).bit_length())


def ring(slots_wanted: int, num_warps: int, block_k: int, m: int, other: int, weight: str = DTYPE) -> Ring:
    """The rings of a streaming program whose CTA needs ``other`` bytes of shared memory besides
    them: as many weight slots as the table asks for (its ``stream_slots``; 0: no limit) and
    shared memory holds, at least two; units of ``block_k`` columns of ``weight``."""
    x_rows = activation_rows(m)
    one = Ring(1, stream_rows(num_warps), block_k, X_DEPTH, x_rows, LOADER_REGS, weight)
    budget = SHARED_MAX - other
    fits = (budget - one.shared_bytes) // (one.unit_bytes + 16) + 1
    return replace(one, slots=max(2, min(slots_wanted or fits, fits)))


def threads(num_warps: int) -> int:
    """A streaming CTA's threads: the compute warps and the loader's warpgroup."""
    return 32 * (num_warps + LOADER_GROUP_WARPS)


def register_cap(num_warps: int) -> int | None:
    """A thread's registers at launch (a multiple of 8) where the CTA has more threads than the
    register file gives 255 registers each (8 compute warps and the loader's warpgroup: 168);
    warp specialization then moves the loader's unused ones to the compute warps. Otherwise the
    compiler's choice (None)."""
    cap = SM_REGISTERS // threads(num_warps) // 8 * 8
    return None if cap >= 255 else cap


def _swizzle(cols: int, elem_bytes: int) -> int:
    """The widest swizzle a row of ``cols`` elements allows (Gluon's default for a TMA block)."""
    row = cols * elem_bytes
    return next((w for w in (128, 64, 32) if row >= w and row % w == 0), 0)


def tensordesc_type(dtype: str, rows: int, cols: int) -> str:
    """The signature type of a TMA descriptor argument for [rows, cols] blocks of a 2-D tensor."""
    nbytes = DTYPE_BYTES[dtype]
    layout = (f"NVMMASharedLayout(swizzle_byte_width={_swizzle(cols, nbytes) if rows >= 8 else 0}, "
              f"element_bitwidth={8 * nbytes}, rank=2, transposed=False, fp4_padded=False, cga_layout=[])")
    return f"tensordesc<{dtype}[{rows}, {cols}],{layout}>"


_TENSORDESC = re.compile(r"^tensordesc<(\w+)\[([\d, ]+)\]")


def tensordesc_block(type_: str) -> tuple[str, tuple[int, ...]] | None:
    """(dtype, block shape) of a descriptor argument's type, None for any other type."""
    m = _TENSORDESC.match(type_)
    if m is None:
        return None
    return m.group(1), tuple(int(x) for x in m.group(2).split(","))


def kv_tile_tokens(unit: Ring, head_dim: int, block_size: int) -> int:
    """Tokens of a streamed KV tile: as many whole pages as a ring unit holds of their K and V
    rows (0: not one page)."""
    return unit.unit_bytes // (2 * 2 * head_dim) // block_size * block_size


def gated_halves(n: int, rows: int, grid: int) -> bool:
    """Whether a gated GEMV of ``n`` output rows streams units of half gate, half up rows (tiles of
    rows / 2) instead of a gate and an up unit a chunk (tiles of ``rows``): where that lowers the
    most output rows a CTA of the ``grid`` streams, which the op's slowest CTA, and so the next
    op's wait, follows. Measured on the H200 (docs/PERFORMANCE.md, 2026-12-04): Qwen3-8B's 192
    tiles on 132 CTAs (128 rows at most) as 384 halves (96) took its FP8 step 3.09 → 2.97 ms;
    Llama-3.2-1B's 128 tiles (64 rows either way) measured 1% slower at 8 rows as halves."""
    def most(tile: int) -> int:
        tiles = -(-n // tile)
        return -(-tiles // grid) * tile
    return most(rows // 2) < most(rows)


def unit_cols(unit: Ring, dtype: str) -> int:
    """A GEMV's K chunk for a weight of ``dtype``: the ring unit's columns, or as many as its bytes
    hold (a bf16 router's chunks in an FP8 checkpoint's E4M3 units: half as many columns)."""
    return unit.cols * DTYPE_BYTES[unit.weight] // DTYPE_BYTES[dtype]


#: A GEMV's parameters for the tensors its weight is held as (``ops/dense.Projection``).
WEIGHT_SLOTS = ("w_ptr", "w2_ptr", "w3_ptr")


def streamed(ops: tuple[Op, ...], unit: Ring) -> tuple[Op, ...]:
    """The ops with what the loader streams bound as TMA descriptors (the ABI then names them so:
    the runtime builds each descriptor over the bound tensor): each GEMV's weight in units of the
    ring's [rows, cols], its K chunk the unit's columns; attention's K and V caches in pages of
    one KV head ([block_size, head_dim] boxes of the caches seen as [blocks · block_size,
    kv_heads · head_dim]), its tiles as many tokens as a unit holds. A gated GEMV whose units are
    halves (``gated_halves``) has boxes and tiles of half a unit's rows."""
    out = []
    for op in ops:
        if op.body == GEMV_BODY:
            tensors = {k: op.binding(k) for k in WEIGHT_SLOTS if op.binding(k) is not None}
            gated = op.binding("GATED")
            halves = gated and gated_halves(op.binding("N"), unit.rows, op.binding("G"))
            bounds = (op.binding("SEG1"), op.binding("SEG2")) if len(tensors) > 1 and not gated else ()
            if any(b % unit.rows for b in bounds):
                raise ValueError(f"op {op.name}: its tensors start at rows {bounds}, not at multiples of its "
                                 f"{unit.rows}-row units, so a unit would span two of them")
            box_rows = unit.rows // 2 if halves else unit.rows
            dtype = op.binding("w_ptr").type.lstrip("*")
            cols = unit_cols(unit, dtype)
            swap = {k: Arg(w.name, tensordesc_type(dtype, box_rows, cols), w.role) for k, w in tensors.items()}
            swap["BK"] = cols
            op = replace(op, bindings=tuple((k, swap.get(k, v)) for k, v in op.bindings) + (("HALVES", halves),))
            if halves:
                n, split = op.binding("N"), op.binding("SPLIT")
                tasks = -(-n // box_rows) * split
                op = replace(op, tasks=tasks, task=op.task.replace(f"tiles of {op.binding('BN')}", f"tiles of {box_rows}"))
        elif op.body in (EXPERTS_UP_BODY, EXPERTS_DOWN_BODY):
            op = _streamed_experts(op, unit)
        elif op.body == ATTENTION_BODY:
            d, bs = op.binding("D"), op.binding("BS")
            tiles = tuple((f"{c[0]}_tiles", Arg(f"{c[0]}_tiles", tensordesc_type(op.binding(c).type.lstrip("*"), bs, d),
                                                 "kv_cache")) for c in ("k_cache_ptr", "v_cache_ptr"))
            kt = kv_tile_tokens(unit, d, bs)
            op = replace(op, bindings=tuple((k, kt if k == "KT" else v) for k, v in op.bindings) + tiles)
        out.append(op)
    return tuple(out)


def _streamed_experts(op: Op, unit: Ring) -> Op:
    """A routed op with its expert stack bound as a TMA descriptor over the stack's rows (the
    runtime sees [experts, rows, cols] as [experts · rows, cols]): experts_up's in boxes of half a
    unit's rows (a unit is an expert's gate rows above the same up rows), experts_down's in
    boxes of a unit; the K chunk is the unit's columns."""
    w = op.binding("w_ptr")
    up = op.body == EXPERTS_UP_BODY
    box_rows = unit.rows // 2 if up else unit.rows
    swap = {"w_ptr": Arg(w.name, tensordesc_type(w.type.lstrip("*"), box_rows, unit.cols), w.role), "BK": unit.cols}
    op = replace(op, bindings=tuple((k, swap.get(k, v)) for k, v in op.bindings))
    if up:  # (slot, tile) tasks of half a unit's rows
        tiles = -(-op.binding("INTER") // box_rows)
        op = replace(op, tasks=op.binding("SLOTS") * tiles,
                     task=op.task.replace(f"tile of {op.binding('BN')} ", f"tile of {box_rows} "))
    return op
