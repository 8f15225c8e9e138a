"""The dense decoder layer as one program of six stages, or eight with the RMSNorms as stages of
their own (NORM_STAGES).

Stages (index without / with norm stages, name, tasks):

   0. ``norm_qkv`` (NORM_STAGES) x̂_qkv = RMSNorm(x_in), one copy for every qkv CTA   (token row)
0  1. ``qkv``     x̂ · W_qkvᵀ (+ bias) → qkv (raw, fp32); without norm stages each CTA first
                  stages x̂ = RMSNorm(x_in) itself                      (tile of BN rows of W_qkv, K split)
1  2. ``attn``    q/k norm, RoPE, new K/V appended to the paged cache (live rows only), split-KV
                  attention over the cache plus the step's own tokens → partials (acc, max, sum)
                                                                        (row, KV head, split)
2  3. ``combine`` merge the splits' partials → attn_out                 (token row, query head)
3  4. ``o``       attn_out · W_oᵀ + x_in → x1                           (tile of BN rows of W_o, K split)
   5. ``norm_up`` (NORM_STAGES) x̂_up = RMSNorm(x1)                      (token row)
4  6. ``up``      x̂_up · [W_gate | W_up]ᵀ, silu(g)·u → h (x̂_up staged per CTA without norm
                  stages)                                               tiles of BN rows of each
5  7. ``down``    h · W_downᵀ + x1 → x_out                              (tile of BN rows of W_down, K split)

Task t of a stage runs on CTA t mod G. In persistent mode (FIRST=0, LAST=5 or 7) a sync edge
joins each stage to the next; in staged mode (FIRST=LAST=k) the launch boundary does. A GEMV stage
streams its weights through one software-pipelined loop over the CTA's (task, K chunk) pairs;
with the register double-buffer instead (weight_stages 1) a CTA loads its first task's first
weight chunk before each wait, so the wait hides under that load.
"""

import triton
import triton.language as tl

from .common import (
    clock_end,
    clock_start,
    gemv,
    load_act,
    load_parts,
    load_w_chunk,
    mm,
    norm_weights,
    normed_rows,
    signal,
    stage_activation,
    step_epoch,
    trans_last,
    wait,
    x_chunk,
)


@triton.jit
def _rope_rows(raw_ptr, PARTS: tl.constexpr, PART_STRIDE: tl.constexpr, row_off, col0, pos, rope_ptr, norm_ptr,
               valid, D: tl.constexpr, QK_NORM: tl.constexpr, EPS: tl.constexpr):
    """Rows of q or k heads from the raw qkv buffer (PARTS split-K partials), q/k-normed (Qwen3)
    and rotated (RoPE).

    ``row_off[i]`` is the element offset of row i's token in qkv, ``col0[i]`` its head's first
    column, ``pos[i]`` its position. rotate_half pairs column d with d ± D/2, so the partner
    columns are loaded directly instead of shuffled.
    """
    HALF: tl.constexpr = D // 2
    d = tl.arange(0, D)
    partner = (d + HALF) % D
    x = load_parts(raw_ptr + row_off[:, None] + col0[:, None] + d[None, :], valid[:, None], PARTS, PART_STRIDE)
    xp = load_parts(raw_ptr + row_off[:, None] + col0[:, None] + partner[None, :], valid[:, None], PARTS,
                    PART_STRIDE)
    if QK_NORM:
        rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=1) / D + EPS)
        x = x * rstd[:, None] * tl.load(norm_ptr + d).to(tl.float32)[None, :]
        xp = xp * rstd[:, None] * tl.load(norm_ptr + partner).to(tl.float32)[None, :]
    freq = d % HALF
    cos = tl.load(rope_ptr + pos[:, None] * D + freq[None, :], mask=valid[:, None], other=1.0)
    sin = tl.load(rope_ptr + pos[:, None] * D + HALF + freq[None, :], mask=valid[:, None], other=0.0)
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
def _kv_tile(k_cache_ptr, v_cache_ptr, table_ptr, p0, t, end, cached, h, NKV: tl.constexpr, D: tl.constexpr,
             BS: tl.constexpr):
    """K and V [..., D] of the cached tokens p0 · BS + t (t: the tile's token offsets, of any shape)
    of one row's block table (``table_ptr``), KV head h, those in pages past ``end`` masked, and
    which of them are in the context."""
    d = tl.arange(0, D)
    page = p0 + t // BS
    block = tl.load(table_ptr + page, mask=page < end, other=0).to(tl.int64)
    slot = (block * BS + t % BS) * NKV + h
    # A page's slots past the context hold whatever the cache held (stale or never written,
    # possibly NaN); they are not loaded, since a NaN value times a zero weight is NaN.
    in_context = (page < end) & (page * BS + t % BS < cached)
    row = tl.expand_dims(slot, -1) * D
    k = tl.load(k_cache_ptr + row + d, mask=tl.expand_dims(in_context, -1), other=0.0)
    v = tl.load(v_cache_ptr + row + d, mask=tl.expand_dims(in_context, -1), other=0.0)
    return k, v, in_context


