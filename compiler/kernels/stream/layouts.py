"""Register and shared-memory layouts of the streaming executor, computed from shapes at compile time.

Gluon makes every layout explicit; these ``constexpr_function``s pick them from a tensor's shape
and the partition's warps, so an op's body names what it needs (a row-major tile, the tensor
cores' operands) rather than spelling out lanes and warps.
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl


@gluon.constexpr_function
def rows_layout(rows, cols, warps):
    """A [rows, cols] tile, cols contiguous in memory: 8 consecutive elements (16 bytes of bf16) a
    thread, a warp across the columns first, the warps down the rows."""
    vec = min(8, cols)
    lanes_c = min(32, cols // vec)
    return gl.BlockedLayout([1, vec], [32 // lanes_c, lanes_c], [warps, 1], [1, 0])


@gluon.constexpr_function
def cols_layout(rows, cols, warps, vec=8):
    """A [rows, cols] tile whose rows are contiguous in memory (a transposed view): ``vec``
    consecutive rows a thread, the warps across the columns."""
    vec = min(vec, rows)
    lanes_r = min(32, rows // vec)
    return gl.BlockedLayout([vec, 1], [lanes_r, 32 // lanes_r], [1, warps], [0, 1])


@gluon.constexpr_function
def halves_layout(rows, cols, warps):
    """A [2, rows, cols] tile whose two halves (dimension 0) sit in one thread's registers: a
    gated tile's gate and up rows side by side, columns across a warp's lanes first, the warps
    down the rows."""
    lanes_c = min(32, cols)
    return gl.BlockedLayout([2, 1, 1], [1, 32 // lanes_c, lanes_c], [1, warps, 1], [2, 1, 0])


@gluon.constexpr_function
def vector_layout(warps):
    """A 1-D vector: 4 consecutive elements a thread."""
    return gl.BlockedLayout([4], [32], [warps], [0])


@gluon.constexpr_function
def mma_rows(warps):
    """The tensor cores' accumulator (mma.m16n8k16) with the warps stacked down the rows: a GEMV
    tile of 16 weight rows a warp."""
    return gl.NVMMADistributedLayout(version=[2, 0], warps_per_cta=[warps, 1], instr_shape=[16, 8])


@gluon.constexpr_function
def mma_cols(warps):
    """The tensor cores' accumulator with the warps side by side across the columns: attention's
    scores (a warp a slice of the KV tile's tokens) and output (a slice of head_dim)."""
    return gl.NVMMADistributedLayout(version=[2, 0], warps_per_cta=[1, warps], instr_shape=[16, 8])


@gluon.constexpr_function
def mma_batched(warps):
    """The tensor cores' accumulator of a product batched over the warps ([warps, M, N], one batch
    a warp): attention's per-warp softmax states, which need no cross-warp reduction a tile."""
    return gl.NVMMADistributedLayout(version=[2, 0], warps_per_cta=[warps, 1, 1], instr_shape=[1, 16, 8])


@gluon.constexpr_function
def operand(index, parent, k_width=2):
    """Operand ``index`` (0: A, 1: B) of a 16-bit product accumulating in ``parent``: ``k_width``
    consecutive K elements a register group (2: one 32-bit register of bf16; 4: what an 8-bit
    operand loads in one 32-bit word, kept through its widening to f16; both operands alike)."""
    return gl.DotOperandLayout(operand_index=index, parent=parent, k_width=k_width)


@gluon.constexpr_function
def batched_smem(batch, rows, cols):
    """``tile_smem``'s layout of a [batch · rows, cols] tile, seen as [batch, rows, cols]."""
    return gl.NVMMASharedLayout(swizzle_byte_width=gl.NVMMASharedLayout.get_default_for(
        [batch * rows, cols], gl.bfloat16).swizzle_byte_width, element_bitwidth=16, rank=3)


@gluon.constexpr_function
def tile_smem(rows, cols):
    """Shared memory for a bf16 [rows, cols] tile that the tensor cores read (the weight ring's
    slots, the activation chunks): NVIDIA's swizzled layout, the widest swizzle the shape allows."""
    return gl.NVMMASharedLayout.get_default_for([rows, cols], gl.bfloat16)
