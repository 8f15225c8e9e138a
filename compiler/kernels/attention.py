"""The attention op: split-KV decode attention over the paged KV cache, with the layer's
q/k norm, RoPE and KV append, one task a (row, KV head, split) → partials (acc, max, sum).

RoPE, q/k norm and the KV append happen here rather than after the qkv GEMV, so qkv is a plain
GEMV that tiles over every SM, and attention takes the step's own K/V from qkv's output rather
than re-reading the cache the same step wrote (docs/plan.md). What a task reads that qkv does not
write — its row's context length, the positions, its split's first cached KV tile — is the op's
prefetch (``attention_prefetch``), which the driver runs before the op's wait; each task then
loads the next task's as it ends.
"""

import triton
import triton.language as tl

from .common import head_cols, load_head_vector, load_parts, mm, trans_last


@triton.jit
def _rope_rows(raw_ptr, PARTS: tl.constexpr, PART_STRIDE, row_off, col0, pos, rope_ptr, norm_ptr,
               valid, D: tl.constexpr, DP: tl.constexpr, QK_NORM: tl.constexpr, EPS: tl.constexpr):
    """Rows of q or k heads from the raw qkv buffer (PARTS split-K partials), q/k-normed (Qwen3)
    and rotated (RoPE).

    ``row_off[i]`` is the element offset of row i's token in qkv, ``col0[i]`` its head's first
    column, ``pos[i]`` its position. rotate_half pairs column d with d ± D/2, so the partner
    columns are loaded directly instead of shuffled. The rows are DP (a power of two) wide: a
    head_dim below it reads its padding as zeros, which the norm and the rotation keep zeros.
    """
    HALF: tl.constexpr = D // 2
    d = tl.arange(0, DP)
    partner = (d + HALF) % D
    mask = head_cols(valid[:, None], d[None, :], D, DP)
    x = load_parts(raw_ptr + row_off[:, None] + col0[:, None] + d[None, :], mask, PARTS, PART_STRIDE)
    xp = load_parts(raw_ptr + row_off[:, None] + col0[:, None] + partner[None, :], mask, PARTS, PART_STRIDE)
    if QK_NORM:
        rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=1) / D + EPS)
        x = x * rstd[:, None] * load_head_vector(norm_ptr, d, D, DP).to(tl.float32)[None, :]
        xp = xp * rstd[:, None] * load_head_vector(norm_ptr, partner, D, DP).to(tl.float32)[None, :]
    freq = d % HALF
    cos = tl.load(rope_ptr + pos[:, None] * D + freq[None, :], mask=mask, other=1.0)
    sin = tl.load(rope_ptr + pos[:, None] * D + HALF + freq[None, :], mask=mask, other=0.0)
    sign = tl.where(d < HALF, -1.0, 1.0)
    return x * cos + sign[None, :] * xp * sin


@triton.jit
def _softmax_update(scores, values, m_i, l_i, acc, DOT_IEEE: tl.constexpr):
    """One online-softmax step over a tile of scores [..., rows, tokens] (masked entries are -inf)
    and its values [..., tokens, D]: a state per row, or per row of each batch entry."""
    m_new = tl.maximum(m_i, tl.max(scores, axis=-1))
    m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
    alpha = tl.exp(m_i - m_safe)
    p = tl.exp(scores - tl.expand_dims(m_safe, -1))
    l_i = l_i * alpha + tl.sum(p, axis=-1)
    pv = mm(p.to(values.dtype), trans_last(values), DOT_IEEE)
    return m_new, l_i, acc * tl.expand_dims(alpha, -1) + pv


