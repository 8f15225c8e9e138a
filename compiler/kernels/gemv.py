"""The GEMV op: out[:M, tile] = x̂ · W[tile]ᵀ (+ bias) (+ residual), or silu(g)·u (GATED).

One body serves qkv, o, gate/up, down and the LM head's logits; the planner's op spec says which
tensors and tiles. x̂ is RMSNorm(x) when NORM; x and the residual are stored as X_PARTS and
RES_PARTS split-K partials. When x needs a norm or a sum, each CTA first stages x̂ into its own
slice of ``x_hat_ptr`` ([G, M, K], weight dtype; K_P is K rounded up to a power of two) and the
GEMV streams that. A task is (output tile, K split): with SPLIT > 1 each task multiplies
K / SPLIT columns and writes partial ``split`` of out (shape [SPLIT, M, N]); split 0 adds the
bias and the residual. GATED tiles hold BN gate rows interleaved with BN up rows, so one product
gives both and a split of the accumulator separates them.

The weight's rows are those of the engine's own tensors, read where they are: SEGMENTS of them
stacked by rows (``w_ptr``, ``w2_ptr``, ``w3_ptr``: q, k and v, or gate and up, the second from
row SEG1 and the third from SEG2; ``common.segment_ptrs``), so binding copies nothing, whether
the engine holds HF's separate projections or vLLM's fused ones (views of one tensor). The
bias and the FP8 scales are addressed the same way. QUANT weights are FP8 E4M3 with one
fp32 scale per QBN × QBK block (``w_scale_ptr``), dequantized in the product
(``common.chunk_product``).

With W_STAGES > 1 a CTA's tasks are one software-pipelined loop over (task, K chunk), so
W_STAGES - 1 weight chunks stay in flight across task boundaries: a loop per task would drain
the pipeline and pay the memory latency again at every task (up and the LM head give a CTA
several tasks). The op's prefetch, ``gemv_prefetch``, runs before its wait: with W_STAGES == 1
it loads the CTA's first weight chunk, which is then in flight while the CTA waits, and each
task's loop keeps one chunk in flight in registers.
"""

import triton
import triton.language as tl

from .common import chunk_product, gemv, load_parts, load_w_chunk, segment_ptrs, segment_rows, stage_activation, x_chunk


@triton.jit
def _tile_rows(tile, j, BN: tl.constexpr, N: tl.constexpr, GATED: tl.constexpr, INTER: tl.constexpr):
    """Weight rows of an output tile; GATED interleaves gate row n with up row INTER + n."""
    if GATED:
        n = tile * BN + j // 2
        return n + (j % 2) * INTER, n < N
    else:
        n = tile * BN + j
        return n, n < N


@triton.jit
def _store_tile(acc, tile, split, out_ptr, bias_ptr, b2_ptr, b3_ptr, residual_ptr, RES_PARTS: tl.constexpr,
                N: tl.constexpr, M, ROWS_P: tl.constexpr, BN: tl.constexpr, HAS_BIAS: tl.constexpr,
                HAS_RESIDUAL: tl.constexpr, GATED: tl.constexpr, SEGMENTS: tl.constexpr, SEG1: tl.constexpr,
                SEG2: tl.constexpr):
    """A task's epilogue: out[split, :M, tile] = acc (+ bias, + residual on split 0), or silu(g)·u."""
    r = tl.arange(0, ROWS_P)
    n = tile * BN + tl.arange(0, BN)
    out_mask = (r[:, None] < M) & (n[None, :] < N)
    if GATED:
        gate, up = tl.split(tl.reshape(acc, [ROWS_P, BN, 2]))
        out = gate / (1.0 + tl.exp(-gate)) * up
    else:
        out = acc
    if HAS_BIAS:
        bias = segment_ptrs(bias_ptr, b2_ptr, b3_ptr, n, segment_rows(n, SEGMENTS, SEG1, SEG2), SEGMENTS, SEG1, SEG2)
        out += tl.load(bias, mask=(n < N) & (split == 0), other=0.0).to(tl.float32)[None, :]
    if HAS_RESIDUAL:
        out += load_parts(residual_ptr + r[:, None] * N + n[None, :], out_mask & (split == 0), RES_PARTS, M * N)
    tl.store(out_ptr + split * M * N + r[:, None] * N + n[None, :], out.to(out_ptr.dtype.element_ty), mask=out_mask)


