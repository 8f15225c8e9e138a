"""Device helpers the ops share: activation loads, products, the staged RMSNorm, the tiled GEMV.

Everything here is ``@triton.jit`` math and loads; the sync edges and clocks are the driver's
(``sync.py``, called by the program ``driver.py`` writes from the op list).
"""

import triton
import triton.language as tl


@triton.jit
def load_act(ptrs, mask):
    """Load an activation written by another CTA: ``.cg`` keeps it out of the non-coherent L1."""
    return tl.load(ptrs, mask=mask, other=0.0, cache_modifier=".cg").to(tl.float32)


@triton.jit
def load_parts(ptrs, mask, PARTS: tl.constexpr, PART_STRIDE):
    """An fp32 activation stored as PARTS split-K partial sums PART_STRIDE elements apart: their sum.

    A stage split over K writes one partial per split instead of reducing across CTAs; every
    reader adds them up in a fixed order, so the result is deterministic and no extra sync edge
    or atomic is needed.
    """
    x = load_act(ptrs, mask)
    for p in tl.static_range(1, PARTS):
        x += load_act(ptrs + p * PART_STRIDE, mask)
    return x


@triton.jit
def head_cols(mask, d, D: tl.constexpr, DP: tl.constexpr):
    """``mask`` limited to a head's D columns, where the columns ``d`` run to DP, the power of two
    that pads a head_dim of another size; unchanged where DP is D, so a power-of-two head keeps
    the loads and stores it had (unmasked along d, vectorised)."""
    if DP > D:
        return mask & (d < D)
    else:
        return mask


@triton.jit
def load_head_vector(ptr, d, D: tl.constexpr, DP: tl.constexpr):
    """A head's D-element vector (a q/k norm's weights) at the columns ``d`` (``head_cols``), zeros past D."""
    if DP > D:
        return tl.load(ptr + d, mask=d < D, other=0.0)
    else:
        return tl.load(ptr + d)


@triton.jit
def store_head_vector(ptr, d, value, D: tl.constexpr, DP: tl.constexpr):
    """Store a head's D-element vector from ``value`` at the columns ``d`` (``head_cols``)."""
    if DP > D:
        tl.store(ptr + d, value, mask=d < D)
    else:
        tl.store(ptr + d, value)


@triton.jit
def segment_rows(rows, SEGMENTS: tl.constexpr, SEG1: tl.constexpr, SEG2: tl.constexpr):
    """Each row of a weight held as SEGMENTS tensors stacked by rows (q, k, v; gate, up), the
    second starting at row SEG1 and the third at SEG2: its row within its own tensor."""
    if SEGMENTS == 1:
        return rows
    elif SEGMENTS == 2:
        return tl.where(rows < SEG1, rows, rows - SEG1)
    else:
        return tl.where(rows < SEG1, rows, tl.where(rows < SEG2, rows - SEG1, rows - SEG2))


@triton.jit
def segment_ptrs(p1, p2, p3, rows, offsets, SEGMENTS: tl.constexpr, SEG1: tl.constexpr, SEG2: tl.constexpr):
    """``offsets`` into each row's own tensor (``p1``, ``p2`` or ``p3``, as ``segment_rows``):
    the engine's tensors are read where they are, never stacked into a copy."""
    if SEGMENTS == 1:
        return p1 + offsets
    elif SEGMENTS == 2:
        return tl.where(rows < SEG1, p1 + offsets, p2 + offsets)
    else:
        return tl.where(rows < SEG1, p1 + offsets, tl.where(rows < SEG2, p2 + offsets, p3 + offsets))


@triton.jit
def load_w_chunk(w_ptr, w2_ptr, w3_ptr, rows, row_mask, k0, K: tl.constexpr, BK: tl.constexpr,
                 SEGMENTS: tl.constexpr, SEG1: tl.constexpr, SEG2: tl.constexpr):
    """One [len(rows), BK] chunk of a row-major weight of K columns, starting at column k0; the
    weight's rows are those of up to three tensors (``segment_ptrs``)."""
    k = k0 + tl.arange(0, BK)
    local = segment_rows(rows, SEGMENTS, SEG1, SEG2)
    ptrs = segment_ptrs(w_ptr, w2_ptr, w3_ptr, rows[:, None], local[:, None] * K + k[None, :], SEGMENTS, SEG1, SEG2)
    return tl.load(ptrs, mask=row_mask[:, None] & (k[None, :] < K), other=0.0)


