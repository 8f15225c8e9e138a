"""The norm op: x̂ = RMSNorm(x) as a stage of its own (the schedule's ``norm_stages``).

Without it every CTA of a GEMV after an RMSNorm stages all M rows itself (``stage_activation``):
each reads M × K × X_PARTS fp32 from L2, the whole grid M × K × X_PARTS × G. At 8 rows that is
17 MB (Llama-3.2-1B) to 67 MB (Qwen3-8B) a norm, and leaving the staging out altogether made
those steps 13–16% faster on the H200 (docs/PERFORMANCE.md). Here the rows are read once, for the
price of a sync edge.
"""

import triton
import triton.language as tl

from .common import norm_weights, normed_rows


@triton.jit
def norm_op(pid, pre, x_ptr, X_PARTS: tl.constexpr, norm_ptr, x_hat_ptr, M: tl.constexpr, K: tl.constexpr,
            K_P: tl.constexpr, EPS: tl.constexpr, G: tl.constexpr):
    """x̂ of the band's M rows (x stored as X_PARTS split-K partials), row m on CTA m mod G, into
    the one copy every CTA of the next op reads."""
    g = norm_weights(norm_ptr, K, K_P)
    for m in range(pid, M, G):
        normed_rows(x_ptr, X_PARTS, g, x_hat_ptr, m + tl.arange(0, 1), M, K, K_P, EPS, True)