@triton.jit
def _kv_tile(k_cache_ptr, v_cache_ptr, table_ptr, p0, t, end, cached, seen, h, NKV: tl.constexpr, D: tl.constexpr,
             DP: tl.constexpr, BS: tl.constexpr, WINDOW: tl.constexpr):
    """K and V [..., D] of the cached tokens p0 · BS + t (t: the tile's token offsets, of any shape)
    of one row's block table (``table_ptr``), KV head h, those in pages past ``end`` masked;
    which of them are in the context (with a sliding window, from ``seen``, the first position
    any query of the row sees: an engine may have reused the slots before it); and their positions.
    The rows are DP wide (``_rope_rows``)."""
    d = tl.arange(0, DP)
    page = p0 + t // BS
    block = tl.load(table_ptr + page, mask=page < end, other=0).to(tl.int64)
    slot = (block * BS + t % BS) * NKV + h
    # A page's slots past the context hold whatever the cache held (stale or never written,
    # possibly NaN); they are not loaded, since a NaN value times a zero weight is NaN.
    token = page * BS + t % BS
    in_context = (page < end) & (token < cached)
    if WINDOW > 0:
        in_context = in_context & (token >= seen)
    row = tl.expand_dims(slot, -1) * D
    mask = head_cols(tl.expand_dims(in_context, -1), d, D, DP)
    k = tl.load(k_cache_ptr + row + d, mask=mask, other=0.0)
    v = tl.load(v_cache_ptr + row + d, mask=mask, other=0.0)
    return k, v, in_context, token


@triton.jit
def _attend_tile(q, k, v, in_context, token, lo, m_i, l_i, acc, WINDOW: tl.constexpr, DOT_IEEE: tl.constexpr):
    """The online-softmax state after one KV tile (tokens outside the context masked, and with a
    sliding window those before each query row's first visible position ``lo``); q, k, v, the
    state and ``lo`` ([..., rows]) may carry a leading batch dimension."""
    visible = tl.expand_dims(in_context, -2)
    if WINDOW > 0:
        visible = visible & (tl.expand_dims(token, -2) >= tl.expand_dims(lo, -1))
    scores = tl.where(visible, mm(q, k, DOT_IEEE), float("-inf"))
    return _softmax_update(scores, v, m_i, l_i, acc, DOT_IEEE)