@triton.jit
def gemv_prefetch(pid, w_ptr, w2_ptr, w3_ptr, N: tl.constexpr, K: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                  SPLIT: tl.constexpr, G: tl.constexpr, GATED: tl.constexpr, INTER: tl.constexpr,
                  W_STAGES: tl.constexpr, SEGMENTS: tl.constexpr, SEG1: tl.constexpr, SEG2: tl.constexpr):
    """What depends on no activation, before the wait: a tile's row offsets within it and, with
    the register double-buffer (W_STAGES == 1), the CTA's first weight chunk (0 otherwise)."""
    WROWS: tl.constexpr = 2 * BN if GATED else BN
    TILES: tl.constexpr = (N + BN - 1) // BN
    KS: tl.constexpr = K // SPLIT
    j = tl.arange(0, WROWS)
    w_first = 0
    if W_STAGES == 1:
        rows, row_mask = _tile_rows(pid % TILES, j, BN, N, GATED, INTER)
        w_first = load_w_chunk(w_ptr, w2_ptr, w3_ptr, rows, row_mask & (pid < TILES * SPLIT), (pid // TILES) * KS, K,
                               BK, SEGMENTS, SEG1, SEG2)
    return j, w_first


@triton.jit
def gemv_op(pid, pre, x_ptr, X_PARTS: tl.constexpr, norm_ptr, x_hat_ptr, w_ptr, w2_ptr, w3_ptr, w_scale_ptr,
            w2_scale_ptr, w3_scale_ptr, QUANT: tl.constexpr, QBN: tl.constexpr, QBK: tl.constexpr, out_ptr, bias_ptr,
            b2_ptr, b3_ptr, residual_ptr, RES_PARTS: tl.constexpr, N: tl.constexpr, K: tl.constexpr,
            K_P: tl.constexpr, M, ROWS_P: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
            SPLIT: tl.constexpr, G: tl.constexpr, EPS: tl.constexpr, NORM: tl.constexpr, HAS_BIAS: tl.constexpr,
            HAS_RESIDUAL: tl.constexpr, GATED: tl.constexpr, INTER: tl.constexpr, DOT_IEEE: tl.constexpr,
            W_STAGES: tl.constexpr, NORM_ROWS: tl.constexpr, SEGMENTS: tl.constexpr, SEG1: tl.constexpr,
            SEG2: tl.constexpr):
    """The CTA's tasks (see the module docstring); ``pre`` is ``gemv_prefetch``'s."""
    WROWS: tl.constexpr = 2 * BN if GATED else BN
    TILES: tl.constexpr = (N + BN - 1) // BN
    KS: tl.constexpr = K // SPLIT
    j, w_first = pre
    if NORM or X_PARTS > 1:
        x_cta = x_hat_ptr + pid * M * K
        stage_activation(x_ptr, X_PARTS, norm_ptr, x_cta, M, K, K_P, EPS, NORM, NORM_ROWS)
    else:
        x_cta = x_ptr
    if W_STAGES == 1:
        for task in range(pid, TILES * SPLIT, G):
            tile = task % TILES
            split = task // TILES
            rows, row_mask = _tile_rows(tile, j, BN, N, GATED, INTER)
            acc = gemv(x_cta, w_ptr, w2_ptr, w3_ptr, w_scale_ptr, w2_scale_ptr, w3_scale_ptr, rows, row_mask, w_first,
                       split * KS, M, K, KS, ROWS_P, BK, QUANT, QBN, QBK, SEGMENTS, SEG1, SEG2, DOT_IEEE)
            _store_tile(acc, tile, split, out_ptr, bias_ptr, b2_ptr, b3_ptr, residual_ptr, RES_PARTS, N, M, ROWS_P, BN,
                        HAS_BIAS, HAS_RESIDUAL, GATED, SEGMENTS, SEG1, SEG2)
            rows, row_mask = _tile_rows((task + G) % TILES, j, BN, N, GATED, INTER)
            w_first = load_w_chunk(w_ptr, w2_ptr, w3_ptr, rows, row_mask & (task + G < TILES * SPLIT),
                                   ((task + G) // TILES) * KS, K, BK, SEGMENTS, SEG1, SEG2)
    else:
        CHUNKS: tl.constexpr = (KS + BK - 1) // BK
        r = tl.arange(0, ROWS_P)
        acc = tl.zeros([ROWS_P, WROWS], tl.float32)
        for it in tl.range(0, tl.cdiv(TILES * SPLIT - pid, G) * CHUNKS, num_stages=W_STAGES):
            task = pid + (it // CHUNKS) * G
            chunk = it % CHUNKS
            tile = task % TILES
            split = task // TILES
            rows, row_mask = _tile_rows(tile, j, BN, N, GATED, INTER)
            k0 = split * KS + chunk * BK
            w = load_w_chunk(w_ptr, w2_ptr, w3_ptr, rows, row_mask, k0, K, BK, SEGMENTS, SEG1, SEG2)
            acc += chunk_product(x_chunk(x_cta, r, k0, M, K, BK), w, w_scale_ptr, w2_scale_ptr, w3_scale_ptr, rows,
                                 row_mask, k0, K, QUANT, QBN, QBK, SEGMENTS, SEG1, SEG2, DOT_IEEE)
            if chunk == CHUNKS - 1:
                _store_tile(acc, tile, split, out_ptr, bias_ptr, b2_ptr, b3_ptr, residual_ptr, RES_PARTS, N, M, ROWS_P,
                            BN, HAS_BIAS, HAS_RESIDUAL, GATED, SEGMENTS, SEG1, SEG2)
                acc = tl.zeros([ROWS_P, WROWS], tl.float32)
