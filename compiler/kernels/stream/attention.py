"""The streaming executor's attention op: split-KV decode attention over the paged KV cache, with
the layer's q/k norm, RoPE and KV append; task (row, KV head, split) → partials (acc, max, sum).

The math, tasks and regions are the Triton executor's (``kernels/attention.py``); the products
are the tensor cores' (mma, the warps side by side across a tile's tokens and head_dim). The
cached K and V come through the weight ring: a split's tiles of KT tokens are units of the CTA's
stream like a GEMV's weight chunks, one unit a tile (its K rows, then its V rows), which the
loader (``load_kv``) copies page by page by TMA from the block tables and context lengths, ahead
of the op's wait and of the qkv weights' last units: the cache below a step's append positions
was written by earlier steps, so nothing in the launch writes what the loader reads. A tile's
pages past its split are copies of the split's last page, so every unit moves the same bytes,
and its tokens outside the context are masked in the product (a stale slot may hold NaN). What a
task reads that qkv does not write — its row's context length and positions — is its prefetch,
loaded before the op's wait.
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import mma_v2
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma

from .layouts import batched_smem, mma_batched, mma_cols, operand, rows_layout, tile_smem


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
def _in_context(p0, t, end, cached, seen, BS: gl.constexpr, WINDOW: gl.constexpr):
    """Which of a tile's token offsets t (pages from p0) are cached tokens of the split (with a
    sliding window, from ``seen``, the first position any query of the row sees: the slots before
    it are not read into the arithmetic, since an engine may have reused them)."""
    page = p0 + t // BS
    token = page * BS + t % BS
    ok = (page < end) & (token < cached)
    if WINDOW > 0:
        ok = ok & (token >= seen)
    return ok


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
def _warp_softmax_step(scores, v_b, m_i, l_i, acc, a_layout: gl.constexpr):
    """``_softmax_step`` batched over the warps: scores [W, QP, T], V [W, T, D], each warp's
    own state (m_i, l_i [W, QP], acc [W, QP, D]); every reduction stays inside a warp."""
    m_new = gl.maximum(m_i, gl.max(scores, axis=2))
    m_safe = gl.where(m_new == float("-inf"), 0.0, m_new)
    alpha = gl.exp(m_i - m_safe)
    p = gl.exp(scores - m_safe[:, :, None])
    l_i = l_i * alpha + gl.sum(p, axis=2)
    acc = mma_v2(gl.convert_layout(p.to(v_b.dtype), a_layout), v_b, acc * alpha[:, :, None])
    return m_new, l_i, acc


@gluon.jit
def _merge_warps(m_w, l_w, acc_w, layout: gl.constexpr):
    """The warps' softmax states merged into one ([QP], [QP], [QP, D] in ``layout``)."""
    m = gl.max(m_w, axis=0)
    scale = gl.exp(m_w - gl.where(m == float("-inf"), 0.0, m)[None, :])
    l_i = gl.sum(l_w * scale, axis=0)
    acc = gl.sum(acc_w * scale[:, :, None], axis=0)
    return (gl.convert_layout(m, gl.SliceLayout(1, layout)), gl.convert_layout(l_i, gl.SliceLayout(1, layout)),
            gl.convert_layout(acc, layout))


@gluon.jit
def _to_warps(x, WARPS: gl.constexpr, layout: gl.constexpr):
    """A 2-D tensor as every warp's batch of a batched product's operand (``layout``)."""
    spread: gl.constexpr = gl.BlockedLayout([1, 1, 8], [1, 4, 8], [WARPS, 1, 1], [2, 1, 0])
    x3 = gl.expand_dims(gl.convert_layout(x, gl.SliceLayout(0, spread)), 0)
    return gl.convert_layout(x3 + gl.zeros([WARPS, x.shape[0], x.shape[1]], x.dtype, spread), layout)