@triton.jit
def trans_last(x):
    """x with its last two dimensions swapped: a matrix transposed, or each of a batch of them."""
    if len(x.shape) == 3:
        return tl.trans(x, (0, 2, 1))
    else:
        return tl.trans(x)


@triton.jit
def mm(a, b_t, DOT_IEEE: tl.constexpr):
    """a @ b_t.T with fp32 accumulation (for [B, M, K] and [B, N, K], a product per batch entry);
    fp32 operands use IEEE products (no tf32 rounding)."""
    if DOT_IEEE:
        return tl.dot(a, trans_last(b_t), input_precision="ieee")
    else:
        return tl.dot(a, trans_last(b_t))


@triton.jit
def chunk_product(x, w, scale_ptr, scale2_ptr, scale3_ptr, rows, row_mask, k0, K: tl.constexpr, QUANT: tl.constexpr,
                  QBN: tl.constexpr, QBK: tl.constexpr, SEGMENTS: tl.constexpr, SEG1: tl.constexpr,
                  SEG2: tl.constexpr, DOT_IEEE: tl.constexpr):
    """x @ wᵀ for one weight chunk of rows ``rows`` from column k0, in fp32.

    A block-scaled FP8 chunk (QUANT; the chunk lies inside one QBK-column block, the planner's
    BK ≤ QBK) is widened to bf16, which holds every E4M3 value exactly, and the product of each
    row is scaled by that row's block scale (each tensor's ``weight_scale_inv``, [⌈rows/QBN⌉,
    ⌈K/QBK⌉] fp32, beside it as ``segment_ptrs`` says), so the dequantization costs one multiply
    per output, not per weight. Otherwise x is cast to the weight dtype, as the product takes it.
    """
    if QUANT:
        SCALE_COLS: tl.constexpr = (K + QBK - 1) // QBK
        at = (segment_rows(rows, SEGMENTS, SEG1, SEG2) // QBN) * SCALE_COLS + k0 // QBK
        s = tl.load(segment_ptrs(scale_ptr, scale2_ptr, scale3_ptr, rows, at, SEGMENTS, SEG1, SEG2), mask=row_mask,
                    other=0.0)
        return mm(x.to(tl.bfloat16), w.to(tl.bfloat16), DOT_IEEE) * s[None, :]
    else:
        return mm(x.to(w.dtype), w, DOT_IEEE)


@triton.jit
def stage_activation(x_ptr, X_PARTS: tl.constexpr, norm_ptr, x_hat_ptr, M: tl.constexpr, K: tl.constexpr,
                     K_P: tl.constexpr, EPS: tl.constexpr, NORM: tl.constexpr, NORM_ROWS: tl.constexpr):
    """This CTA's private copy of the GEMV input: x̂ = RMSNorm(x) (when NORM), in the weight dtype.

    x is an fp32 [M, K] activation of X_PARTS split-K partials. Rows are staged NORM_ROWS at a
    time, each block one whole-row load (K_P = K rounded up to a power of two), so their L2 round
    trips overlap; a loop over K chunks would pay one round trip per chunk. A block's loads
    cannot start before the previous block's stores (the compiler cannot prove x and x̂ apart),
    and its norm is a CTA-wide reduction: one row per block, M rows cost M serial round trips
    and M reductions; NORM_ROWS rows per block, M / NORM_ROWS of each, in NORM_ROWS times the
    registers. The GEMV loop then streams x̂ chunks that need no partial sums and no norm
    arithmetic, in half the bytes of fp32 (the product casts to the weight dtype anyway), and the
    software pipeliner stages fewer bytes. The CTA barrier orders the stores before the CTA's own
    loads of x̂.
    """
    g = norm_weights(norm_ptr, K, K_P) if NORM else 0.0
    for m0 in tl.static_range(0, M, NORM_ROWS):
        normed_rows(x_ptr, X_PARTS, g, x_hat_ptr, m0 + tl.arange(0, NORM_ROWS), M, K, K_P, EPS, NORM)
    tl.debug_barrier()


@triton.jit
def norm_weights(norm_ptr, K: tl.constexpr, K_P: tl.constexpr):
    """An RMSNorm's K weights in fp32, padded with zeros to K_P."""
    k = tl.arange(0, K_P)
    return tl.load(norm_ptr + k, mask=k < K, other=0.0).to(tl.float32)


@triton.jit
def normed_rows(x_ptr, X_PARTS: tl.constexpr, g, x_hat_ptr, rows, M, K: tl.constexpr,
                K_P: tl.constexpr, EPS: tl.constexpr, NORM: tl.constexpr):
    """Rows ``rows`` of an fp32 [M, K] activation of X_PARTS split-K partials, summed, RMS-normed
    with the weights g (``norm_weights``; when NORM) and stored into the same rows of x̂ in its
    dtype: one whole-row load a row (K_P = K rounded up to a power of two), one reduction, one
    store."""
    k = tl.arange(0, K_P)
    mask = (rows[:, None] < M) & (k[None, :] < K)
    x = load_parts(x_ptr + rows[:, None] * K + k[None, :], mask, X_PARTS, M * K)
    if NORM:
        x = x * (1.0 / tl.sqrt(tl.sum(x * x, axis=1) / K + EPS))[:, None] * g[None, :]
    tl.store(x_hat_ptr + rows[:, None] * K + k[None, :], x.to(x_hat_ptr.dtype.element_ty), mask=mask)


@triton.jit
def gemv(x_ptr, w_ptr, w2_ptr, w3_ptr, w_scale_ptr, w2_scale_ptr, w3_scale_ptr, rows, row_mask, w_first, k_lo,
         M, K: tl.constexpr, KS: tl.constexpr, ROWS_P: tl.constexpr, BK: tl.constexpr,
         QUANT: tl.constexpr, QBN: tl.constexpr, QBK: tl.constexpr, SEGMENTS: tl.constexpr, SEG1: tl.constexpr,
         SEG2: tl.constexpr, DOT_IEEE: tl.constexpr):
    """acc[ROWS_P, len(rows)] = x[:M, k_lo:k_lo+KS] @ W[rows, k_lo:k_lo+KS]ᵀ in fp32, one weight
    chunk in flight in registers.

    x is an [M, K] activation (fp32, or a staged x̂ in the activation dtype), multiplied by
    ``chunk_product`` (which dequantizes a block-scaled FP8 weight). ``w_first`` is the first
    weight chunk, loaded by the caller (before a sync wait, where there is one); each iteration
    loads the next chunk before it multiplies the current one.
    """
    r = tl.arange(0, ROWS_P)
    acc = tl.zeros([ROWS_P, rows.shape[0]], tl.float32)
    w = w_first
    for k0 in range(k_lo, k_lo + KS, BK):
        w_next = load_w_chunk(w_ptr, w2_ptr, w3_ptr, rows, row_mask & (k0 + BK < k_lo + KS), k0 + BK, K, BK, SEGMENTS,
                              SEG1, SEG2)
        acc += chunk_product(x_chunk(x_ptr, r, k0, M, K, BK), w, w_scale_ptr, w2_scale_ptr, w3_scale_ptr, rows,
                             row_mask, k0, K, QUANT, QBN, QBK, SEGMENTS, SEG1, SEG2, DOT_IEEE)
        w = w_next
    return acc


@triton.jit
def x_chunk(x_ptr, r, k0, M, K: tl.constexpr, BK: tl.constexpr):
    """Columns [k0, k0 + BK) of the activation's M rows (padding rows read as 0)."""
    k = k0 + tl.arange(0, BK)
    return tl.load(x_ptr + r[:, None] * K + k[None, :], mask=(r[:, None] < M) & (k[None, :] < K), other=0.0,
                   cache_modifier=".cg")
