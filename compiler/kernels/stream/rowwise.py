"""The streaming executor's row-wise ops: the RMSNorm op and the attention splits' combine.

The same math and regions as the Triton executor's ``kernels/norm.py`` and ``kernels/combine.py``,
in Gluon: activations other CTAs wrote are read through L2 only (``.cg``), after the op's wait.
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from .layouts import rows_layout, vector_layout


@gluon.jit
def normed_row(x_ptr, X_PARTS: gl.constexpr, g, x_hat_ptr, m, M: gl.constexpr, K: gl.constexpr, K_P: gl.constexpr,
               EPS: gl.constexpr, NORM: gl.constexpr):
    """Row m of x̂ = RMSNorm(x) · g (x stored as X_PARTS split-K partials; without NORM their sum),
    in x̂'s dtype."""
    layout: gl.constexpr = vector_layout(gl.num_warps())
    k = gl.arange(0, K_P, layout=layout)
    valid = k < K
    x = gl.zeros([K_P], gl.float32, layout)
    for p in gl.static_range(X_PARTS):
        x += gl.load(x_ptr + (p * M + m) * K + k, mask=valid, other=0.0, cache_modifier=".cg")
    if NORM:
        x = x * (1.0 / gl.sqrt(gl.sum(x * x, axis=0) / K + EPS)) * g
    gl.store(x_hat_ptr + m * K + k, x.to(x_hat_ptr.dtype.element_ty), mask=valid)


@gluon.jit
def norm_weights(norm_ptr, K: gl.constexpr, K_P: gl.constexpr):
    """An RMSNorm's K weights in fp32, padded with zeros to K_P."""
    k = gl.arange(0, K_P, layout=vector_layout(gl.num_warps()))
    return gl.load(norm_ptr + k, mask=k < K, other=0.0).to(gl.float32)


@gluon.jit
def norm_op(pid, pre, x_ptr, X_PARTS: gl.constexpr, norm_ptr, x_hat_ptr, M: gl.constexpr, K: gl.constexpr,
            K_P: gl.constexpr, EPS: gl.constexpr, G: gl.constexpr):
    """x̂ = RMSNorm(x) of the band's M rows (x stored as X_PARTS split-K partials), row m on CTA
    m mod G, into the one copy every CTA of the next op reads."""
    g = norm_weights(norm_ptr, K, K_P)
    for m in range(pid, M, G):
        normed_row(x_ptr, X_PARTS, g, x_hat_ptr, m, M, K, K_P, EPS, True)


@gluon.jit
def combine_op(pid, pre, part_acc_ptr, part_ml_ptr, attn_out_ptr, M: gl.constexpr, NQ: gl.constexpr,
               D: gl.constexpr, SPLITS: gl.constexpr, SP: gl.constexpr, G: gl.constexpr):
    """Task (token row, query head), on CTA task mod G: merge the splits' (acc, max, sum)."""
    layout: gl.constexpr = rows_layout(SP, D, gl.num_warps())
    s = gl.arange(0, SP, layout=gl.SliceLayout(1, layout))
    d = gl.arange(0, D, layout=gl.SliceLayout(0, layout))
    valid = s < SPLITS
    for task in range(pid, M * NQ, G):
        base = task * SPLITS + s
        m = gl.load(part_ml_ptr + base * 2, mask=valid, other=float("-inf"), cache_modifier=".cg")
        l_s = gl.load(part_ml_ptr + base * 2 + 1, mask=valid, other=0.0, cache_modifier=".cg")
        acc = gl.load(part_acc_ptr + base[:, None] * D + d[None, :], mask=valid[:, None], other=0.0,
                      cache_modifier=".cg")
        m_max = gl.max(m, axis=0)
        weight = gl.exp(m - gl.where(m_max == float("-inf"), 0.0, m_max))
        num = gl.sum(weight[:, None] * acc, axis=0)
        den = gl.sum(weight * l_s, axis=0)
        out = num / gl.where(den > 0, den, 1.0)
        gl.store(attn_out_ptr + task * D + d, out.to(attn_out_ptr.dtype.element_ty))