@triton.jit
def _attend_pages(q, lo, m_i, l_i, acc, k_cache_ptr, v_cache_ptr, table_ptr, first, end, cached, seen, h,
                  NKV: tl.constexpr, D: tl.constexpr, DP: tl.constexpr,
                  BS: tl.constexpr, KT: tl.constexpr, KV_STAGES: tl.constexpr,
                  WINDOW: tl.constexpr, DOT_IEEE: tl.constexpr):
    """Online-softmax attention of q over the cached pages [first, end) of one row's block table,
    KV head h, from the state (m_i, l_i, acc): KT tokens (KT / BS pages) per iteration (one page
    per iteration would pay a dependent block-table → K/V round trip for every BS tokens).

    The loop is Triton's software pipeline of KV_STAGES stages. The K/V loads hang off the
    block-table load, and the pipeliner gives each of the two levels (KV_STAGES − 1) / 2 stages:
    (KV_STAGES − 1) // 2 K/V tiles in flight (3 → 1, 5 → 2, 7 → 3; read in the TTGIR)."""
    for p0 in tl.range(first, end, KT // BS, num_stages=KV_STAGES):
        k, v, in_context, token = _kv_tile(k_cache_ptr, v_cache_ptr, table_ptr, p0, tl.arange(0, KT), end, cached,
                                           seen, h, NKV, D, DP, BS, WINDOW)
        m_i, l_i, acc = _attend_tile(q, k, v, in_context, token, lo, m_i, l_i, acc, WINDOW, DOT_IEEE)
    return m_i, l_i, acc


@triton.jit
def _attend_substreams(q, lo, m_i, l_i, acc, k_cache_ptr, v_cache_ptr, table_ptr, first, end, cached, seen, h,
                       NKV: tl.constexpr, D: tl.constexpr, DP: tl.constexpr, BS: tl.constexpr, KT: tl.constexpr,
                       KV_STAGES: tl.constexpr, SUB: tl.constexpr, WINDOW: tl.constexpr, DOT_IEEE: tl.constexpr):
    """``_attend_pages`` with each KT-token tile cut into SUB sub-tiles of KT / SUB consecutive
    tokens, sub-tile w feeding online-softmax state w, merged into (m_i, l_i, acc) once after the
    walk.

    Why: a decode query is a handful of rows (QP = 16 holds a GQA group of 4), so the one-state
    walk lays a tile's KT tokens across the CTA's warps, and every tile's running max, running
    sum and P·V operand cross warps through shared memory (nine CTA barriers a 256-token tile in
    the SASS of Llama-3.2-1B's attention; two a 128-token tile here, the pipeline's own). Here a
    tile is one batched product, [SUB, QP, D] × [SUB, D, KT / SUB], whose batch dimension Triton
    spreads over the warps: a warp owns a sub-tile and its reductions stay inside it. The walk's
    steady state is what streams a long context's KV bytes (Llama-3.2-1B 8 rows at context 32768:
    3.70 → 3.50 ms, docs/PERFORMANCE.md)."""
    QP: tl.constexpr = q.shape[0]
    ST: tl.constexpr = KT // SUB
    q3 = tl.broadcast_to(q[None, :, :], (SUB, QP, DP))
    lo3 = tl.broadcast_to(lo[None, :], (SUB, QP))
    m3 = tl.full([SUB, QP], float("-inf"), tl.float32)
    l3 = tl.zeros([SUB, QP], tl.float32)
    acc3 = tl.zeros([SUB, QP, DP], tl.float32)
    tok = tl.arange(0, SUB)[:, None] * ST + tl.arange(0, ST)[None, :]  # [SUB, ST]: token of the tile
    for p0 in tl.range(first, end, KT // BS, num_stages=KV_STAGES):
        k, v, in_context, token = _kv_tile(k_cache_ptr, v_cache_ptr, table_ptr, p0, tok, end, cached, seen, h, NKV, D,
                                           DP, BS, WINDOW)
        m3, l3, acc3 = _attend_tile(q3, k, v, in_context, token, lo3, m3, l3, acc3, WINDOW, DOT_IEEE)
    # Merge the SUB states and the incoming one.
    m_new = tl.maximum(m_i, tl.max(m3, axis=0))
    m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
    w = tl.exp(m3 - m_safe[None, :])
    alpha = tl.exp(m_i - m_safe)
    l_i = l_i * alpha + tl.sum(l3 * w, axis=0)
    acc = acc * alpha[:, None] + tl.sum(acc3 * w[:, :, None], axis=0)
    return m_new, l_i, acc


@triton.jit
def _task_coords(task, NKV: tl.constexpr, SPLITS):
    """Attention task → (row b, KV head h, split s)."""
    return task // (SPLITS * NKV), (task // SPLITS) % NKV, task % SPLITS


@triton.jit
def _split_pages(ctx, s, TOKENS: tl.constexpr, SPLITS, BS: tl.constexpr, WINDOW: tl.constexpr):
    """A row of context ctx, split s: its cached tokens (the context before this step's own) and
    the split's share of the pages [first, end) its queries see, out of per_split a split: every
    cached page, or with a sliding window those from the one holding the first query's first
    visible position ``seen`` (cached − WINDOW + 1; later queries see less, and mask the rest)."""
    cached = tl.where(ctx > 0, ctx - TOKENS, 0)
    pages = tl.cdiv(cached, BS)
    seen = tl.maximum(cached - WINDOW + 1, 0) if WINDOW > 0 else 0  # the row's first visible position
    per_split = tl.cdiv(pages - seen // BS, SPLITS)
    first = seen // BS + s * per_split
    return cached, first, tl.minimum(first + per_split, pages), per_split, seen


@triton.jit
def _walks_long_tiles(per_split, BS: tl.constexpr, KT: tl.constexpr, LONG_KT: tl.constexpr):
    """Whether a split of per_split pages walks LONG_KT-token tiles: it is long enough for one."""
    return (LONG_KT > KT) & (per_split * BS >= LONG_KT)


@triton.jit
def _task_inputs(task, k_cache_ptr, v_cache_ptr, block_tables_ptr, bt_stride, context_lens_ptr, positions_ptr,
                 TASKS, NQ: tl.constexpr, NKV: tl.constexpr, D: tl.constexpr, DP: tl.constexpr, TOKENS: tl.constexpr,
                 SPLITS, BS: tl.constexpr, KT: tl.constexpr, LONG_KT: tl.constexpr, QP: tl.constexpr,
                 TP: tl.constexpr, WINDOW: tl.constexpr):
    """What an attention task reads that the qkv stage does not write, so a CTA loads it before
    its wait: the row's context length, the positions of its query rows (``_attn_task``'s i) and
    of its own tokens (j'), and the first KT cached tokens of its split (written by earlier steps).
    After the wait the task's q then needs one round trip (qkv and the RoPE table together), not
    three (context length → positions → RoPE table). Past the tasks (task ≥ TASKS) the row reads
    as dead: context 0, nothing loaded. No KV tile for a split that walks long tiles: peeling KT
    tokens off it saves it no iteration, and measured 2–2.5% slower (Llama-3.2-1B at 4 and 8 rows,
    and at context 32768)."""
    GROUP: tl.constexpr = NQ // NKV
    b, h, s = _task_coords(task, NKV, SPLITS)
    ctx = tl.load(context_lens_ptr + b, mask=task < TASKS, other=0)
    i = tl.arange(0, QP)
    q_pos = tl.load(positions_ptr + b * TOKENS + i % TOKENS, mask=(i < GROUP * TOKENS) & (ctx > 0), other=0)
    jn = tl.arange(0, TP)
    n_pos = tl.load(positions_ptr + b * TOKENS + jn, mask=(jn < TOKENS) & (ctx > 0), other=0)
    cached, first, end, per_split, seen = _split_pages(ctx, s, TOKENS, SPLITS, BS, WINDOW)
    end = tl.where(_walks_long_tiles(per_split, BS, KT, LONG_KT), first, tl.minimum(end, first + KT // BS))
    k, v, in_context, token = _kv_tile(k_cache_ptr, v_cache_ptr, block_tables_ptr + b * bt_stride, first,
                                       tl.arange(0, KT), end, cached, seen, h, NKV, D, DP, BS, WINDOW)
    if WINDOW == 0:  # nothing reads the positions: not carried from task to task
        token = 0
    return ctx, q_pos, n_pos, k, v, in_context, token


@triton.jit
def _attn_task(task, ctx, q_pos, n_pos, k_first, v_first, in_first, t_first, qkv_ptr, QKV_PARTS: tl.constexpr,
               rope_ptr,
               q_norm_ptr, k_norm_ptr, k_cache_ptr, v_cache_ptr, block_tables_ptr, bt_stride, part_acc_ptr, part_ml_ptr,
               M, NQ: tl.constexpr, NKV: tl.constexpr, D: tl.constexpr, DP: tl.constexpr,
               TOKENS: tl.constexpr, SPLITS, BS: tl.constexpr, KT: tl.constexpr, LONG_KT: tl.constexpr,
               KV_STAGES: tl.constexpr, LONG_KV_STAGES: tl.constexpr, KV_SUB: tl.constexpr, QP: tl.constexpr,
               TP: tl.constexpr, QK_NORM: tl.constexpr, EPS: tl.constexpr, DOT_IEEE: tl.constexpr,
               WINDOW: tl.constexpr):
    """Task (row b, KV head h, split s): attention of the row's GQA group of query heads × tokens.

    qkv holds QKV_PARTS split-K partials of the [M, NQKV] projection, added as they are loaded.
    The row's context length ctx, the positions q_pos and n_pos and the split's first KV tile
    (k_first, v_first, in_first, t_first: its positions) are loaded by the caller (``_task_inputs``).
    With a sliding window, query row i sees the positions from q_pos[i] − WINDOW + 1 on.
    """
    GROUP: tl.constexpr = NQ // NKV
    NQKV: tl.constexpr = (NQ + 2 * NKV) * D
    b, h, s = _task_coords(task, NKV, SPLITS)
    cached, first, end, per_split, seen = _split_pages(ctx, s, TOKENS, SPLITS, BS, WINDOW)
    live = ctx > 0
    lo = q_pos - WINDOW + 1  # each query row's first visible position (used only with a window)
    kv_dtype = k_cache_ptr.dtype.element_ty

    # Query rows i = g·TOKENS + j: head h·GROUP + g, token j of row b.
    i = tl.arange(0, QP)
    q_valid = (i < GROUP * TOKENS) & live
    q_tok = b * TOKENS + i % TOKENS
    q = _rope_rows(qkv_ptr, QKV_PARTS, M * NQKV, q_tok * NQKV, (h * GROUP + i // TOKENS) * D, q_pos, rope_ptr,
                   q_norm_ptr, q_valid, D, DP, QK_NORM, EPS)
    q = (q * (1.0 / tl.sqrt(float(D)))).to(kv_dtype)

    # The step's own tokens j' of row b: K (normed, rotated) and V, rounded as the cache stores them.
    jn = tl.arange(0, TP)
    n_valid = (jn < TOKENS) & live
    n_tok = b * TOKENS + jn
    k_new = _rope_rows(qkv_ptr, QKV_PARTS, M * NQKV, n_tok * NQKV, (NQ + h) * D + jn * 0, n_pos, rope_ptr,
                       k_norm_ptr, n_valid, D, DP, QK_NORM, EPS).to(kv_dtype)
    d = tl.arange(0, DP)
    n_cols = head_cols(n_valid[:, None], d[None, :], D, DP)
    v_new = load_parts(qkv_ptr + n_tok[:, None] * NQKV + (NQ + NKV + h) * D + d[None, :], n_cols, QKV_PARTS,
                       M * NQKV).to(kv_dtype)

    # This split's share of the cached positions. A split long enough for a LONG_KT tile walks
    # them LONG_KT tokens per iteration (long tiles measure faster at long contexts and slower at
    # short ones, and only the run time knows the context); any other starts with the first KT
    # tokens the caller loaded and walks the rest KT tokens per iteration. The long walk starts
    # from the empty state: attending to the caller's (empty) tile first cost 2% where it ran.
    m_i = tl.full([QP], float("-inf"), tl.float32)
    l_i = tl.zeros([QP], tl.float32)
    acc = tl.zeros([QP, DP], tl.float32)
    table = block_tables_ptr + b * bt_stride
    rest = first + KT // BS
    if LONG_KT > KT and _walks_long_tiles(per_split, BS, KT, LONG_KT):
        if KV_SUB > 1:
            m_i, l_i, acc = _attend_substreams(q, lo, m_i, l_i, acc, k_cache_ptr, v_cache_ptr, table, first, end,
                                               cached, seen, h, NKV, D, DP, BS, LONG_KT, LONG_KV_STAGES, KV_SUB, WINDOW,
                                               DOT_IEEE)
        else:
            m_i, l_i, acc = _attend_pages(q, lo, m_i, l_i, acc, k_cache_ptr, v_cache_ptr, table, first, end, cached,
                                          seen, h, NKV, D, DP, BS, LONG_KT, LONG_KV_STAGES, WINDOW, DOT_IEEE)
    else:
        m_i, l_i, acc = _attend_tile(q, k_first, v_first, in_first, t_first, lo, m_i, l_i, acc, WINDOW, DOT_IEEE)
        m_i, l_i, acc = _attend_pages(q, lo, m_i, l_i, acc, k_cache_ptr, v_cache_ptr, table, rest, end, cached, seen,
                                      h, NKV, D, DP, BS, KT, KV_STAGES, WINDOW, DOT_IEEE)

    if s == SPLITS - 1:  # the last split also attends to the step's own tokens, causally
        scores = mm(q, k_new, DOT_IEEE)
        causal = (jn[None, :] <= (i % TOKENS)[:, None]) & n_valid[None, :]
        if WINDOW > 0:
            causal = causal & (n_pos[None, :] >= lo[:, None])
        scores = tl.where(causal, scores, float("-inf"))
        m_i, l_i, acc = _softmax_update(scores, v_new, m_i, l_i, acc, DOT_IEEE)

    out = (q_tok * NQ + h * GROUP + i // TOKENS) * SPLITS + s
    row_ok = i < GROUP * TOKENS
    tl.store(part_acc_ptr + out[:, None] * D + d[None, :], acc, mask=head_cols(row_ok[:, None], d[None, :], D, DP))
    tl.store(part_ml_ptr + out * 2, m_i, mask=row_ok)
    tl.store(part_ml_ptr + out * 2 + 1, l_i, mask=row_ok)

    if s == 0:  # append the new K/V; a dead row (context 0) stores nothing
        page = tl.load(block_tables_ptr + b * bt_stride + n_pos // BS, mask=n_valid, other=0).to(tl.int64)
        slot = (page * BS + n_pos % BS) * NKV + h
        tl.store(k_cache_ptr + slot[:, None] * D + d[None, :], k_new, mask=n_cols)
        tl.store(v_cache_ptr + slot[:, None] * D + d[None, :], v_new, mask=n_cols)


@triton.jit
def attention_prefetch(pid, k_cache_ptr, v_cache_ptr, block_tables_ptr, bt_stride, context_lens_ptr, positions_ptr,
                       NQ: tl.constexpr, NKV: tl.constexpr, D: tl.constexpr, DP: tl.constexpr,
                       TOKENS: tl.constexpr, SPLITS, BS: tl.constexpr, KT: tl.constexpr, LONG_KT: tl.constexpr,
                       QP: tl.constexpr, TP: tl.constexpr, WINDOW: tl.constexpr, TASKS: tl.constexpr):
    """The CTA's first task's inputs that the qkv op does not write (``_task_inputs``)."""
    return _task_inputs(pid, k_cache_ptr, v_cache_ptr, block_tables_ptr, bt_stride, context_lens_ptr, positions_ptr,
                        TASKS, NQ, NKV, D, DP, TOKENS, SPLITS, BS, KT, LONG_KT, QP, TP, WINDOW)


@triton.jit
def attention_op(pid, pre, qkv_ptr, QKV_PARTS: tl.constexpr, rope_ptr, q_norm_ptr, k_norm_ptr, k_cache_ptr,
                 v_cache_ptr, block_tables_ptr, bt_stride, context_lens_ptr, positions_ptr, part_acc_ptr, part_ml_ptr,
                 ROWS, NQ: tl.constexpr, NKV: tl.constexpr, D: tl.constexpr, DP: tl.constexpr,
                 TOKENS: tl.constexpr, SPLITS, BS: tl.constexpr, KT: tl.constexpr, LONG_KT: tl.constexpr,
                 KV_STAGES: tl.constexpr, LONG_KV_STAGES: tl.constexpr, KV_SUB: tl.constexpr, QP: tl.constexpr,
                 TP: tl.constexpr, QK_NORM: tl.constexpr, EPS: tl.constexpr, DOT_IEEE: tl.constexpr,
                 WINDOW: tl.constexpr, G: tl.constexpr, TASKS: tl.constexpr):
    """The CTA's attention tasks (ROWS × NKV × SPLITS = TASKS), task t on CTA t mod G; ``pre`` is
    ``attention_prefetch``'s. TASKS stays a constant where the band's rows and splits are run-time
    values: with it the compiler sees a CTA's last task and drops the prefetch past it (a staged
    attention with the count computed at run time measured 20% slower)."""
    ctx, q_pos, n_pos, k_first, v_first, in_first, t_first = pre
    # num_stages=1: the next task's inputs are already loaded a task ahead; the pipeliner would
    # move the context-length load into shared memory, where C4 cannot follow it to the stores.
    for task in tl.range(pid, TASKS, G, num_stages=1):
        _attn_task(task, ctx, q_pos, n_pos, k_first, v_first, in_first, t_first, qkv_ptr, QKV_PARTS, rope_ptr,
                   q_norm_ptr, k_norm_ptr, k_cache_ptr, v_cache_ptr, block_tables_ptr, bt_stride, part_acc_ptr,
                   part_ml_ptr, ROWS * TOKENS, NQ, NKV, D, DP, TOKENS, SPLITS, BS, KT, LONG_KT, KV_STAGES, LONG_KV_STAGES,
                   KV_SUB, QP, TP, QK_NORM, EPS, DOT_IEEE, WINDOW)
        ctx, q_pos, n_pos, k_first, v_first, in_first, t_first = _task_inputs(
            task + G, k_cache_ptr, v_cache_ptr, block_tables_ptr, bt_stride, context_lens_ptr, positions_ptr, TASKS,
            NQ, NKV, D, DP, TOKENS, SPLITS, BS, KT, LONG_KT, QP, TP, WINDOW)
