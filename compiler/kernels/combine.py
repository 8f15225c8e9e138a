"""The combine op: merge the attention splits' partials (acc, max, sum) of each (token row,
query head) into attn_out, which o's GEMV reads in the weight dtype."""

import triton
import triton.language as tl

from .common import head_cols, load_act, store_head_vector


@triton.jit
def _combine_task(task, part_acc_ptr, part_ml_ptr, attn_out_ptr,
                  NQ: tl.constexpr, D: tl.constexpr, DP: tl.constexpr, SPLITS: tl.constexpr, SP: tl.constexpr):
    """Task (token row, query head): merge the splits' (acc, max, sum) into the head's output
    (its D columns, DP a power of two: ``head_cols``)."""
    s = tl.arange(0, SP)
    d = tl.arange(0, DP)
    valid = s < SPLITS
    base = task * SPLITS + s
    m = tl.load(part_ml_ptr + base * 2, mask=valid, other=float("-inf"), cache_modifier=".cg")
    l_s = load_act(part_ml_ptr + base * 2 + 1, valid)
    acc = load_act(part_acc_ptr + base[:, None] * D + d[None, :], head_cols(valid[:, None], d[None, :], D, DP))
    m_max = tl.max(m, axis=0)
    weight = tl.exp(m - tl.where(m_max == float("-inf"), 0.0, m_max))
    num = tl.sum(weight[:, None] * acc, axis=0)
    den = tl.sum(weight * l_s, axis=0)
    out = num / tl.where(den > 0, den, 1.0)  # o's GEMV reads it in the weight dtype: stored so
    store_head_vector(attn_out_ptr + task * D, d, out.to(attn_out_ptr.dtype.element_ty), D, DP)


@triton.jit
def combine_op(pid, pre, part_acc_ptr, part_ml_ptr, attn_out_ptr, M: tl.constexpr, NQ: tl.constexpr, D: tl.constexpr,
               DP: tl.constexpr, SPLITS: tl.constexpr, SP: tl.constexpr, G: tl.constexpr):
    """The CTA's (token row, query head) tasks."""
    for task in range(pid, M * NQ, G):
        _combine_task(task, part_acc_ptr, part_ml_ptr, attn_out_ptr, NQ, D, DP, SPLITS, SP)
