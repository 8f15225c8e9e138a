"""The streaming executor's attention op: split-KV decode attention over the paged KV cache, with
the layer's q/k norm, RoPE and KV append; task (row, KV head, split) → partials (acc, max, sum).

The math, tasks and regions are the Triton executor's (``kernels/attention.py``); the products
are the tensor cores' (mma, the warps side by side across a tile's tokens and head_dim), and a
split walks its cached pages KT tokens a tile, the next tile's K and V loaded before the current
one is multiplied. What a task reads that qkv does not write — its row's context length, the
positions, its split's first KV tile — is its prefetch, loaded before the op's wait.
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import mma_v2

from .layouts import cols_layout, mma_cols, operand, rows_layout


@gluon.jit
def _parts(ptrs, mask, PARTS: gl.constexpr, STRIDE: gl.constexpr):
    """An fp32 activation stored as PARTS split-K partials STRIDE elements apart: their sum."""
    x = gl.load(ptrs, mask=mask, other=0.0, cache_modifier=".cg")
    for p in gl.static_range(1, PARTS):
        x += gl.load(ptrs + p * STRIDE, mask=mask, other=0.0, cache_modifier=".cg")
    return x


@gluon.jit
def _rope_rows(raw_ptr, PARTS: gl.constexpr, STRIDE: gl.constexpr, row_off, col0, pos, rope_ptr, norm_ptr, valid,
               D: gl.constexpr, QK_NORM: gl.constexpr, EPS: gl.constexpr, layout: gl.constexpr):
    """Rows of q or k heads from the raw qkv partials, q/k-normed (Qwen3) and rotated (RoPE):
    ``row_off[i]`` is row i's token offset in qkv, ``col0[i]`` its head's first column, ``pos[i]``
    its position; rotate_half's partner columns (d ± D/2) are loaded directly."""
    HALF: gl.constexpr = D // 2
    d = gl.arange(0, D, layout=gl.SliceLayout(0, layout))
    partner = (d + HALF) % D
    base = raw_ptr + row_off[:, None] + col0[:, None]
    x = _parts(base + d[None, :], valid[:, None], PARTS, STRIDE)
    xp = _parts(base + partner[None, :], valid[:, None], PARTS, STRIDE)
    if QK_NORM:
        rstd = 1.0 / gl.sqrt(gl.sum(x * x, axis=1) / D + EPS)
        x = x * rstd[:, None] * gl.load(norm_ptr + d).to(gl.float32)[None, :]
        xp = xp * rstd[:, None] * gl.load(norm_ptr + partner).to(gl.float32)[None, :]
    freq = d % HALF
    cos = gl.load(rope_ptr + pos[:, None] * D + freq[None, :], mask=valid[:, None], other=1.0)
    sin = gl.load(rope_ptr + pos[:, None] * D + HALF + freq[None, :], mask=valid[:, None], other=0.0)
    sign = gl.where(d < HALF, -1.0, 1.0)
    return x * cos + sign[None, :] * xp * sin


@gluon.jit
def _in_context(p0, t, end, cached, BS: gl.constexpr):
    """Which of a tile's token offsets t (pages from p0) are cached tokens of the split."""
    page = p0 + t // BS
    return (page < end) & (page * BS + t % BS < cached)


@gluon.jit
def _kv_tile(k_cache_ptr, v_cache_ptr, table_ptr, p0, end, cached, h, NKV: gl.constexpr, D: gl.constexpr,
             BS: gl.constexpr, KT: gl.constexpr, kt_layout: gl.constexpr, v_layout: gl.constexpr):
    """Kᵀ [D, KT] and V [KT, D] of the KT cached tokens from page p0 of one row's block table, KV
    head h; tokens outside the split's context are not loaded (a stale slot may hold NaN)."""
    t = gl.arange(0, KT, layout=gl.SliceLayout(0, kt_layout))
    page = p0 + t // BS
    block = gl.load(table_ptr + page, mask=page < end, other=0).to(gl.int64)
    slot = (block * BS + t % BS) * NKV + h
    ok = _in_context(p0, t, end, cached, BS)
    d = gl.arange(0, D, layout=gl.SliceLayout(1, kt_layout))
    k_t = gl.load(k_cache_ptr + slot[None, :] * D + d[:, None], mask=ok[None, :], other=0.0)
    slot_v = gl.convert_layout(slot, gl.SliceLayout(1, v_layout))
    ok_v = gl.convert_layout(ok, gl.SliceLayout(1, v_layout))
    dv = gl.arange(0, D, layout=gl.SliceLayout(0, v_layout))
    v = gl.load(v_cache_ptr + slot_v[:, None] * D + dv[None, :], mask=ok_v[:, None], other=0.0)
    return k_t, v


