"""The streaming executor's routed MLP (``compiler/ops/moe.py``): routing, the experts' gate/up and
down, with the experts' weights streamed through the ring once routing is known.

The math, tasks and regions are the Triton executor's (``kernels/moe.py``). What changes is who
knows the routing when. An expert's weights are what the band's rows chose, so the loader cannot
walk them before routing; it walks the attention half's and the router's units, then waits on
the CTA's ``routed_bar`` mbarrier. The compute warps route the band's rows after experts_up's wait
(the router's logits), write the step's slot table (``slot_table``: the slots' experts in expert
order, -1 past them) into shared memory, and arrive on ``routed_bar``; from then on both sides walk
the same routing-dependent units, the loader ahead of the compute warps: experts_up's, then
experts_down's, whose weights are landing while the compute warps wait on the edge between the
two ops. The mbarrier is used once a launch (phase 0).

- **experts_up**: task t = (slot t div TILES, tile t mod TILES) of TN = BN/2 output rows, on CTA
  t mod G. Its unit of a K chunk is the slot's expert's TN gate rows above the same TN up rows
  (a dense gated GEMV's halves), copied by TMA from the gate|up stack seen as [E · 2·INTER, K]:
  the expert's gate rows from e · 2·INTER, its up rows INTER further. A tile running past INTER
  reads the next rows of the stack into output rows that are never stored.
- **experts_down**: task (tile, split) as a dense split-K GEMV's, over the slots' concatenated
  columns (``kernels/moe.experts_down_op`` says how the chunks fall to the splits); a unit is the
  expert's BN rows of one K chunk, from the down stack seen as [E · N, INTER]. A chunk past the
  step's slots is no unit: both sides skip it, so a task streams only what routing chose.

The activation chunks (x̂_up, then h) come through the activation ring from global memory, as a
dense GEMV's (``gemv.py``), through L2 only.

An FP8 checkpoint's experts (QUANT) stream as E4M3 units, multiplied as a dense FP8 GEMV's are
(``gemv._consume_scaled``: the activation chunk widened once to f16 · 2⁻⁸, each scale block's
columns a product of their own, scaled into the accumulator). A unit's scales are the chosen
expert's own (``_expert_scales``: its slot's expert from the table, its rows' block, its chunk's
column blocks), loaded an iteration ahead as a dense GEMV's are. A unit's rows lie in one scale
block: experts_up's halves are TN rows at a multiple of TN, of an expert whose gate and up rows
are whole blocks (the recipe's rule), and experts_down's BN rows divide the block (the tiling's).
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy
from triton.experimental.gluon.language.nvidia.hopper import mbarrier

from .attention import _parts
from .gemv import X_SCALE, _consume, _consume_scaled, _gated_rows, _load_unit, _store_tile, _widen_x, load_halves
from .layouts import cols_layout, mma_rows, operand, rows_layout, vector_layout


@gluon.jit
def _add(a, b):
    return a + b


@gluon.jit
def _route(logits_ptr, L_PARTS: gl.constexpr, context_lens_ptr, M: gl.constexpr, R: gl.constexpr,
           TOKENS: gl.constexpr, E: gl.constexpr, E_P: gl.constexpr, TOPK: gl.constexpr, NORMALIZE: gl.constexpr,
           SLOTS_P: gl.constexpr, layout: gl.constexpr, table_layout: gl.constexpr):
    """Each token row's routing as ``kernels/moe.route`` takes it (its top TOPK logits, ties to the
    lower expert; softmax weights, renormalized with NORMALIZE; dead and padding rows choose
    nothing), for R rows (M of them the band's): (weight [R, E_P] in ``layout``, the slot table
    [SLOTS_P] along ``table_layout``'s columns: the chosen experts in expert order, -1 past them)."""
    r = gl.arange(0, R, layout=gl.SliceLayout(1, layout))
    e = gl.arange(0, E_P, layout=gl.SliceLayout(0, layout))
    ctx = gl.load(context_lens_ptr + r // TOKENS, mask=r < M, other=0)
    live = (r < M) & (ctx > 0)
    valid = live[:, None] & (e[None, :] < E)
    logits = _parts(logits_ptr + r[:, None] * E + e[None, :], valid, L_PARTS, M * E)
    logits = gl.where(valid, logits, float("-inf"))
    chosen = gl.zeros([R, E_P], gl.int32, layout)
    rest = logits
    for _ in gl.static_range(TOPK):
        best = gl.max(rest, axis=1)
        first = gl.min(gl.where(rest == best[:, None], e[None, :], E_P), axis=1)
        pick = (e[None, :] == first[:, None]) & live[:, None]
        chosen = gl.where(pick, 1, chosen)
        rest = gl.where(pick, float("-inf"), rest)
    top = gl.max(logits, axis=1)
    p = gl.where(valid, gl.exp(logits - gl.where(live, top, 0.0)[:, None]), 0.0)
    if NORMALIZE:
        total = gl.sum(gl.where(chosen > 0, p, 0.0), axis=1)
    else:
        total = gl.sum(p, axis=1)
    weight = gl.where(chosen > 0, p / gl.where(total > 0, total, 1.0)[:, None], 0.0)

    # [E_P]: an expert some row chose (scanned in a layout of its own: a slice of a 2-D layout is
    # not one Triton's scan lowers)
    used = gl.convert_layout(gl.max(chosen, axis=0), gl.BlockedLayout([1], [32], [gl.num_warps()], [0]))
    slot_of = gl.associative_scan(used, 0, _add) - 1  # its slot: the chosen experts in expert order
    n = gl.sum(used, axis=0)
    used = gl.convert_layout(used, gl.SliceLayout(1, table_layout))
    slot_of = gl.convert_layout(slot_of, gl.SliceLayout(1, table_layout))
    e_t = gl.arange(0, E_P, layout=gl.SliceLayout(1, table_layout))
    s = gl.arange(0, SLOTS_P, layout=gl.SliceLayout(0, table_layout))
    table = gl.sum(gl.where((slot_of[:, None] == s[None, :]) & (used[:, None] > 0), e_t[:, None], 0), axis=0)
    return weight, gl.where(s < n, table, -1)


@gluon.jit
def _slots(slot_table, SLOTS_P: gl.constexpr, layout: gl.constexpr):
    """The step's slot table from shared memory ([SLOTS_P] in ``layout``) and its slots' count."""
    table = slot_table.load(layout)
    return table, gl.sum((table >= 0).to(gl.int32), axis=0)


@gluon.jit
def _expert(table, slot, s):
    """The expert of ``slot`` (``s``: the table's indices, in its layout)."""
    return gl.sum(gl.where(s == slot, table, 0), axis=0)


@gluon.jit
def _expert_scales(scale_ptr, expert, row, k0, live, ROWS: gl.constexpr, K: gl.constexpr, BK: gl.constexpr,
                   QBN: gl.constexpr, QBK: gl.constexpr, layout: gl.constexpr):
    """The scales of a unit of ``expert``'s rows from ``row`` (one scale block's), columns [k0,
    k0 + BK): [BK // QBK], one a scale block (0 past K, or where not ``live``), times 2⁸ for the
    f16 activations' 2⁻⁸; the stack's scales are [⌈ROWS/QBN⌉, ⌈K/QBK⌉] an expert."""
    SC: gl.constexpr = (K + QBK - 1) // QBK
    base = scale_ptr + expert.to(gl.int64) * (((ROWS + QBN - 1) // QBN) * SC)
    k = k0 + gl.arange(0, BK // QBK, layout=layout) * QBK
    return gl.load(base + (row // QBN) * SC + k // QBK, mask=(k < K) & live, other=0.0) / X_SCALE


@gluon.jit
def _expert_column(routing_weights, expert, layout: gl.constexpr):
    """The band's rows' routing weights of ``expert`` ([rows] in ``layout``): its row of the
    routing's [experts, rows] shared memory (stored row-major, unswizzled: seen as rows of a
    vector, one indexes it)."""
    rows_of: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [0])
    return routing_weights._reinterpret(gl.float32, routing_weights.shape, rows_of).index(expert).load(layout)


@gluon.jit
def _widened(xring, it, XD: gl.constexpr, x_layout: gl.constexpr):
    """Iteration it's landed activation chunk, widened into the ring's last slot as the f16 the FP8
    product takes (once every thread's copy is in and every thread is past iteration it − 1)."""
    async_copy.wait_group(XD - 2)
    gl.thread_barrier()
    _widen_x(xring.index(it % XD), xring.index(XD), x_layout)
    gl.thread_barrier()


@gluon.jit
def load_experts_up(pid, i, ring, ready, empty, slot_table, routed_bar, routing_weights, w_ptr, INTER: gl.constexpr,
                    K: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr, SLOTS_P: gl.constexpr, G: gl.constexpr):
    """The loader's walk of experts_up, once the compute warps have routed (``routed``): every
    unit of the CTA's (slot, tile) tasks, K chunk by chunk. ``w_ptr`` is the TMA descriptor of
    the gate|up stack as [E · 2·INTER, K] ([BN/2, BK] boxes)."""
    TN: gl.constexpr = BN // 2
    TILES: gl.constexpr = (INTER + TN - 1) // TN
    CHUNKS: gl.constexpr = (K + BK - 1) // BK
    lanes: gl.constexpr = gl.BlockedLayout([1], [32], [gl.num_warps()], [0])
    mbarrier.wait(routed_bar, 0)
    table, n = _slots(slot_table, SLOTS_P, lanes)
    s = gl.arange(0, SLOTS_P, layout=lanes)
    for task in range(pid, n * TILES, G):
        gate_row = _expert(table, task // TILES, s) * (2 * INTER) + (task % TILES) * TN
        for c in range(CHUNKS):
            i = load_halves(i, ring, ready, empty, w_ptr, gate_row, w_ptr, gate_row + INTER, c * BK)
    return i


@gluon.jit
def load_experts_down(pid, i, ring, ready, empty, slot_table, routed_bar, routing_weights, w_ptr, N: gl.constexpr,
                      INTER: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr, SPLIT: gl.constexpr, SLOTS_P: gl.constexpr,
                      G: gl.constexpr):
    """The loader's walk of experts_down: each of the CTA's (tile, split) tasks' chunks that lie in
    the step's slots, one unit each. ``w_ptr`` is the TMA descriptor of the down stack as
    [E · N, INTER] ([BN, BK] boxes)."""
    TILES: gl.constexpr = (N + BN - 1) // BN
    CH: gl.constexpr = (INTER + BK - 1) // BK
    lanes: gl.constexpr = gl.BlockedLayout([1], [32], [gl.num_warps()], [0])
    mbarrier.wait(routed_bar, 0)  # passed already in experts_up's walk: phase 0 is complete
    table, n = _slots(slot_table, SLOTS_P, lanes)
    s = gl.arange(0, SLOTS_P, layout=lanes)
    total = n * CH
    per = gl.maximum(gl.cdiv(total, SPLIT), 1)
    for task in range(pid, TILES * SPLIT, G):
        first = (task // TILES) * per
        for c in range(first, gl.minimum(first + per, total)):
            row = _expert(table, c // CH, s) * N + (task % TILES) * BN
            i = _load_unit(i, ring, ready, empty, w_ptr, row, (c % CH) * BK)
    return i


@gluon.jit
def _copy_chunk(slot, base, row_stride: gl.constexpr, k, k_end: gl.constexpr, live, xr, M: gl.constexpr):
    """Start the copy of an activation chunk, rows xr of ``base`` (``row_stride`` apart), columns
    k, into ``slot``; rows past M, columns past k_end and a chunk not ``live`` copy zeros."""
    mask = (xr[:, None] < M) & (k[None, :] < k_end) & live
    async_copy.async_copy_global_to_shared(slot, base + xr[:, None] * row_stride + k[None, :], mask=mask,
                                           cache_modifier=".cg")


@gluon.jit
def _x_chunk(xring, it, XD: gl.constexpr, b_layout: gl.constexpr):
    """Iteration it's landed activation chunk as the product's two K halves (once every thread's
    copy of it is in, and every thread is past iteration it − 1)."""
    BK: gl.constexpr = xring.shape[2]
    async_copy.wait_group(XD - 2)
    gl.thread_barrier()
    chunk = xring.index(it % XD)
    return (chunk.slice(0, BK // 2, 1).permute([1, 0]).load(b_layout),
            chunk.slice(BK // 2, BK // 2, 1).permute([1, 0]).load(b_layout))


@gluon.jit
def _up_scales(it, total, pid, table, s, scale_ptr, INTER: gl.constexpr, K: gl.constexpr, TN: gl.constexpr,
               BK: gl.constexpr, CHUNKS: gl.constexpr, TILES: gl.constexpr, G: gl.constexpr, QBN: gl.constexpr,
               QBK: gl.constexpr, layout: gl.constexpr):
    """The scales of experts_up's iteration ``it``'s unit: (its gate half's, its up half's, INTER
    rows further down its expert's gate|up stack); 0 past the ``total`` iterations."""
    task = pid + (it // CHUNKS) * G
    expert = _expert(table, task // TILES, s)
    row, k0, live = (task % TILES) * TN, (it % CHUNKS) * BK, it < total
    return (_expert_scales(scale_ptr, expert, row, k0, live, 2 * INTER, K, BK, QBN, QBK, layout),
            _expert_scales(scale_ptr, expert, row + INTER, k0, live, 2 * INTER, K, BK, QBN, QBK, layout))


@gluon.jit
def stream_experts_up(pid, i, ring, ready, empty, xring, slot_table, routed_bar, routing_weights, logits_ptr,
                      L_PARTS: gl.constexpr, context_lens_ptr, M: gl.constexpr, TOKENS: gl.constexpr, E: gl.constexpr,
                      E_P: gl.constexpr, TOPK: gl.constexpr, NORMALIZE: gl.constexpr, SLOTS: gl.constexpr,
                      SLOTS_P: gl.constexpr, routed_ptr, x_ptr, scale_ptr, QUANT: gl.constexpr, QBN: gl.constexpr,
                      QBK: gl.constexpr, h_ptr, INTER: gl.constexpr, K: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr,
                      G: gl.constexpr):
    """The compute warps' side of experts_up (module docstring): route, hand the slots to the
    loader (CTA 0 also writes the step's record), then h[slot, :M, tile] = weight ·
    silu(x̂ · W_gateᵀ) · (x̂ · W_upᵀ) for the CTA's tasks. Returns the CTA's place in its stream."""
    WARPS: gl.constexpr = gl.num_warps()
    XD: gl.constexpr = xring.shape[0] - 1 if QUANT else xring.shape[0]  # QUANT: the last slot is the f16 chunk
    NP: gl.constexpr = xring.shape[1]
    TN: gl.constexpr = BN // 2
    TILES: gl.constexpr = (INTER + TN - 1) // TN
    CHUNKS: gl.constexpr = (K + BK - 1) // BK
    r_layout: gl.constexpr = rows_layout(NP, E_P, WARPS)
    t_layout: gl.constexpr = rows_layout(E_P, SLOTS_P, WARPS)
    weight, table = _route(logits_ptr, L_PARTS, context_lens_ptr, M, NP, TOKENS, E, E_P, TOPK, NORMALIZE, SLOTS_P,
                           r_layout, t_layout)
    s = gl.arange(0, SLOTS_P, layout=gl.SliceLayout(0, t_layout))
    n = gl.sum((table >= 0).to(gl.int32), axis=0)
    slot_table.store(table)
    # each expert's weights of the rows, for the tasks' epilogues: from shared memory, so the
    # routing holds no registers through the task loop
    routing_weights.store(gl.permute(weight, [1, 0]))
    if pid == 0:  # the step's record: how many slots, then their experts (-1 past them)
        gl.store(routed_ptr + 1 + s, table, mask=s < SLOTS)
        gl.store(routed_ptr, n)
    gl.thread_barrier()  # every thread's part of the table and the weights is in shared memory ...
    mbarrier.arrive(routed_bar)  # ... before the loader reads the table

    acc_layout: gl.constexpr = mma_rows(WARPS)
    a_layout: gl.constexpr = operand(0, acc_layout)
    b_layout: gl.constexpr = operand(1, acc_layout)
    x_layout: gl.constexpr = rows_layout(NP, BK, WARPS)
    out_layout: gl.constexpr = cols_layout(TN, NP, WARPS, 4)
    xr = gl.arange(0, NP, layout=gl.SliceLayout(1, x_layout))
    xk = gl.arange(0, BK, layout=gl.SliceLayout(0, x_layout))
    rows = gl.arange(0, TN, layout=gl.SliceLayout(1, out_layout))
    m = gl.arange(0, NP, layout=gl.SliceLayout(0, out_layout))
    total = gl.cdiv(gl.maximum(n * TILES - pid, 0), G) * CHUNKS
    for j in gl.static_range(XD - 1):
        _copy_chunk(xring.index(j), x_ptr, K, (j % CHUNKS) * BK + xk, K, j < total, xr, M)
        async_copy.commit_group()
    acc = gl.zeros([BN, NP], gl.float32, acc_layout)
    if QUANT:  # a unit's scales, an iteration ahead (their latency hides under a unit's product)
        s_layout: gl.constexpr = vector_layout(WARPS)
        scales, scales_up = _up_scales(0, total, pid, table, s, scale_ptr, INTER, K, TN, BK, CHUNKS, TILES, G, QBN,
                                       QBK, s_layout)
    for it in range(total):
        if QUANT:
            _widened(xring, it, XD, x_layout)
            next_scales, next_scales_up = _up_scales(it + 1, total, pid, table, s, scale_ptr, INTER, K, TN, BK, CHUNKS,
                                                     TILES, G, QBN, QBK, s_layout)
        else:
            xb_lo, xb_hi = _x_chunk(xring, it, XD, b_layout)
        ahead = it + XD - 1  # into the slot iteration it - 1 used, which every thread has read
        _copy_chunk(xring.index(ahead % XD), x_ptr, K, (ahead % CHUNKS) * BK + xk, K, ahead < total, xr, M)
        async_copy.commit_group()
        if QUANT:
            i, acc = _consume_scaled(i, ring, ready, empty, xring.index(XD), scales, scales_up, acc, QBK, True,
                                     acc_layout, s_layout)
            scales, scales_up = next_scales, next_scales_up
        else:
            i, acc = _consume(i, ring, ready, empty, xb_lo, xb_hi, acc, a_layout)
        if it % CHUNKS == CHUNKS - 1:
            task = pid + (it // CHUNKS) * G
            slot = task // TILES
            row_weight = _expert_column(routing_weights, _expert(table, slot, s), gl.SliceLayout(0, out_layout))
            h = _gated_rows(acc, out_layout) * row_weight[None, :]
            n_out = (task % TILES) * TN + rows
            gl.store(h_ptr + slot * M * INTER + m[None, :] * INTER + n_out[:, None], h.to(h_ptr.dtype.element_ty),
                     mask=(n_out[:, None] < INTER) & (m[None, :] < M))
            acc = gl.zeros([BN, NP], gl.float32, acc_layout)
    async_copy.wait_group(0)
    gl.thread_barrier()  # the x ring is free for the next op
    return i


@gluon.jit
def _h_chunk(slot, h_ptr, j, per, total, pid, xr, xk, M: gl.constexpr, INTER: gl.constexpr, BK: gl.constexpr,
             CH: gl.constexpr, TILES: gl.constexpr, G: gl.constexpr, iters):
    """Start the copy of experts_down's iteration j's chunk of h (its task's split's chunk j mod
    per of the slots' concatenated columns; zeros past the slots or past the CTA's iterations)."""
    task = pid + (j // per) * G
    c = (task // TILES) * per + j % per
    live = (c < total) & (j < iters)
    base = h_ptr + (c // CH) * M * INTER
    _copy_chunk(slot, base, INTER, (c % CH) * BK + xk, INTER, live, xr, M)


@gluon.jit
def _down_scales(it, iters, per, total, pid, table, s, scale_ptr, N: gl.constexpr, INTER: gl.constexpr,
                 BN: gl.constexpr, BK: gl.constexpr, CH: gl.constexpr, TILES: gl.constexpr, G: gl.constexpr,
                 QBN: gl.constexpr, QBK: gl.constexpr, layout: gl.constexpr):
    """The scales of experts_down's iteration ``it``'s unit: its chunk c of the slots' concatenated
    columns (``_h_chunk``), the expert of slot c div CH, the task's tile's rows; 0 for a chunk
    past the slots or an iteration past ``iters``."""
    task = pid + (it // per) * G
    c = (task // TILES) * per + it % per
    return _expert_scales(scale_ptr, _expert(table, c // CH, s), (task % TILES) * BN, (c % CH) * BK,
                          (c < total) & (it < iters), N, INTER, BK, QBN, QBK, layout)


@gluon.jit
def stream_experts_down(pid, i, ring, ready, empty, xring, slot_table, routed_bar, routing_weights, h_ptr,
                        scale_ptr,
                        QUANT: gl.constexpr, QBN: gl.constexpr, QBK: gl.constexpr, residual_ptr,
                        RES_PARTS: gl.constexpr, out_ptr, N: gl.constexpr, INTER: gl.constexpr, M: gl.constexpr,
                        BN: gl.constexpr, BK: gl.constexpr, SPLIT: gl.constexpr, SLOTS_P: gl.constexpr,
                        G: gl.constexpr):
    """The compute warps' side of experts_down (module docstring): partial ``split`` of out[:M,
    tile] = Σ over the split's chunks of h · W_down[expert]ᵀ (split 0 adds x1), the chunks' units
    from the ring. Returns the CTA's place in its stream."""
    WARPS: gl.constexpr = gl.num_warps()
    XD: gl.constexpr = xring.shape[0] - 1 if QUANT else xring.shape[0]  # QUANT: the last slot is the f16 chunk
    NP: gl.constexpr = xring.shape[1]
    TILES: gl.constexpr = (N + BN - 1) // BN
    CH: gl.constexpr = (INTER + BK - 1) // BK
    acc_layout: gl.constexpr = mma_rows(WARPS)
    a_layout: gl.constexpr = operand(0, acc_layout)
    b_layout: gl.constexpr = operand(1, acc_layout)
    x_layout: gl.constexpr = rows_layout(NP, BK, WARPS)
    lanes: gl.constexpr = gl.BlockedLayout([1], [32], [WARPS], [0])
    table, n = _slots(slot_table, SLOTS_P, lanes)
    total = n * CH
    per = gl.maximum(gl.cdiv(total, SPLIT), 1)
    xr = gl.arange(0, NP, layout=gl.SliceLayout(1, x_layout))
    xk = gl.arange(0, BK, layout=gl.SliceLayout(0, x_layout))
    iters = gl.cdiv(gl.maximum(TILES * SPLIT - pid, 0), G) * per
    for j in gl.static_range(XD - 1):
        _h_chunk(xring.index(j), h_ptr, j, per, total, pid, xr, xk, M, INTER, BK, CH, TILES, G, iters)
        async_copy.commit_group()
    acc = gl.zeros([BN, NP], gl.float32, acc_layout)
    if QUANT:  # a unit's scales, an iteration ahead
        s_layout: gl.constexpr = vector_layout(WARPS)
        s = gl.arange(0, SLOTS_P, layout=lanes)
        scales = _down_scales(0, iters, per, total, pid, table, s, scale_ptr, N, INTER, BN, BK, CH, TILES, G, QBN, QBK,
                              s_layout)
    for it in range(iters):
        if QUANT:
            _widened(xring, it, XD, x_layout)
            next_scales = _down_scales(it + 1, iters, per, total, pid, table, s, scale_ptr, N, INTER, BN, BK, CH, TILES,
                                       G, QBN, QBK, s_layout)
        else:
            xb_lo, xb_hi = _x_chunk(xring, it, XD, b_layout)
        ahead = it + XD - 1
        _h_chunk(xring.index(ahead % XD), h_ptr, ahead, per, total, pid, xr, xk, M, INTER, BK, CH, TILES, G, iters)
        async_copy.commit_group()
        task = pid + (it // per) * G
        if (task // TILES) * per + it % per < total:  # a chunk in the step's slots: the loader streamed its unit
            if QUANT:
                i, acc = _consume_scaled(i, ring, ready, empty, xring.index(XD), scales, scales, acc, QBK, False,
                                         acc_layout, s_layout)
            else:
                i, acc = _consume(i, ring, ready, empty, xb_lo, xb_hi, acc, a_layout)
        if QUANT:
            scales = next_scales
        if it % per == per - 1:
            _store_tile(acc, acc, task, out_ptr, out_ptr, out_ptr, out_ptr, residual_ptr, RES_PARTS, N, M, TILES, BN,
                        False, True, False, False, 1, 0, 0, cols_layout(BN, NP, WARPS, 4))
            acc = gl.zeros([BN, NP], gl.float32, acc_layout)
    async_copy.wait_group(0)
    gl.thread_barrier()  # the x ring is free for the next op
    return i