@triton.jit
def _attend_tile(q, k, v, in_context, m_i, l_i, acc, DOT_IEEE: tl.constexpr):
    """The online-softmax state after one KV tile (tokens outside the context masked); q, k, v
    and the state may carry a leading batch dimension."""
    scores = tl.where(tl.expand_dims(in_context, -2), mm(q, k, DOT_IEEE), float("-inf"))
    return _softmax_update(scores, v, m_i, l_i, acc, DOT_IEEE)


@triton.jit
def _attend_pages(q, m_i, l_i, acc, k_cache_ptr, v_cache_ptr, table_ptr, first, end, cached, h, NKV: tl.constexpr,
                  D: tl.constexpr, BS: tl.constexpr, KT: tl.constexpr, KV_STAGES: tl.constexpr,
                  DOT_IEEE: tl.constexpr):
    """Online-softmax attention of q over the cached pages [first, end) of one row's block table,
    KV head h, from the state (m_i, l_i, acc): KT tokens (KT / BS pages) per iteration (one page
    per iteration would pay a dependent block-table → K/V round trip for every BS tokens).

    The loop is Triton's software pipeline of KV_STAGES stages. The K/V loads hang off the
    block-table load, and the pipeliner gives each of the two levels (KV_STAGES − 1) / 2 stages:
    (KV_STAGES − 1) // 2 K/V tiles in flight (3 → 1, 5 → 2, 7 → 3; read in the TTGIR)."""
    for p0 in tl.range(first, end, KT // BS, num_stages=KV_STAGES):
        k, v, in_context = _kv_tile(k_cache_ptr, v_cache_ptr, table_ptr, p0, tl.arange(0, KT), end, cached, h, NKV, D,
                                    BS)
        m_i, l_i, acc = _attend_tile(q, k, v, in_context, m_i, l_i, acc, DOT_IEEE)
    return m_i, l_i, acc


@triton.jit
def _attend_substreams(q, m_i, l_i, acc, k_cache_ptr, v_cache_ptr, table_ptr, first, end, cached, h,
                       NKV: tl.constexpr, D: tl.constexpr, BS: tl.constexpr, KT: tl.constexpr,
                       KV_STAGES: tl.constexpr, SUB: tl.constexpr, DOT_IEEE: tl.constexpr):
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
    q3 = tl.broadcast_to(q[None, :, :], (SUB, QP, D))
    m3 = tl.full([SUB, QP], float("-inf"), tl.float32)
    l3 = tl.zeros([SUB, QP], tl.float32)
    acc3 = tl.zeros([SUB, QP, D], tl.float32)
    tok = tl.arange(0, SUB)[:, None] * ST + tl.arange(0, ST)[None, :]  # [SUB, ST]: token of the tile
    for p0 in tl.range(first, end, KT // BS, num_stages=KV_STAGES):
        k, v, in_context = _kv_tile(k_cache_ptr, v_cache_ptr, table_ptr, p0, tok, end, cached, h, NKV, D, BS)
        m3, l3, acc3 = _attend_tile(q3, k, v, in_context, m3, l3, acc3, DOT_IEEE)
    # Merge the SUB states and the incoming one.
    m_new = tl.maximum(m_i, tl.max(m3, axis=0))
    m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
    w = tl.exp(m3 - m_safe[None, :])
    alpha = tl.exp(m_i - m_safe)
    l_i = l_i * alpha + tl.sum(l3 * w, axis=0)
    acc = acc * alpha[:, None] + tl.sum(acc3 * w[:, :, None], axis=0)
    return m_new, l_i, acc


@triton.jit
def _task_coords(task, NKV: tl.constexpr, SPLITS: tl.constexpr):
    """Attention task → (row b, KV head h, split s)."""
    return task // (SPLITS * NKV), (task // SPLITS) % NKV, task % SPLITS


@triton.jit
def _split_pages(ctx, s, TOKENS: tl.constexpr, SPLITS: tl.constexpr, BS: tl.constexpr):
    """A row of context ctx, split s: its cached tokens (the context before this step's own) and
    the split's share of their pages [first, end), out of per_split a split."""
    cached = tl.where(ctx > 0, ctx - TOKENS, 0)
    pages = tl.cdiv(cached, BS)
    per_split = tl.cdiv(pages, SPLITS)
    first = s * per_split
    return cached, first, tl.minimum(first + per_split, pages), per_split


@triton.jit
def _walks_long_tiles(per_split, BS: tl.constexpr, KT: tl.constexpr, LONG_KT: tl.constexpr):
    """Whether a split of per_split pages walks LONG_KT-token tiles: it is long enough for one."""
    return (LONG_KT > KT) & (per_split * BS >= LONG_KT)


@triton.jit
def _task_inputs(task, k_cache_ptr, v_cache_ptr, block_tables_ptr, bt_stride, context_lens_ptr, positions_ptr,
                 TASKS: tl.constexpr, NQ: tl.constexpr, NKV: tl.constexpr, D: tl.constexpr, TOKENS: tl.constexpr,
                 SPLITS: tl.constexpr, BS: tl.constexpr, KT: tl.constexpr, LONG_KT: tl.constexpr, QP: tl.constexpr,
                 TP: tl.constexpr):
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
    cached, first, end, per_split = _split_pages(ctx, s, TOKENS, SPLITS, BS)
    end = tl.where(_walks_long_tiles(per_split, BS, KT, LONG_KT), first, tl.minimum(end, first + KT // BS))
    k, v, in_context = _kv_tile(k_cache_ptr, v_cache_ptr, block_tables_ptr + b * bt_stride, first, tl.arange(0, KT),
                                end, cached, h, NKV, D, BS)
    return ctx, q_pos, n_pos, k, v, in_context


@triton.jit
def _attn_task(task, ctx, q_pos, n_pos, k_first, v_first, in_first, qkv_ptr, QKV_PARTS: tl.constexpr, rope_ptr,
               q_norm_ptr, k_norm_ptr, k_cache_ptr, v_cache_ptr, block_tables_ptr, bt_stride, part_acc_ptr, part_ml_ptr,
               M: tl.constexpr, NQ: tl.constexpr, NKV: tl.constexpr, D: tl.constexpr,
               TOKENS: tl.constexpr, SPLITS: tl.constexpr, BS: tl.constexpr, KT: tl.constexpr, LONG_KT: tl.constexpr,
               KV_STAGES: tl.constexpr, LONG_KV_STAGES: tl.constexpr, KV_SUB: tl.constexpr, QP: tl.constexpr,
               TP: tl.constexpr, QK_NORM: tl.constexpr, EPS: tl.constexpr, DOT_IEEE: tl.constexpr):
    """Task (row b, KV head h, split s): attention of the row's GQA group of query heads × tokens.

    qkv holds QKV_PARTS split-K partials of the [M, NQKV] projection, added as they are loaded.
    The row's context length ctx, the positions q_pos and n_pos and the split's first KV tile
    (k_first, v_first, in_first) are loaded by the caller (``_task_inputs``).
    """
    GROUP: tl.constexpr = NQ // NKV
    NQKV: tl.constexpr = (NQ + 2 * NKV) * D
    b, h, s = _task_coords(task, NKV, SPLITS)
    cached, first, end, per_split = _split_pages(ctx, s, TOKENS, SPLITS, BS)
    live = ctx > 0
    kv_dtype = k_cache_ptr.dtype.element_ty

    # Query rows i = g·TOKENS + j: head h·GROUP + g, token j of row b.
    i = tl.arange(0, QP)
    q_valid = (i < GROUP * TOKENS) & live
    q_tok = b * TOKENS + i % TOKENS
    q = _rope_rows(qkv_ptr, QKV_PARTS, M * NQKV, q_tok * NQKV, (h * GROUP + i // TOKENS) * D, q_pos, rope_ptr,
                   q_norm_ptr, q_valid, D, QK_NORM, EPS)
    q = (q * (1.0 / tl.sqrt(float(D)))).to(kv_dtype)

    # The step's own tokens j' of row b: K (normed, rotated) and V, rounded as the cache stores them.
    jn = tl.arange(0, TP)
    n_valid = (jn < TOKENS) & live
    n_tok = b * TOKENS + jn
    k_new = _rope_rows(qkv_ptr, QKV_PARTS, M * NQKV, n_tok * NQKV, (NQ + h) * D + jn * 0, n_pos, rope_ptr,
                       k_norm_ptr, n_valid, D, QK_NORM, EPS).to(kv_dtype)
    d = tl.arange(0, D)
    v_new = load_parts(qkv_ptr + n_tok[:, None] * NQKV + (NQ + NKV + h) * D + d[None, :],
                       n_valid[:, None], QKV_PARTS, M * NQKV).to(kv_dtype)

    # This split's share of the cached positions. A split long enough for a LONG_KT tile walks
    # them LONG_KT tokens per iteration (long tiles measure faster at long contexts and slower at
    # short ones, and only the run time knows the context); any other starts with the first KT
    # tokens the caller loaded and walks the rest KT tokens per iteration. The long walk starts
    # from the empty state: attending to the caller's (empty) tile first cost 2% where it ran.
    m_i = tl.full([QP], float("-inf"), tl.float32)
    l_i = tl.zeros([QP], tl.float32)
    acc = tl.zeros([QP, D], tl.float32)
    table = block_tables_ptr + b * bt_stride
    rest = first + KT // BS
    if LONG_KT > KT and _walks_long_tiles(per_split, BS, KT, LONG_KT):
        if KV_SUB > 1:
            m_i, l_i, acc = _attend_substreams(q, m_i, l_i, acc, k_cache_ptr, v_cache_ptr, table, first, end, cached,
                                               h, NKV, D, BS, LONG_KT, LONG_KV_STAGES, KV_SUB, DOT_IEEE)
        else:
            m_i, l_i, acc = _attend_pages(q, m_i, l_i, acc, k_cache_ptr, v_cache_ptr, table, first, end, cached, h,
                                          NKV, D, BS, LONG_KT, LONG_KV_STAGES, DOT_IEEE)
    else:
        m_i, l_i, acc = _attend_tile(q, k_first, v_first, in_first, m_i, l_i, acc, DOT_IEEE)
        m_i, l_i, acc = _attend_pages(q, m_i, l_i, acc, k_cache_ptr, v_cache_ptr, table, rest, end, cached, h, NKV,
                                      D, BS, KT, KV_STAGES, DOT_IEEE)

    if s == SPLITS - 1:  # the last split also attends to the step's own tokens, causally
        scores = mm(q, k_new, DOT_IEEE)
        causal = (jn[None, :] <= (i % TOKENS)[:, None]) & n_valid[None, :]
        scores = tl.where(causal, scores, float("-inf"))
        m_i, l_i, acc = _softmax_update(scores, v_new, m_i, l_i, acc, DOT_IEEE)

    out = (q_tok * NQ + h * GROUP + i // TOKENS) * SPLITS + s
    row_ok = i < GROUP * TOKENS
    tl.store(part_acc_ptr + out[:, None] * D + d[None, :], acc, mask=row_ok[:, None])
    tl.store(part_ml_ptr + out * 2, m_i, mask=row_ok)
    tl.store(part_ml_ptr + out * 2 + 1, l_i, mask=row_ok)

    if s == 0:  # append the new K/V; a dead row (context 0) stores nothing
        page = tl.load(block_tables_ptr + b * bt_stride + n_pos // BS, mask=n_valid, other=0).to(tl.int64)
        slot = (page * BS + n_pos % BS) * NKV + h
        tl.store(k_cache_ptr + slot[:, None] * D + d[None, :], k_new, mask=n_valid[:, None])
        tl.store(v_cache_ptr + slot[:, None] * D + d[None, :], v_new, mask=n_valid[:, None])


@triton.jit
def _combine_task(task, part_acc_ptr, part_ml_ptr, attn_out_ptr,
                  NQ: tl.constexpr, D: tl.constexpr, SPLITS: tl.constexpr, SP: tl.constexpr):
    """Task (token row, query head): merge the splits' (acc, max, sum) into the head's output."""
    s = tl.arange(0, SP)
    d = tl.arange(0, D)
    valid = s < SPLITS
    base = task * SPLITS + s
    m = tl.load(part_ml_ptr + base * 2, mask=valid, other=float("-inf"), cache_modifier=".cg")
    l_s = load_act(part_ml_ptr + base * 2 + 1, valid)
    acc = load_act(part_acc_ptr + base[:, None] * D + d[None, :], valid[:, None])
    m_max = tl.max(m, axis=0)
    weight = tl.exp(m - tl.where(m_max == float("-inf"), 0.0, m_max))
    num = tl.sum(weight[:, None] * acc, axis=0)
    den = tl.sum(weight * l_s, axis=0)
    out = num / tl.where(den > 0, den, 1.0)  # o's GEMV reads it in the weight dtype: stored so
    tl.store(attn_out_ptr + task * D + d, out.to(attn_out_ptr.dtype.element_ty))


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
def _store_tile(acc, tile, split, out_ptr, bias_ptr, residual_ptr, RES_PARTS: tl.constexpr, N: tl.constexpr,
                M: tl.constexpr, ROWS_P: tl.constexpr, BN: tl.constexpr, HAS_BIAS: tl.constexpr,
                HAS_RESIDUAL: tl.constexpr, GATED: tl.constexpr):
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
        out += tl.load(bias_ptr + n, mask=(n < N) & (split == 0), other=0.0).to(tl.float32)[None, :]
    if HAS_RESIDUAL:
        out += load_parts(residual_ptr + r[:, None] * N + n[None, :], out_mask & (split == 0), RES_PARTS, M * N)
    tl.store(out_ptr + split * M * N + r[:, None] * N + n[None, :], out.to(out_ptr.dtype.element_ty), mask=out_mask)


@triton.jit
def gemv_stage(pid, x_ptr, X_PARTS: tl.constexpr, norm_ptr, x_hat_ptr, w_ptr, out_ptr, bias_ptr, residual_ptr,
               RES_PARTS: tl.constexpr, wait_ptr, target, hang_log, clock_ptr, CLOCK_START: tl.constexpr,
               N: tl.constexpr, K: tl.constexpr, K_P: tl.constexpr, M: tl.constexpr, ROWS_P: tl.constexpr,
               BN: tl.constexpr, BK: tl.constexpr, SPLIT: tl.constexpr, G: tl.constexpr, EPS: tl.constexpr,
               NORM: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_RESIDUAL: tl.constexpr,
               GATED: tl.constexpr, INTER: tl.constexpr, WAIT: tl.constexpr, DOT_IEEE: tl.constexpr,
               W_STAGES: tl.constexpr, NORM_ROWS: tl.constexpr, WAIT_SPINS: tl.constexpr,
               HANG_SLOTS: tl.constexpr, CLOCK: tl.constexpr, CLOCK_SLOTS: tl.constexpr):
    """out[:M, tile] = x̂ · W[tile]ᵀ (+ bias) (+ residual), or silu(g)·u when GATED.

    x̂ is RMSNorm(x) when NORM; x and the residual are stored as X_PARTS and RES_PARTS split-K
    partials. When x needs a norm or a sum, each CTA first stages x̂ into its own slice of
    ``x_hat_ptr`` ([G, M, K], weight dtype; K_P is K rounded up to a power of two) and the GEMV
    streams that. A task is (output tile, K split): with SPLIT > 1 each task multiplies K / SPLIT
    columns and writes partial ``split`` of out (shape [SPLIT, M, N]); split 0 adds the bias and
    the residual. GATED tiles hold BN gate rows interleaved with BN up rows, so one product gives
    both and a split of the accumulator separates them.

    With W_STAGES > 1 a CTA's tasks are one software-pipelined loop over (task, K chunk), so
    W_STAGES - 1 weight chunks stay in flight across task boundaries: a loop per task would
    drain the pipeline and pay the memory latency again at every task (up and the LM head give
    a CTA several tasks). With W_STAGES == 1 the CTA's first weight chunk is loaded
    before its wait — WAIT=1: the sync edge's counter at ``wait_ptr``; WAIT=2: the previous
    launch (programmatic dependent launch) — so the wait hides under it, and each task's loop
    keeps one chunk in flight in registers. A profiling build clocks the stage's start into slot
    CLOCK_START once the wait returns.
    """
    WROWS: tl.constexpr = 2 * BN if GATED else BN
    TILES: tl.constexpr = (N + BN - 1) // BN
    KS: tl.constexpr = K // SPLIT
    j = tl.arange(0, WROWS)
    if W_STAGES == 1:
        rows, row_mask = _tile_rows(pid % TILES, j, BN, N, GATED, INTER)
        w_first = load_w_chunk(w_ptr, rows, row_mask & (pid < TILES * SPLIT), (pid // TILES) * KS, K, BK)
    if WAIT == 1:
        wait(wait_ptr, target, hang_log, WAIT_SPINS, HANG_SLOTS)
    elif WAIT == 2:
        tl.extra.cuda.gdc_wait()
    clock_start(clock_ptr, CLOCK_START, CLOCK, CLOCK_SLOTS)
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
            acc = gemv(x_cta, w_ptr, rows, row_mask, w_first, split * KS, M, K, KS, ROWS_P, BK, DOT_IEEE)
            _store_tile(acc, tile, split, out_ptr, bias_ptr, residual_ptr, RES_PARTS, N, M, ROWS_P, BN, HAS_BIAS,
                        HAS_RESIDUAL, GATED)
            rows, row_mask = _tile_rows((task + G) % TILES, j, BN, N, GATED, INTER)
            w_first = load_w_chunk(w_ptr, rows, row_mask & (task + G < TILES * SPLIT), ((task + G) // TILES) * KS,
                                   K, BK)
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
            w = load_w_chunk(w_ptr, rows, row_mask, k0, K, BK)
            acc += mm(x_chunk(x_cta, r, k0, M, K, BK).to(w.dtype), w, DOT_IEEE)
            if chunk == CHUNKS - 1:
                _store_tile(acc, tile, split, out_ptr, bias_ptr, residual_ptr, RES_PARTS, N, M, ROWS_P, BN, HAS_BIAS,
                            HAS_RESIDUAL, GATED)
                acc = tl.zeros([ROWS_P, WROWS], tl.float32)


@triton.jit
def norm_stage(pid, x_ptr, X_PARTS: tl.constexpr, norm_ptr, x_hat_ptr, M: tl.constexpr, K: tl.constexpr,
               K_P: tl.constexpr, EPS: tl.constexpr, G: tl.constexpr):
    """A stage of its own: x̂ = RMSNorm(x) of the band's M rows (x stored as X_PARTS split-K
    partials), row m on CTA m mod G, into the one copy every CTA of the next stage reads.

    Without it every CTA of a norm stage stages all M rows itself (``stage_activation``): each
    reads M × K × X_PARTS fp32 from L2, the whole grid M × K × X_PARTS × G. At 8 rows that is
    17 MB (Llama-3.2-1B) to 67 MB (Qwen3-8B) a norm stage, and leaving the staging out altogether
    made those steps 13–16% faster on the H200 (session 7). Here the rows are read once, for the
    price of a sync edge.
    """
    g = norm_weights(norm_ptr, K, K_P)
    for m in range(pid, M, G):
        normed_rows(x_ptr, X_PARTS, g, x_hat_ptr, m + tl.arange(0, 1), M, K, K_P, EPS, True)


@triton.jit
def leading_norm_stage(pid, x_ptr, X_PARTS: tl.constexpr, norm_ptr, x_hat_ptr, counters, stage_clock,
                       M: tl.constexpr, K: tl.constexpr, K_P: tl.constexpr, EPS: tl.constexpr, G: tl.constexpr,
                       RUN: tl.constexpr, PERSISTENT: tl.constexpr, PDL: tl.constexpr, CLOCK: tl.constexpr,
                       CLOCK_SLOTS: tl.constexpr):
    """A program's first stage when it is a norm stage (the layer's norm_qkv, the head's norm):
    ``norm_stage`` after the PDL wait for the previous launch (nothing it wrote is read before
    that launch has finished), clocked as stage 0 and, in persistent mode, signalled on edge 0.
    Returns the step's sync target (0 outside persistent mode), read before that first signal."""
    target = 0
    if RUN:
        if PDL:
            tl.extra.cuda.gdc_wait()
        clock_start(stage_clock, 1, CLOCK, CLOCK_SLOTS)
        norm_stage(pid, x_ptr, X_PARTS, norm_ptr, x_hat_ptr, M, K, K_P, EPS, G)
        clock_end(stage_clock, 2, CLOCK, CLOCK_SLOTS)
    if PERSISTENT:
        target = (step_epoch(counters, G) + 1) * G
        signal(counters)
    return target


@triton.jit
def layer_kernel(
    x_in, x_out, attn_norm, w_qkv, b_qkv, q_norm, k_norm, w_o, mlp_norm, w_gate_up, w_down,
    k_cache, v_cache, block_tables, bt_stride, context_lens, positions, rope,
    qkv, part_acc, part_ml, attn_out, x1, h, x_hat_qkv, x_hat_up, counters, hang_log, stage_clock,
    H: tl.constexpr, H_P: tl.constexpr, NQ: tl.constexpr, NKV: tl.constexpr, D: tl.constexpr, INTER: tl.constexpr,
    ROWS: tl.constexpr, TOKENS: tl.constexpr, ROWS_P: tl.constexpr, QP: tl.constexpr, TP: tl.constexpr,
    EPS: tl.constexpr, QK_NORM: tl.constexpr, QKV_BIAS: tl.constexpr, BS: tl.constexpr, KT: tl.constexpr,
    LONG_KT: tl.constexpr, KV_STAGES: tl.constexpr, LONG_KV_STAGES: tl.constexpr, KV_SUB: tl.constexpr,
    SPLITS: tl.constexpr,
    SP: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, QKV_SPLIT: tl.constexpr, O_SPLIT: tl.constexpr,
    DOWN_SPLIT: tl.constexpr, G: tl.constexpr,
    FIRST: tl.constexpr, LAST: tl.constexpr, PDL: tl.constexpr, DOT_IEEE: tl.constexpr, W_STAGES: tl.constexpr,
    NORM_ROWS: tl.constexpr, NORM_STAGES: tl.constexpr, WAIT_SPINS: tl.constexpr, HANG_SLOTS: tl.constexpr,
    CLOCK: tl.constexpr, CLOCK_SLOTS: tl.constexpr,
):
    """One decoder layer: stages FIRST..LAST (see the module docstring).

    qkv, o and down may be split over K (QKV_SPLIT, O_SPLIT, DOWN_SPLIT): qkv is then stored as
    QKV_SPLIT partials, x1 as O_SPLIT partials, and x_in and x_out — the hidden state between
    layers — as DOWN_SPLIT partials.

    With NORM_STAGES the two RMSNorms are stages of their own (``norm_stage``) before qkv and up,
    which then stream the one shared x̂ instead of each CTA staging its own: the stages are then
    0 norm_qkv, 1 qkv, 2 attn, 3 combine, 4 o, 5 norm_up, 6 up, 7 down. Stage k's sync edge is
    counter k (signalled after it, waited on before stage k + 1); its clock slots 1 + 2k, 2 + 2k.
    """
    M: tl.constexpr = ROWS * TOKENS
    NQKV: tl.constexpr = (NQ + 2 * NKV) * D
    PERSISTENT: tl.constexpr = FIRST < LAST
    N_QKV: tl.constexpr = 1 if NORM_STAGES else 0  # the stage indexes
    N_ATTN: tl.constexpr = N_QKV + 1
    N_COMBINE: tl.constexpr = N_QKV + 2
    N_O: tl.constexpr = N_QKV + 3
    N_UP: tl.constexpr = N_QKV + (5 if NORM_STAGES else 4)
    N_DOWN: tl.constexpr = N_UP + 1
    # qkv waits for norm_qkv on the edge, or without a norm stage for the previous launch (PDL)
    QKV_WAIT: tl.constexpr = (1 if PERSISTENT else 0) if NORM_STAGES else (2 if PDL else 0)
    pid = tl.program_id(0)
    target = 0
    if NORM_STAGES:  # norm_qkv
        target = leading_norm_stage(pid, x_in, DOWN_SPLIT, attn_norm, x_hat_qkv, counters, stage_clock, M, H, H_P, EPS,
                                    G, FIRST <= 0 and LAST >= 0, PERSISTENT, PDL, CLOCK, CLOCK_SLOTS)
    if FIRST <= N_QKV and LAST >= N_QKV:
        # With PDL this launch may start while the previous layer drains (where its CTAs fit
        # beside the previous layer's): it reads nothing the previous layer wrote before
        # griddepcontrol.wait (with the register double-buffer, its first weight chunk is loaded
        # before it). After a norm stage, qkv streams its x̂ (x_in's norm stage did the PDL wait).
        gemv_stage(pid, x_hat_qkv if NORM_STAGES else x_in, 1 if NORM_STAGES else DOWN_SPLIT, attn_norm, x_hat_qkv,
                   w_qkv, qkv, b_qkv, x_in, DOWN_SPLIT, counters + max(N_QKV - 1, 0), target, hang_log, stage_clock,
                   1 + 2 * N_QKV, N=NQKV, K=H, K_P=H_P, M=M, ROWS_P=ROWS_P, BN=BN, BK=BK, SPLIT=QKV_SPLIT, G=G,
                   EPS=EPS, NORM=not NORM_STAGES, HAS_BIAS=QKV_BIAS, HAS_RESIDUAL=False, GATED=False, INTER=0,
                   WAIT=QKV_WAIT, DOT_IEEE=DOT_IEEE, W_STAGES=W_STAGES, NORM_ROWS=NORM_ROWS, WAIT_SPINS=WAIT_SPINS,
                   HANG_SLOTS=HANG_SLOTS, CLOCK=CLOCK, CLOCK_SLOTS=CLOCK_SLOTS)
        clock_end(stage_clock, 2 + 2 * N_QKV, CLOCK, CLOCK_SLOTS)
    if PERSISTENT:
        if not NORM_STAGES:
            target = (step_epoch(counters, G) + 1) * G
        signal(counters + N_QKV)
    if FIRST <= N_ATTN and LAST >= N_ATTN:
        ATTN_TASKS: tl.constexpr = ROWS * NKV * SPLITS
        # What the CTA's first task reads besides qkv (its row's context and positions, the cached
        # K/V it starts with) does not depend on the qkv stage: those loads go out before the
        # wait, and each task loads the next one's as it ends.
        ctx, q_pos, n_pos, k_first, v_first, in_first = _task_inputs(
            pid, k_cache, v_cache, block_tables, bt_stride, context_lens, positions, ATTN_TASKS, NQ, NKV, D, TOKENS,
            SPLITS, BS, KT, LONG_KT, QP, TP)
        if PERSISTENT:
            wait(counters + N_ATTN - 1, target, hang_log, WAIT_SPINS, HANG_SLOTS)
        clock_start(stage_clock, 1 + 2 * N_ATTN, CLOCK, CLOCK_SLOTS)
        # num_stages=1: the next task's inputs are already loaded a task ahead; the pipeliner would
        # move the context-length load into shared memory, where C4 cannot follow it to the stores.
        for task in tl.range(pid, ATTN_TASKS, G, num_stages=1):
            _attn_task(task, ctx, q_pos, n_pos, k_first, v_first, in_first, qkv, QKV_SPLIT, rope, q_norm, k_norm,
                       k_cache, v_cache, block_tables, bt_stride, part_acc, part_ml, M, NQ, NKV, D, TOKENS, SPLITS, BS,
                       KT, LONG_KT, KV_STAGES, LONG_KV_STAGES, KV_SUB, QP, TP, QK_NORM, EPS, DOT_IEEE)
            ctx, q_pos, n_pos, k_first, v_first, in_first = _task_inputs(
                task + G, k_cache, v_cache, block_tables, bt_stride, context_lens, positions, ATTN_TASKS, NQ, NKV, D,
                TOKENS, SPLITS, BS, KT, LONG_KT, QP, TP)
        clock_end(stage_clock, 2 + 2 * N_ATTN, CLOCK, CLOCK_SLOTS)
        if PERSISTENT:
            signal(counters + N_ATTN)
    if FIRST <= N_COMBINE and LAST >= N_COMBINE:
        if PERSISTENT:
            wait(counters + N_COMBINE - 1, target, hang_log, WAIT_SPINS, HANG_SLOTS)
        clock_start(stage_clock, 1 + 2 * N_COMBINE, CLOCK, CLOCK_SLOTS)
        for task in range(pid, M * NQ, G):
            _combine_task(task, part_acc, part_ml, attn_out, NQ, D, SPLITS, SP)
        clock_end(stage_clock, 2 + 2 * N_COMBINE, CLOCK, CLOCK_SLOTS)
        if PERSISTENT:
            signal(counters + N_COMBINE)
    if FIRST <= N_O and LAST >= N_O:
        gemv_stage(pid, attn_out, 1, attn_norm, x_hat_qkv, w_o, x1, b_qkv, x_in, DOWN_SPLIT,
                   counters + N_O - 1, target, hang_log, stage_clock, 1 + 2 * N_O,
                   N=H, K=NQ * D, K_P=H_P, M=M, ROWS_P=ROWS_P, BN=BN, BK=BK, SPLIT=O_SPLIT, G=G, EPS=EPS, NORM=False,
                   HAS_BIAS=False, HAS_RESIDUAL=True, GATED=False, INTER=0, WAIT=1 if PERSISTENT else 0,
                   DOT_IEEE=DOT_IEEE, W_STAGES=W_STAGES, NORM_ROWS=NORM_ROWS, WAIT_SPINS=WAIT_SPINS, HANG_SLOTS=HANG_SLOTS,
                   CLOCK=CLOCK, CLOCK_SLOTS=CLOCK_SLOTS)
        clock_end(stage_clock, 2 + 2 * N_O, CLOCK, CLOCK_SLOTS)
        if PERSISTENT:
            signal(counters + N_O)
    if NORM_STAGES and FIRST <= N_UP - 1 and LAST >= N_UP - 1:  # norm_up
        if PERSISTENT:
            wait(counters + N_UP - 2, target, hang_log, WAIT_SPINS, HANG_SLOTS)
        clock_start(stage_clock, 2 * N_UP - 1, CLOCK, CLOCK_SLOTS)
        norm_stage(pid, x1, O_SPLIT, mlp_norm, x_hat_up, M, H, H_P, EPS, G)
        clock_end(stage_clock, 2 * N_UP, CLOCK, CLOCK_SLOTS)
        if PERSISTENT:
            signal(counters + N_UP - 1)
    if FIRST <= N_UP and LAST >= N_UP:
        gemv_stage(pid, x_hat_up if NORM_STAGES else x1, 1 if NORM_STAGES else O_SPLIT, mlp_norm, x_hat_up, w_gate_up,
                   h, b_qkv, x1, O_SPLIT, counters + N_UP - 1, target, hang_log, stage_clock, 1 + 2 * N_UP,
                   N=INTER, K=H, K_P=H_P, M=M, ROWS_P=ROWS_P, BN=BN, BK=BK, SPLIT=1, G=G, EPS=EPS,
                   NORM=not NORM_STAGES, HAS_BIAS=False, HAS_RESIDUAL=False, GATED=True, INTER=INTER,
                   WAIT=1 if PERSISTENT else 0, DOT_IEEE=DOT_IEEE, W_STAGES=W_STAGES, NORM_ROWS=NORM_ROWS,
                   WAIT_SPINS=WAIT_SPINS, HANG_SLOTS=HANG_SLOTS, CLOCK=CLOCK, CLOCK_SLOTS=CLOCK_SLOTS)
        clock_end(stage_clock, 2 + 2 * N_UP, CLOCK, CLOCK_SLOTS)
        if PERSISTENT:
            signal(counters + N_UP)
    if FIRST <= N_DOWN and LAST >= N_DOWN:
        if PDL:
            tl.extra.cuda.gdc_launch_dependents()
        gemv_stage(pid, h, 1, mlp_norm, x_hat_up, w_down, x_out, b_qkv, x1, O_SPLIT,
                   counters + N_DOWN - 1, target, hang_log, stage_clock, 1 + 2 * N_DOWN,
                   N=H, K=INTER, K_P=H_P, M=M, ROWS_P=ROWS_P, BN=BN, BK=BK, SPLIT=DOWN_SPLIT, G=G, EPS=EPS,
                   NORM=False, HAS_BIAS=False, HAS_RESIDUAL=True, GATED=False, INTER=0,
                   WAIT=1 if PERSISTENT else 0, DOT_IEEE=DOT_IEEE, W_STAGES=W_STAGES, NORM_ROWS=NORM_ROWS,
                   WAIT_SPINS=WAIT_SPINS, HANG_SLOTS=HANG_SLOTS, CLOCK=CLOCK, CLOCK_SLOTS=CLOCK_SLOTS)
        clock_end(stage_clock, 2 + 2 * N_DOWN, CLOCK, CLOCK_SLOTS)