@gluon.jit
def _split_pages(ctx, s, TOKENS: gl.constexpr, SPLITS: gl.constexpr, BS: gl.constexpr, WINDOW: gl.constexpr):
    """A row of context ctx, split s: its cached tokens, the split's pages [first, end) and the
    row's first visible position ``seen``: every cached page, or with a sliding window those from
    the one holding the first query's first visible position (cached − WINDOW + 1)."""
    cached = gl.where(ctx > 0, ctx - TOKENS, 0)
    pages = gl.cdiv(cached, BS)
    seen = gl.maximum(cached - WINDOW + 1, 0) if WINDOW > 0 else 0
    per_split = gl.cdiv(pages - seen // BS, SPLITS)
    first = seen // BS + s * per_split
    return cached, first, gl.minimum(first + per_split, pages), seen


@gluon.jit
def _task_inputs(task, context_lens_ptr, positions_ptr, TASKS: gl.constexpr, NQ: gl.constexpr, NKV: gl.constexpr,
                 D: gl.constexpr, TOKENS: gl.constexpr, SPLITS: gl.constexpr, QP: gl.constexpr, TP: gl.constexpr):
    """What task ``task`` reads that qkv does not write: its row's context length, the positions of
    its query rows and of its own tokens. Past the tasks the row reads as dead (context 0)."""
    WARPS: gl.constexpr = gl.num_warps()
    GROUP: gl.constexpr = NQ // NKV
    q_layout: gl.constexpr = rows_layout(QP, D, WARPS)
    b = task // (SPLITS * NKV)
    ctx = gl.load(context_lens_ptr + b, mask=task < TASKS, other=0)
    i = gl.arange(0, QP, layout=gl.SliceLayout(1, q_layout))
    q_pos = gl.load(positions_ptr + b * TOKENS + i % TOKENS, mask=(i < GROUP * TOKENS) & (ctx > 0), other=0)
    jn = gl.arange(0, TP, layout=gl.SliceLayout(1, q_layout))
    n_pos = gl.load(positions_ptr + b * TOKENS + jn, mask=(jn < TOKENS) & (ctx > 0), other=0)
    return ctx, q_pos, n_pos


@gluon.jit
def _kv_unit(ring, D: gl.constexpr, KT: gl.constexpr, layout: gl.constexpr):
    """A ring slot seen as one KV tile: its KT K rows, then its KT V rows, D columns each, in the
    layout of the caches' TMA boxes (``tile_smem``: the swizzle of a D-wide row)."""
    return ring._reinterpret(gl.bfloat16, [2 * KT, D], layout)


@gluon.jit
def _tile_blocks(table, p0, end, STEP: gl.constexpr, layout: gl.constexpr):
    """The blocks of a tile's STEP pages from p0 (pages past the split's end: its last page's; a split
    with no pages reads its row's first entry, and copies nothing)."""
    j = gl.arange(0, STEP, layout=layout)
    return gl.load(table + gl.maximum(gl.minimum(p0 + j, end - 1), 0)), j


@gluon.jit
def load_kv(pid, i, ring, ready, empty, k_tiles, v_tiles, block_tables_ptr, bt_stride, context_lens_ptr,
            ROWS: gl.constexpr, NKV: gl.constexpr, D: gl.constexpr, TOKENS: gl.constexpr, SPLITS: gl.constexpr,
            BS: gl.constexpr, KT: gl.constexpr, WINDOW: gl.constexpr, G: gl.constexpr):
    """The loader's walk of the attention op: for each of the CTA's tasks, each KT-token tile of
    its split's pages, in the order the compute warps use them, one unit a tile. ``k_tiles`` and
    ``v_tiles`` are TMA descriptors of the caches as [blocks · BS, NKV · D] ([BS, D] boxes: a page
    of one KV head); a tile's pages past the split copy its last page again. The next tile's
    block numbers are loaded while the current tile's copies are issued, so the walk waits on
    the block table once a task, not once a tile."""
    SLOTS: gl.constexpr = ring.shape[0]
    STEP: gl.constexpr = KT // BS
    UNIT_BYTES: gl.constexpr = 2 * STEP * k_tiles.block_type.nbytes
    TASKS: gl.constexpr = ROWS * NKV * SPLITS
    lanes: gl.constexpr = gl.BlockedLayout([1], [32], [gl.num_warps()], [0])
    for task in range(pid, TASKS, G):
        b = task // (SPLITS * NKV)
        h = (task // SPLITS) % NKV
        ctx = gl.load(context_lens_ptr + b)
        cached, first, end, seen = _split_pages(ctx, task % SPLITS, TOKENS, SPLITS, BS, WINDOW)
        table = block_tables_ptr + b * bt_stride
        blocks, j = _tile_blocks(table, first, end, STEP, lanes)
        for p0 in range(first, end, STEP):
            following, j = _tile_blocks(table, p0 + STEP, end, STEP, lanes)
            slot = i % SLOTS
            mbarrier.wait(empty.index(slot), ((i // SLOTS) & 1) ^ 1)
            mbarrier.expect(ready.index(slot), UNIT_BYTES)
            unit = _kv_unit(ring.index(slot), D, KT, tile_smem(2 * KT, D))
            for page in gl.static_range(STEP):
                row = gl.sum(gl.where(j == page, blocks, 0), axis=0) * BS
                tma.async_copy_global_to_shared(k_tiles, [row, h * D], ready.index(slot), unit.slice(page * BS, BS))
                tma.async_copy_global_to_shared(v_tiles, [row, h * D], ready.index(slot),
                                                unit.slice(KT + page * BS, BS))
            blocks = following
            i += 1
    return i


@gluon.jit
def _attn_task(i, ring, ready, empty, task, ctx, q_pos, n_pos, qkv_ptr, QKV_PARTS: gl.constexpr, rope_ptr,
               q_norm_ptr, k_norm_ptr, k_cache_ptr, v_cache_ptr, block_tables_ptr, bt_stride, part_acc_ptr,
               part_ml_ptr, M: gl.constexpr, NQ: gl.constexpr, NKV: gl.constexpr, D: gl.constexpr,
               TOKENS: gl.constexpr, SPLITS: gl.constexpr, BS: gl.constexpr, KT: gl.constexpr, QP: gl.constexpr,
               TP: gl.constexpr, QK_NORM: gl.constexpr, EPS: gl.constexpr, WINDOW: gl.constexpr):
    """Task (row b, KV head h, split s): attention of the row's GQA group of query heads × tokens
    over the split's cached pages (the ring's units from ``i`` on), the last split also over the
    step's own tokens (causally); split 0 appends the step's K and V to the cache (a dead row
    stores nothing). With a sliding window, query row r sees the positions from
    q_pos[r] − WINDOW + 1 on. Returns the CTA's place in its stream past the task's tiles."""
    WARPS: gl.constexpr = gl.num_warps()
    SLOTS: gl.constexpr = ring.shape[0]
    GROUP: gl.constexpr = NQ // NKV
    NQKV: gl.constexpr = (NQ + 2 * NKV) * D
    STEP: gl.constexpr = KT // BS
    TW: gl.constexpr = KT // WARPS  # a warp's tokens of a tile
    q_layout: gl.constexpr = rows_layout(QP, D, WARPS)
    w_layout: gl.constexpr = mma_batched(WARPS)
    wa_layout: gl.constexpr = operand(0, w_layout)
    wb_layout: gl.constexpr = operand(1, w_layout)
    unit_smem: gl.constexpr = batched_smem(2 * WARPS, TW, D)
    b = task // (SPLITS * NKV)
    h = (task // SPLITS) % NKV
    s = task % SPLITS
    cached, first, end, seen = _split_pages(ctx, s, TOKENS, SPLITS, BS, WINDOW)
    live = ctx > 0
    kv_dtype: gl.constexpr = k_cache_ptr.dtype.element_ty

    # Query rows i = g·TOKENS + j: head h·GROUP + g, token j of row b.
    r = gl.arange(0, QP, layout=gl.SliceLayout(1, q_layout))
    q_valid = (r < GROUP * TOKENS) & live
    q_tok = b * TOKENS + r % TOKENS
    q = _rope_rows(qkv_ptr, QKV_PARTS, M * NQKV, q_tok * NQKV, (h * GROUP + r // TOKENS) * D, q_pos, rope_ptr,
                   q_norm_ptr, q_valid, D, QK_NORM, EPS, q_layout)
    q_s = (q * (1.0 / gl.sqrt(float(D)))).to(kv_dtype)
    q_w = _to_warps(q_s, WARPS, wa_layout)

    # The step's own tokens j' of row b: K (normed, rotated) and V, rounded as the cache stores them.
    jn = gl.arange(0, TP, layout=gl.SliceLayout(1, q_layout))
    n_valid = (jn < TOKENS) & live
    n_tok = b * TOKENS + jn
    k_new = _rope_rows(qkv_ptr, QKV_PARTS, M * NQKV, n_tok * NQKV, (NQ + h) * D + jn * 0, n_pos, rope_ptr,
                       k_norm_ptr, n_valid, D, QK_NORM, EPS, q_layout).to(kv_dtype)
    d = gl.arange(0, D, layout=gl.SliceLayout(0, q_layout))
    v_new = _parts(qkv_ptr + n_tok[:, None] * NQKV + (NQ + NKV + h) * D + d[None, :], n_valid[:, None], QKV_PARTS,
                   M * NQKV).to(kv_dtype)

    # The cached tiles: warp w takes tokens [w·TW, (w + 1)·TW) of every tile, with its own
    # softmax state, merged once after the walk; no cross-warp exchange a tile.
    m_w = gl.full([WARPS, QP], float("-inf"), gl.float32, gl.SliceLayout(2, w_layout))
    l_w = gl.zeros([WARPS, QP], gl.float32, gl.SliceLayout(2, w_layout))
    acc_w = gl.zeros([WARPS, QP, D], gl.float32, w_layout)
    ws = gl.arange(0, WARPS, layout=gl.SliceLayout(1, gl.SliceLayout(1, w_layout)))
    js = gl.arange(0, TW, layout=gl.SliceLayout(0, gl.SliceLayout(1, w_layout)))
    t_s = ws[:, None] * TW + js[None, :]  # [W, TW]: the scores' token offsets in a tile
    wv = gl.arange(0, WARPS, layout=gl.SliceLayout(1, gl.SliceLayout(2, wb_layout)))
    jv = gl.arange(0, TW, layout=gl.SliceLayout(0, gl.SliceLayout(2, wb_layout)))
    t_v = wv[:, None] * TW + jv[None, :]  # the values' token offsets
    if WINDOW > 0:  # each query row's first visible position, along the scores' query dimension
        lo_w = gl.convert_layout(q_pos - WINDOW + 1, gl.SliceLayout(0, gl.SliceLayout(2, w_layout)))
    if s == 0:  # append the new K/V (the walk reads only older positions); a dead row stores nothing
        table = block_tables_ptr + b * bt_stride
        page = gl.load(table + n_pos // BS, mask=n_valid, other=0).to(gl.int64)
        slot = (page * BS + n_pos % BS) * NKV + h
        gl.store(k_cache_ptr + slot[:, None] * D + d[None, :], k_new, mask=n_valid[:, None])
        gl.store(v_cache_ptr + slot[:, None] * D + d[None, :], v_new, mask=n_valid[:, None])
    for p0 in range(first, end, STEP):
        slot = i % SLOTS
        mbarrier.wait(ready.index(slot), (i // SLOTS) & 1)
        unit = ring.index(slot)._reinterpret(gl.bfloat16, [2 * WARPS, TW, D], unit_smem)
        k_b = unit.permute([0, 2, 1]).slice(0, WARPS).load(wb_layout)  # each warp's Kᵀ [D, TW]
        v_b = unit.slice(WARPS, WARPS).load(wb_layout)  # each warp's V [TW, D]
        fence_async_shared()  # the slot's reads (generic proxy) before the loader's next copy (async proxy)
        mbarrier.arrive(empty.index(slot))
        i += 1
        scores = mma_v2(q_w, k_b, gl.zeros([WARPS, QP, TW], gl.float32, w_layout))
        scores = gl.where(_in_context(p0, t_s, end, cached, seen, BS, WINDOW)[:, None, :], scores, float("-inf"))
        if WINDOW > 0:
            visible = gl.expand_dims(p0 * BS + t_s, 1) >= gl.expand_dims(gl.expand_dims(lo_w, 0), 2)
            scores = gl.where(visible, scores, float("-inf"))
        v_b = gl.where(_in_context(p0, t_v, end, cached, seen, BS, WINDOW)[:, :, None], v_b, 0.0)
        m_w, l_w, acc_w = _warp_softmax_step(scores, v_b, m_w, l_w, acc_w, wa_layout)

    acc_layout: gl.constexpr = mma_cols(WARPS)
    m_i, l_i, acc = _merge_warps(m_w, l_w, acc_w, acc_layout)

    i_s = gl.arange(0, QP, layout=gl.SliceLayout(1, acc_layout))
    if s == SPLITS - 1:  # the step's own tokens, causally
        a_layout: gl.constexpr = operand(0, acc_layout)
        b_layout: gl.constexpr = operand(1, acc_layout)
        q_a = gl.convert_layout(q_s, a_layout)
        scores = mma_v2(q_a, gl.convert_layout(gl.permute(k_new, [1, 0]), b_layout),
                        gl.zeros([QP, TP], gl.float32, acc_layout))
        jn_s = gl.arange(0, TP, layout=gl.SliceLayout(0, acc_layout))
        causal = (jn_s[None, :] <= (i_s % TOKENS)[:, None]) & (jn_s < TOKENS)[None, :] & live
        if WINDOW > 0:
            n_at = gl.convert_layout(n_pos, gl.SliceLayout(0, acc_layout))
            lo_at = gl.convert_layout(q_pos - WINDOW + 1, gl.SliceLayout(1, acc_layout))
            causal = causal & (n_at[None, :] >= lo_at[:, None])
        scores = gl.where(causal, scores, float("-inf"))
        m_i, l_i, acc = _softmax_step(scores, gl.convert_layout(v_new, b_layout), m_i, l_i, acc, a_layout)

    out = ((b * TOKENS + i_s % TOKENS) * NQ + h * GROUP + i_s // TOKENS) * SPLITS + s
    row_ok = i_s < GROUP * TOKENS
    d_s = gl.arange(0, D, layout=gl.SliceLayout(0, acc_layout))
    gl.store(part_acc_ptr + out[:, None] * D + d_s[None, :], acc, mask=row_ok[:, None])
    gl.store(part_ml_ptr + out * 2, m_i, mask=row_ok)
    gl.store(part_ml_ptr + out * 2 + 1, l_i, mask=row_ok)
    return i


@gluon.jit
def stream_attention_prefetch(pid, context_lens_ptr, positions_ptr, ROWS: gl.constexpr, NQ: gl.constexpr,
                              NKV: gl.constexpr, D: gl.constexpr, TOKENS: gl.constexpr, SPLITS: gl.constexpr,
                              QP: gl.constexpr, TP: gl.constexpr):
    """The CTA's first task's inputs that the qkv op does not write (``_task_inputs``)."""
    return _task_inputs(pid, context_lens_ptr, positions_ptr, ROWS * NKV * SPLITS, NQ, NKV, D, TOKENS, SPLITS, QP,
                        TP)


@gluon.jit
def stream_attention(pid, i, ring, ready, empty, xring, pre, qkv_ptr, QKV_PARTS: gl.constexpr, rope_ptr, q_norm_ptr,
                     k_norm_ptr, k_cache_ptr, v_cache_ptr, block_tables_ptr, bt_stride, context_lens_ptr,
                     positions_ptr, part_acc_ptr, part_ml_ptr, ROWS: gl.constexpr, NQ: gl.constexpr,
                     NKV: gl.constexpr, D: gl.constexpr, TOKENS: gl.constexpr, SPLITS: gl.constexpr,
                     BS: gl.constexpr, KT: gl.constexpr, QP: gl.constexpr, TP: gl.constexpr, QK_NORM: gl.constexpr,
                     EPS: gl.constexpr, WINDOW: gl.constexpr, G: gl.constexpr):
    """The compute warps' side of the attention op: the CTA's tasks, task t on CTA t mod G, their
    KV tiles from the ring (``load_kv``); ``pre`` is ``stream_attention_prefetch``'s. Returns the
    CTA's place in its stream."""
    TASKS: gl.constexpr = ROWS * NKV * SPLITS
    ctx, q_pos, n_pos = pre
    for task in range(pid, TASKS, G):
        i = _attn_task(i, ring, ready, empty, task, ctx, q_pos, n_pos, qkv_ptr, QKV_PARTS, rope_ptr, q_norm_ptr,
                       k_norm_ptr, k_cache_ptr, v_cache_ptr, block_tables_ptr, bt_stride, part_acc_ptr, part_ml_ptr,
                       ROWS * TOKENS, NQ, NKV, D, TOKENS, SPLITS, BS, KT, QP, TP, QK_NORM, EPS, WINDOW)
        ctx, q_pos, n_pos = _task_inputs(task + G, context_lens_ptr, positions_ptr, TASKS, NQ, NKV, D, TOKENS, SPLITS,
                                         QP, TP)
    return i