@gluon.jit
def _softmax_step(scores, v_b, m_i, l_i, acc, a_layout: gl.constexpr):
    """One online-softmax step over scores [QP, T] (masked entries -inf) and values V [T, D]."""
    m_new = gl.maximum(m_i, gl.max(scores, axis=1))
    m_safe = gl.where(m_new == float("-inf"), 0.0, m_new)
    alpha = gl.exp(m_i - m_safe)
    p = gl.exp(scores - m_safe[:, None])
    l_i = l_i * alpha + gl.sum(p, axis=1)
    acc = mma_v2(gl.convert_layout(p.to(v_b.dtype), a_layout), v_b, acc * alpha[:, None])
    return m_new, l_i, acc


@gluon.jit
def _split_pages(ctx, s, TOKENS: gl.constexpr, SPLITS: gl.constexpr, BS: gl.constexpr):
    """A row of context ctx, split s: its cached tokens and the split's pages [first, end)."""
    cached = gl.where(ctx > 0, ctx - TOKENS, 0)
    pages = gl.cdiv(cached, BS)
    per_split = gl.cdiv(pages, SPLITS)
    first = s * per_split
    return cached, first, gl.minimum(first + per_split, pages)


@gluon.jit
def _task_inputs(task, k_cache_ptr, v_cache_ptr, block_tables_ptr, bt_stride, context_lens_ptr, positions_ptr,
                 TASKS: gl.constexpr, NQ: gl.constexpr, NKV: gl.constexpr, D: gl.constexpr, TOKENS: gl.constexpr,
                 SPLITS: gl.constexpr, BS: gl.constexpr, KT: gl.constexpr, QP: gl.constexpr, TP: gl.constexpr):
    """What task ``task`` reads that qkv does not write: its row's context length, the positions of
    its query rows and of its own tokens, its split's first KV tile. Past the tasks the row reads
    as dead (context 0: nothing loaded)."""
    WARPS: gl.constexpr = gl.num_warps()
    GROUP: gl.constexpr = NQ // NKV
    q_layout: gl.constexpr = rows_layout(QP, D, WARPS)
    b = task // (SPLITS * NKV)
    h = (task // SPLITS) % NKV
    ctx = gl.load(context_lens_ptr + b, mask=task < TASKS, other=0)
    i = gl.arange(0, QP, layout=gl.SliceLayout(1, q_layout))
    q_pos = gl.load(positions_ptr + b * TOKENS + i % TOKENS, mask=(i < GROUP * TOKENS) & (ctx > 0), other=0)
    jn = gl.arange(0, TP, layout=gl.SliceLayout(1, q_layout))
    n_pos = gl.load(positions_ptr + b * TOKENS + jn, mask=(jn < TOKENS) & (ctx > 0), other=0)
    cached, first, end = _split_pages(ctx, task % SPLITS, TOKENS, SPLITS, BS)
    k_t, v = _kv_tile(k_cache_ptr, v_cache_ptr, block_tables_ptr + b * bt_stride, first,
                      gl.minimum(end, first + KT // BS), cached, h, NKV, D, BS, KT, cols_layout(D, KT, WARPS),
                      rows_layout(KT, D, WARPS))
    return ctx, q_pos, n_pos, k_t, v


@gluon.jit
def _attn_task(task, ctx, q_pos, n_pos, k_t, v, qkv_ptr, QKV_PARTS: gl.constexpr, rope_ptr, q_norm_ptr, k_norm_ptr,
               k_cache_ptr, v_cache_ptr, block_tables_ptr, bt_stride, part_acc_ptr, part_ml_ptr, M: gl.constexpr,
               NQ: gl.constexpr, NKV: gl.constexpr, D: gl.constexpr, TOKENS: gl.constexpr, SPLITS: gl.constexpr,
               BS: gl.constexpr, KT: gl.constexpr, QP: gl.constexpr, TP: gl.constexpr, QK_NORM: gl.constexpr,
               EPS: gl.constexpr):
    """Task (row b, KV head h, split s): attention of the row's GQA group of query heads × tokens
    over the split's cached pages, the last split also over the step's own tokens (causally);
    split 0 appends the step's K and V to the cache (a dead row stores nothing)."""
    WARPS: gl.constexpr = gl.num_warps()
    GROUP: gl.constexpr = NQ // NKV
    NQKV: gl.constexpr = (NQ + 2 * NKV) * D
    STEP: gl.constexpr = KT // BS
    q_layout: gl.constexpr = rows_layout(QP, D, WARPS)
    kt_layout: gl.constexpr = cols_layout(D, KT, WARPS)
    v_layout: gl.constexpr = rows_layout(KT, D, WARPS)
    acc_layout: gl.constexpr = mma_cols(WARPS)
    a_layout: gl.constexpr = operand(0, acc_layout)
    b_layout: gl.constexpr = operand(1, acc_layout)
    b = task // (SPLITS * NKV)
    h = (task // SPLITS) % NKV
    s = task % SPLITS
    cached, first, end = _split_pages(ctx, s, TOKENS, SPLITS, BS)
    live = ctx > 0
    kv_dtype: gl.constexpr = k_cache_ptr.dtype.element_ty

    # Query rows i = g·TOKENS + j: head h·GROUP + g, token j of row b.
    i = gl.arange(0, QP, layout=gl.SliceLayout(1, q_layout))
    q_valid = (i < GROUP * TOKENS) & live
    q_tok = b * TOKENS + i % TOKENS
    q = _rope_rows(qkv_ptr, QKV_PARTS, M * NQKV, q_tok * NQKV, (h * GROUP + i // TOKENS) * D, q_pos, rope_ptr,
                   q_norm_ptr, q_valid, D, QK_NORM, EPS, q_layout)
    q_a = gl.convert_layout((q * (1.0 / gl.sqrt(float(D)))).to(kv_dtype), a_layout)

    # The step's own tokens j' of row b: K (normed, rotated) and V, rounded as the cache stores them.
    jn = gl.arange(0, TP, layout=gl.SliceLayout(1, q_layout))
    n_valid = (jn < TOKENS) & live
    n_tok = b * TOKENS + jn
    k_new = _rope_rows(qkv_ptr, QKV_PARTS, M * NQKV, n_tok * NQKV, (NQ + h) * D + jn * 0, n_pos, rope_ptr,
                       k_norm_ptr, n_valid, D, QK_NORM, EPS, q_layout).to(kv_dtype)
    d = gl.arange(0, D, layout=gl.SliceLayout(0, q_layout))
    v_new = _parts(qkv_ptr + n_tok[:, None] * NQKV + (NQ + NKV + h) * D + d[None, :], n_valid[:, None], QKV_PARTS,
                   M * NQKV).to(kv_dtype)

    m_i = gl.full([QP], float("-inf"), gl.float32, gl.SliceLayout(1, acc_layout))
    l_i = gl.zeros([QP], gl.float32, gl.SliceLayout(1, acc_layout))
    acc = gl.zeros([QP, D], gl.float32, acc_layout)
    table = block_tables_ptr + b * bt_stride
    t_s = gl.arange(0, KT, layout=gl.SliceLayout(0, acc_layout))
    for p0 in range(first, end, STEP):
        k_next, v_next = _kv_tile(k_cache_ptr, v_cache_ptr, table, p0 + STEP, end, cached, h, NKV, D, BS, KT,
                                  kt_layout, v_layout)
        scores = mma_v2(q_a, gl.convert_layout(k_t, b_layout), gl.zeros([QP, KT], gl.float32, acc_layout))
        scores = gl.where(_in_context(p0, t_s, end, cached, BS)[None, :], scores, float("-inf"))
        m_i, l_i, acc = _softmax_step(scores, gl.convert_layout(v, b_layout), m_i, l_i, acc, a_layout)
        k_t = k_next
        v = v_next

    i_s = gl.arange(0, QP, layout=gl.SliceLayout(1, acc_layout))
    if s == SPLITS - 1:  # the step's own tokens, causally
        scores = mma_v2(q_a, gl.convert_layout(gl.permute(k_new, [1, 0]), b_layout),
                        gl.zeros([QP, TP], gl.float32, acc_layout))
        jn_s = gl.arange(0, TP, layout=gl.SliceLayout(0, acc_layout))
        causal = (jn_s[None, :] <= (i_s % TOKENS)[:, None]) & (jn_s < TOKENS)[None, :] & live
        scores = gl.where(causal, scores, float("-inf"))
        m_i, l_i, acc = _softmax_step(scores, gl.convert_layout(v_new, b_layout), m_i, l_i, acc, a_layout)

    out = ((b * TOKENS + i_s % TOKENS) * NQ + h * GROUP + i_s // TOKENS) * SPLITS + s
    row_ok = i_s < GROUP * TOKENS
    d_s = gl.arange(0, D, layout=gl.SliceLayout(0, acc_layout))
    gl.store(part_acc_ptr + out[:, None] * D + d_s[None, :], acc, mask=row_ok[:, None])
    gl.store(part_ml_ptr + out * 2, m_i, mask=row_ok)
    gl.store(part_ml_ptr + out * 2 + 1, l_i, mask=row_ok)

    if s == 0:  # append the new K/V; a dead row (context 0) stores nothing
        page = gl.load(table + n_pos // BS, mask=n_valid, other=0).to(gl.int64)
        slot = (page * BS + n_pos % BS) * NKV + h
        gl.store(k_cache_ptr + slot[:, None] * D + d[None, :], k_new, mask=n_valid[:, None])
        gl.store(v_cache_ptr + slot[:, None] * D + d[None, :], v_new, mask=n_valid[:, None])


@gluon.jit
def attention_prefetch(pid, k_cache_ptr, v_cache_ptr, block_tables_ptr, bt_stride, context_lens_ptr, positions_ptr,
                       ROWS: gl.constexpr, NQ: gl.constexpr, NKV: gl.constexpr, D: gl.constexpr,
                       TOKENS: gl.constexpr, SPLITS: gl.constexpr, BS: gl.constexpr, KT: gl.constexpr,
                       QP: gl.constexpr, TP: gl.constexpr):
    """The CTA's first task's inputs that the qkv op does not write (``_task_inputs``)."""
    return _task_inputs(pid, k_cache_ptr, v_cache_ptr, block_tables_ptr, bt_stride, context_lens_ptr, positions_ptr,
                        ROWS * NKV * SPLITS, NQ, NKV, D, TOKENS, SPLITS, BS, KT, QP, TP)


@gluon.jit
def attention_op(pid, pre, qkv_ptr, QKV_PARTS: gl.constexpr, rope_ptr, q_norm_ptr, k_norm_ptr, k_cache_ptr,
                 v_cache_ptr, block_tables_ptr, bt_stride, context_lens_ptr, positions_ptr, part_acc_ptr, part_ml_ptr,
                 ROWS: gl.constexpr, NQ: gl.constexpr, NKV: gl.constexpr, D: gl.constexpr, TOKENS: gl.constexpr,
                 SPLITS: gl.constexpr, BS: gl.constexpr, KT: gl.constexpr, QP: gl.constexpr, TP: gl.constexpr,
                 QK_NORM: gl.constexpr, EPS: gl.constexpr, G: gl.constexpr):
    """The CTA's attention tasks, task t on CTA t mod G; ``pre`` is ``attention_prefetch``'s."""
    TASKS: gl.constexpr = ROWS * NKV * SPLITS
    ctx, q_pos, n_pos, k_t, v = pre
    for task in range(pid, TASKS, G):
        _attn_task(task, ctx, q_pos, n_pos, k_t, v, qkv_ptr, QKV_PARTS, rope_ptr, q_norm_ptr, k_norm_ptr, k_cache_ptr,
                   v_cache_ptr, block_tables_ptr, bt_stride, part_acc_ptr, part_ml_ptr, ROWS * TOKENS, NQ, NKV, D,
                   TOKENS, SPLITS, BS, KT, QP, TP, QK_NORM, EPS)
        ctx, q_pos, n_pos, k_t, v = _task_inputs(task + G, k_cache_ptr, v_cache_ptr, block_tables_ptr, bt_stride,
                                                 context_lens_ptr, positions_ptr, TASKS, NQ, NKV, D, TOKENS, SPLITS,
                                                 BS, KT, QP, TP)
