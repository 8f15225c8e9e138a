"""The streaming GEMV: its weights stream through a shared-memory ring ahead of every wait.

A CTA's GEMV tasks are the Triton executor's (``kernels/gemv.py``), but for HALVES tiles, half as
tall (below): task t of an op is (output tile t mod TILES, K split t div TILES), on CTA
t mod G, and writes partial ``split`` of out ([SPLIT, M, N]; split 0 adds the bias and the
residual), or silu(gate)·up for a GATED op. What changes is where the weights come from.

The loader warp (``load_weights``) walks the CTA's tasks of every GEMV of the layer, in program
order, and copies each K chunk of each tile — a *unit*, [BN, BK] of the weight — into the next
slot of the ring by TMA, as soon as the compute warps have released the slot. Weights depend on
no activation, so nothing but the ring's size holds the loader back: while the compute warps
wait on a sync edge, the next op's weights are already landing. The weight is the engine's own
tensors, each with its own descriptor: SEGMENTS of them stacked by rows (q, k and v, the second
from row SEG1 and the third from SEG2), a tile inside one of them (the planner's BN divides
each), or, for a GATED tile, two units: its BN rows of ``w_gate`` and the same rows of ``w_up``;
or, with HALVES, one unit of two halves: BN/2 rows of ``w_gate`` above the same rows of ``w_up``,
so that a gated tile is BN/2 output rows. The planner takes halves where they balance the op
over the CTAs (``executor.gated_halves``): Qwen3-8B's 12 288 intermediate rows are 192 tiles of
64 on 132 CTAs (60 CTAs stream two while 72 idle, and down waits for the slowest), or 384 of 32
(no CTA streams more than 96 rows). The product is the same [BN, BK] unit a chunk either way;
with halves, silu(gate)·up pairs row r with row r + BN/2 in the epilogue.

The compute warps (``stream_gemv``) walk the same units in the same order: unit i sits in slot
i mod SLOTS, its copy complete when ``ready[slot]`` reaches phase (i div SLOTS) mod 2, and the
slot is handed back through ``empty[slot]`` once read. The product is the tensor cores' (mma,
16 rows a warp): accᵀ[BN, NP] += W_unit · x_chunkᵀ, x's M rows padded to NP ≥ 8 columns, each
half of the unit's K its own chain of MMAs (added after), so that two run side by side. The
activation chunks x[:, k0:k0 + BK] come from global memory (written by other CTAs, so loaded
after the op's wait, through L2 only: ``cp.async.cg``) into a small ring of their own, XD − 1
chunks ahead of the product, so a chunk's L2 round trip is paid once per op, not once per chunk.

A block-scaled FP8 weight (QUANT) streams as E4M3 units whose BK columns are whole QBK-column
scale blocks, and BN rows lie inside one QBN-row block: each (unit, scale block) has one fp32
scale (a unit of halves: its gate and up halves one each). The product is f16 × f16: sm_90
widens two E4M3 values to f16 in one instruction (``cvt.rn.f16x2.e4m3x2``; to bf16 it takes
five), exactly, since f16 holds every E4M3 value.
The activation chunk is widened once a CTA for all its units: after it lands, the threads write
it as f16 times 2⁻⁸ into the activation ring's last slot (exact for |x| in [2⁻⁶, 2²⁴), and below
2⁻⁶ off by at most 2⁻¹⁷, half the bf16 rounding that value already carries), and the 2⁸ goes
back in with the scale. Each scale block's columns are multiplied into a product of their own
and the product scaled into the accumulator, so the dequantization is one multiply per output
element and scale block, and the weight bytes that move are half of bf16's. A unit's scales
are loaded an iteration ahead, so their latency hides under the previous unit's product.
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy, mma_v2
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma

from .layouts import cols_layout, halves_layout, mma_rows, operand, rows_layout, tile_smem, vector_layout
from .rowwise import norm_weights, normed_row


@gluon.jit
def _as_unit(slot, BK: gl.constexpr):
    """A ring slot as a unit of BK columns: itself, or, where a unit is E4M3 and the weight bf16
    (a routed layer's router in an FP8 checkpoint's program), the slot's bytes as a bf16 [rows,
    BK] tile (half the E4M3 unit's columns), laid out as the weight's TMA box is (``tile_smem``)."""
    if slot.shape[1] == BK:
        return slot
    else:
        return slot._reinterpret(gl.bfloat16, [slot.shape[0], BK], tile_smem(slot.shape[0], BK))


@gluon.jit
def _load_unit(i, ring, ready, empty, w_ptr, row, col):
    """Unit i of the CTA's stream: weight rows [row, row + BN), columns [col, col + BK), into slot
    i mod SLOTS once the compute warps have released the slot's previous unit."""
    SLOTS: gl.constexpr = ring.shape[0]
    slot = i % SLOTS
    mbarrier.wait(empty.index(slot), ((i // SLOTS) & 1) ^ 1)
    mbarrier.expect(ready.index(slot), w_ptr.block_type.nbytes)
    tma.async_copy_global_to_shared(w_ptr, [row, col], ready.index(slot),
                                    _as_unit(ring.index(slot), w_ptr.block_type.shape[1]))
    return i + 1


@gluon.jit
def load_halves(i, ring, ready, empty, top_ptr, top_row, bottom_ptr, bottom_row, col):
    """Unit i of a gated op, two boxes of half a unit's rows: rows from ``top_row`` of ``top_ptr``
    (gate) above rows from ``bottom_row`` of ``bottom_ptr`` (up), columns [col, col + BK), into
    slot i mod SLOTS once it is free. A dense gated GEMV's halves are the same rows of two
    tensors; a routed expert's, two row blocks of one stack (``moe.py``)."""
    SLOTS: gl.constexpr = ring.shape[0]
    TN: gl.constexpr = ring.shape[1] // 2
    slot = i % SLOTS
    mbarrier.wait(empty.index(slot), ((i // SLOTS) & 1) ^ 1)
    mbarrier.expect(ready.index(slot), 2 * top_ptr.block_type.nbytes)
    unit = ring.index(slot)
    tma.async_copy_global_to_shared(top_ptr, [top_row, col], ready.index(slot), unit.slice(0, TN, 0))
    tma.async_copy_global_to_shared(bottom_ptr, [bottom_row, col], ready.index(slot), unit.slice(TN, TN, 0))
    return i + 1


@gluon.jit
def load_weights(pid, i, ring, ready, empty, w_ptr, w2_ptr, w3_ptr, N: gl.constexpr, K: gl.constexpr,
                 BN: gl.constexpr, BK: gl.constexpr, SPLIT: gl.constexpr, G: gl.constexpr, GATED: gl.constexpr,
                 HALVES: gl.constexpr, SEGMENTS: gl.constexpr, SEG1: gl.constexpr, SEG2: gl.constexpr):
    """The loader's walk of one GEMV op: every unit of the CTA's tasks, in the order the compute
    warps use them. ``w_ptr``, ``w2_ptr``, ``w3_ptr`` are the TMA descriptors ([BN, BK] blocks) of
    the weight's tensors (module docstring); ``i`` is the CTA's place in its stream (units so
    far); returns the next. Each branch arms and fills its own units, so every mbarrier is armed
    for exactly the copies that complete on it.

    One flat loop over the CTA's (task, K chunk) steps, as the compute warps' loop is: a loop of
    chunks inside a loop of tasks measured 0.5–0.6% slower at Llama-3.2-1B's 1-row step
    (docs/measurements/2026-12-06-h100-l2)."""
    TN: gl.constexpr = BN // 2 if HALVES else BN
    TILES: gl.constexpr = (N + TN - 1) // TN
    KS: gl.constexpr = K // SPLIT
    CHUNKS: gl.constexpr = (KS + BK - 1) // BK
    for s in range(gl.cdiv(gl.maximum(TILES * SPLIT - pid, 0), G) * CHUNKS):
        task = pid + (s // CHUNKS) * G
        row = (task % TILES) * TN
        col = (task // TILES) * KS + (s % CHUNKS) * BK
        if HALVES:
            i = load_halves(i, ring, ready, empty, w_ptr, row, w2_ptr, row, col)
        elif GATED:
            i = _load_unit(i, ring, ready, empty, w_ptr, row, col)
            i = _load_unit(i, ring, ready, empty, w2_ptr, row, col)
        elif SEGMENTS == 1:
            i = _load_unit(i, ring, ready, empty, w_ptr, row, col)
        else:  # the tile lies inside one of the tensors
            if row < SEG1:
                i = _load_unit(i, ring, ready, empty, w_ptr, row, col)
            elif row < SEG2:
                i = _load_unit(i, ring, ready, empty, w2_ptr, row - SEG1, col)
            else:
                i = _load_unit(i, ring, ready, empty, w3_ptr, row - SEG2, col)
    return i


@gluon.jit
def _copy_x(slot, x_ptr, j, total, pid, xr, xk, M: gl.constexpr, K: gl.constexpr, KS: gl.constexpr,
            BK: gl.constexpr, CHUNKS: gl.constexpr, TILES: gl.constexpr, G: gl.constexpr):
    """Start the copy of iteration j's activation chunk (its task's K split, chunk j mod CHUNKS)
    into ``slot``; rows past M, columns past the split and iterations past ``total`` copy zeros."""
    task = pid + (j // CHUNKS) * G
    lo = (task // TILES) * KS
    k = lo + (j % CHUNKS) * BK + xk
    mask = (xr[:, None] < M) & (k[None, :] < lo + KS) & (k[None, :] < K) & (j < total)
    if slot.shape[1] > BK:  # a bf16 weight's chunk in an E4M3 program (``_as_unit``): the slot's first columns
        slot = slot.slice(0, BK, 1)
    async_copy.async_copy_global_to_shared(slot, x_ptr + xr[:, None] * K + k[None, :], mask=mask,
                                           cache_modifier=".cg")


@gluon.jit
def _consume(i, ring, ready, empty, xb_lo, xb_hi, acc, a_layout: gl.constexpr):
    """acc += unit i · x chunkᵀ (``xb_lo`` its first BK/2 columns, ``xb_hi`` the rest), then hand
    the unit's slot back to the loader. The halves are two products the tensor cores run side by
    side: one chain of dependent MMAs over the whole unit waits out each one's latency in turn."""
    SLOTS: gl.constexpr = ring.shape[0]
    HK: gl.constexpr = xb_lo.shape[0]  # the op's K chunk's half (the unit's, or ``_as_unit``'s)
    slot = i % SLOTS
    mbarrier.wait(ready.index(slot), (i // SLOTS) & 1)
    unit = _as_unit(ring.index(slot), 2 * HK)
    hi = mma_v2(unit.slice(HK, HK, 1).load(a_layout), xb_hi, gl.zeros_like(acc))
    acc = mma_v2(unit.slice(0, HK, 1).load(a_layout), xb_lo, acc) + hi
    fence_async_shared()  # the slot's reads (generic proxy) before the loader's next copy (async proxy)
    mbarrier.arrive(empty.index(slot))
    return i + 1, acc


@gluon.jit
def _segment(row, p1, p2, p3, SEGMENTS: gl.constexpr, SEG1: gl.constexpr, SEG2: gl.constexpr):
    """Stacked row ``row`` of a tensor held as SEGMENTS parts (``p1`` …; the second from row
    SEG1, the third from SEG2): (its part, its row there)."""
    if SEGMENTS == 1:
        return p1, row
    elif SEGMENTS == 2:
        return gl.where(row < SEG1, p1, p2), gl.where(row < SEG1, row, row - SEG1)
    else:
        return (gl.where(row < SEG1, p1, gl.where(row < SEG2, p2, p3)),
                gl.where(row < SEG1, row, gl.where(row < SEG2, row - SEG1, row - SEG2)))


X_SCALE = gl.constexpr(2.0 ** -8)  # the FP8 product's f16 activations are x · 2⁻⁸ (module docstring)


@gluon.jit
def _unit_scales(it, total, pid, scale_ptr, scale2_ptr, scale3_ptr, K: gl.constexpr, KS: gl.constexpr,
                 TN: gl.constexpr, BK: gl.constexpr, CHUNKS: gl.constexpr, TILES: gl.constexpr, G: gl.constexpr,
                 QBN: gl.constexpr, QBK: gl.constexpr, SEGMENTS: gl.constexpr, SEG1: gl.constexpr,
                 SEG2: gl.constexpr, row_offset: gl.constexpr, layout: gl.constexpr):
    """The scales of iteration ``it``'s unit ([BK // QBK], one a scale block; 0 past K or past the
    ``total`` iterations), times 2⁸ for the f16 activations' 2⁻⁸: its task's row block (tiles of
    TN rows; ``row_offset`` stacked rows down, for the up half of a gated weight) in its own
    tensor's scales (``scale_ptr`` … as the weight's tensors) and its chunk's column blocks."""
    task = pid + (it // CHUNKS) * G
    k0 = (task // TILES) * KS + (it % CHUNKS) * BK
    base, row = _segment((task % TILES) * TN + row_offset, scale_ptr, scale2_ptr, scale3_ptr, SEGMENTS, SEG1, SEG2)
    c = gl.arange(0, BK // QBK, layout=layout)
    k = k0 + c * QBK
    return gl.load(base + (row // QBN) * ((K + QBK - 1) // QBK) + k // QBK, mask=(k < K) & (it < total),
                   other=0.0) / X_SCALE


@gluon.jit
def _scaled_f16(x):
    """bf16 x as f16 x · 2⁻⁸ (X_SCALE; 0x3B80 is 2⁻⁸ in bf16): the bf16x2 multiply (exact), then
    each half through f32 to f16. Written out because the compiler, given the same in Triton,
    converts to f16 first and scales after, so that |x| > 65504 overflows."""
    return gl.inline_asm_elementwise(
        asm="""{
        .reg .b32 t, k;
        .reg .b16 lo, hi;
        .reg .f32 a, b;
        mov.b32 k, 0x3B803B80;
        mul.rn.bf16x2 t, $1, k;
        mov.b32 {lo, hi}, t;
        cvt.f32.bf16 a, lo;
        cvt.f32.bf16 b, hi;
        cvt.rn.f16x2.f32 $0, b, a;
        }""",
        constraints="=r,r", args=[x], dtype=gl.float16, is_pure=True, pack=2)


@gluon.jit
def _widen_x(chunk, wide, layout: gl.constexpr):
    """The landed bf16 activation chunk into ``wide`` as the f16 the FP8 product takes: x · 2⁻⁸."""
    wide._reinterpret(gl.float16, wide.shape, wide.layout).store(_scaled_f16(chunk.load(layout)))


@gluon.jit
def _consume_scaled(i, ring, ready, empty, xslot, scales, scales_up, acc, QBK: gl.constexpr, HALVES: gl.constexpr,
                    acc_layout: gl.constexpr, s_layout: gl.constexpr):
    """acc += Σ over the unit's scale blocks of scale · (the block's E4M3 columns widened to f16
    · the f16 activation chunk ``xslot``'s matching columns), then hand the unit's slot back to
    the loader. A unit of HALVES takes ``scales`` in its gate half and ``scales_up`` in its up half."""
    SLOTS: gl.constexpr = ring.shape[0]
    BN: gl.constexpr = ring.shape[1]
    BK: gl.constexpr = ring.shape[2]
    rows = gl.arange(0, BN, layout=gl.SliceLayout(1, acc_layout))
    slot = i % SLOTS
    mbarrier.wait(ready.index(slot), (i // SLOTS) & 1)
    unit = ring.index(slot)
    x16 = xslot._reinterpret(gl.float16, xslot.shape, xslot.layout)
    for c in gl.static_range(BK // QBK):
        w = unit.slice(c * QBK, QBK, 1).load(operand(0, acc_layout, 4)).to(gl.float16)
        xb = x16.slice(c * QBK, QBK, 1).permute([1, 0]).load(operand(1, acc_layout, 4))
        part = mma_v2(w, xb, gl.zeros(acc.shape, gl.float32, acc_layout))
        block = gl.arange(0, BK // QBK, layout=s_layout) == c
        s = gl.sum(gl.where(block, scales, 0.0), 0)
        if HALVES:
            acc += part * gl.where(rows < BN // 2, s, gl.sum(gl.where(block, scales_up, 0.0), 0))[:, None]
        else:
            acc += part * s
    fence_async_shared()  # the slot's reads (generic proxy) before the loader's next copy (async proxy)
    mbarrier.arrive(empty.index(slot))
    return i + 1, acc


@gluon.jit
def _gated_rows(acc, layout: gl.constexpr):
    """silu(gate)·up of a gated tile's accumulator ([BN, NP]: BN/2 gate rows above the same rows
    of up), [BN/2, NP] in ``layout``: the halves meet in one thread's registers (``halves``)."""
    TN: gl.constexpr = acc.shape[0] // 2
    NP: gl.constexpr = acc.shape[1]
    halves: gl.constexpr = halves_layout(TN, NP, gl.num_warps())
    x = gl.convert_layout(gl.reshape(acc, [2, TN, NP]), halves)
    half = gl.arange(0, 2, layout=gl.SliceLayout(1, gl.SliceLayout(2, halves)))[:, None, None]
    gate = gl.sum(gl.where(half == 0, x, 0.0), axis=0)
    up = gl.sum(gl.where(half == 1, x, 0.0), axis=0)
    return gl.convert_layout(gate / (1.0 + gl.exp(-gate)) * up, layout)


@gluon.jit
def _store_tile(acc, acc_up, task, out_ptr, bias_ptr, b2_ptr, b3_ptr, residual_ptr, RES_PARTS: gl.constexpr,
                N: gl.constexpr, M: gl.constexpr, TILES: gl.constexpr, TN: gl.constexpr, HAS_BIAS: gl.constexpr,
                HAS_RESIDUAL: gl.constexpr, GATED: gl.constexpr, HALVES: gl.constexpr, SEGMENTS: gl.constexpr,
                SEG1: gl.constexpr, SEG2: gl.constexpr, layout: gl.constexpr):
    """A task's epilogue: out[split, :M, tile] = accᵀ (+ bias, + residual on split 0), or
    silu(gate)·up (``acc_up`` the up rows' product, or with HALVES the lower half of ``acc``);
    accᵀ is [BN weight rows, NP token rows], the tile TN output rows (BN, or BN/2 with HALVES)."""
    NP: gl.constexpr = acc.shape[1]
    tile = task % TILES
    split = task // TILES
    n = tile * TN + gl.arange(0, TN, layout=gl.SliceLayout(1, layout))
    m = gl.arange(0, NP, layout=gl.SliceLayout(0, layout))
    mask = (n[:, None] < N) & (m[None, :] < M)
    if HALVES:
        out = _gated_rows(acc, layout)
    elif GATED:
        gate = gl.convert_layout(acc, layout)
        out = gate / (1.0 + gl.exp(-gate)) * gl.convert_layout(acc_up, layout)
    else:
        out = gl.convert_layout(acc, layout)
    if HAS_BIAS:
        base, first = _segment(tile * TN, bias_ptr, b2_ptr, b3_ptr, SEGMENTS, SEG1, SEG2)  # the tile's tensor
        out += gl.load(base + first + (n - tile * TN), mask=(n < N) & (split == 0), other=0.0).to(gl.float32)[:, None]
    if HAS_RESIDUAL:
        at = m[None, :] * N + n[:, None]
        for p in gl.static_range(RES_PARTS):
            out += gl.load(residual_ptr + p * M * N + at, mask=mask & (split == 0), other=0.0, cache_modifier=".cg")
    gl.store(out_ptr + split * M * N + m[None, :] * N + n[:, None], out.to(out_ptr.dtype.element_ty), mask=mask)


@gluon.jit
def _stage_input(pid, x_ptr, X_PARTS: gl.constexpr, norm_ptr, x_hat_ptr, M: gl.constexpr, K: gl.constexpr,
                 K_P: gl.constexpr, EPS: gl.constexpr, NORM: gl.constexpr):
    """This CTA's own copy of the GEMV's input, x̂ (x normed, or the sum of its split-K partials),
    staged into its slice of ``x_hat_ptr`` ([G, M, K]) and read back after a CTA barrier: for a
    band's few rows this costs each CTA less than a norm op and its edge."""
    x_cta = x_hat_ptr + pid * M * K
    g = norm_weights(norm_ptr, K, K_P) if NORM else 0.0
    for m in gl.static_range(M):
        normed_row(x_ptr, X_PARTS, g, x_cta, m, M, K, K_P, EPS, NORM)
    gl.thread_barrier()
    return x_cta


@gluon.jit
def stream_gemv(pid, i, ring, ready, empty, xring, x_ptr, X_PARTS: gl.constexpr, norm_ptr, x_hat_ptr, w_scale_ptr,
                w2_scale_ptr, w3_scale_ptr, QUANT: gl.constexpr, QBN: gl.constexpr, QBK: gl.constexpr, out_ptr,
                bias_ptr, b2_ptr, b3_ptr, residual_ptr, RES_PARTS: gl.constexpr, N: gl.constexpr, K: gl.constexpr,
                K_P: gl.constexpr, M: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr, SPLIT: gl.constexpr,
                G: gl.constexpr, EPS: gl.constexpr, NORM: gl.constexpr, HAS_BIAS: gl.constexpr,
                HAS_RESIDUAL: gl.constexpr, GATED: gl.constexpr, HALVES: gl.constexpr, INTER: gl.constexpr,
                SEGMENTS: gl.constexpr, SEG1: gl.constexpr, SEG2: gl.constexpr):
    """The compute warps' side of one GEMV op (see the module docstring); ``i`` is the CTA's place
    in the weight stream, returned advanced past the op's units. Runs after the op's wait."""
    if NORM or X_PARTS > 1:
        x_ptr = _stage_input(pid, x_ptr, X_PARTS, norm_ptr, x_hat_ptr, M, K, K_P, EPS, NORM)
    WARPS: gl.constexpr = gl.num_warps()
    XD: gl.constexpr = xring.shape[0] - 1 if QUANT else xring.shape[0]  # QUANT: the last slot is the f16 chunk
    NP: gl.constexpr = xring.shape[1]
    TN: gl.constexpr = BN // 2 if HALVES else BN  # a tile's output rows
    TILES: gl.constexpr = (N + TN - 1) // TN
    KS: gl.constexpr = K // SPLIT
    CHUNKS: gl.constexpr = (KS + BK - 1) // BK
    acc_layout: gl.constexpr = mma_rows(WARPS)
    a_layout: gl.constexpr = operand(0, acc_layout)
    b_layout: gl.constexpr = operand(1, acc_layout)
    s_layout: gl.constexpr = vector_layout(WARPS)
    x_layout: gl.constexpr = rows_layout(NP, BK, WARPS)
    out_layout: gl.constexpr = cols_layout(TN, NP, WARPS, 4)
    xr = gl.arange(0, NP, layout=gl.SliceLayout(1, x_layout))
    xk = gl.arange(0, BK, layout=gl.SliceLayout(0, x_layout))
    total = gl.cdiv(gl.maximum(TILES * SPLIT - pid, 0), G) * CHUNKS
    for j in gl.static_range(XD - 1):
        _copy_x(xring.index(j), x_ptr, j, total, pid, xr, xk, M, K, KS, BK, CHUNKS, TILES, G)
        async_copy.commit_group()
    acc = gl.zeros([BN, NP], gl.float32, acc_layout)
    acc_up = gl.zeros([BN, NP], gl.float32, acc_layout)
    if QUANT:  # a unit's scales are loaded an iteration ahead: their L2 round trip hides under a unit's product
        scales = _unit_scales(0, total, pid, w_scale_ptr, w2_scale_ptr, w3_scale_ptr, K, KS, TN, BK, CHUNKS, TILES, G,
                              QBN, QBK, SEGMENTS, SEG1, SEG2, 0, s_layout)
        scales_up = scales
        if GATED:
            scales_up = _unit_scales(0, total, pid, w_scale_ptr, w2_scale_ptr, w3_scale_ptr, K, KS, TN, BK, CHUNKS,
                                     TILES, G, QBN, QBK, SEGMENTS, SEG1, SEG2, INTER, s_layout)
    for it in range(total):
        async_copy.wait_group(XD - 2)  # this thread's copy of chunk `it` has landed ...
        gl.thread_barrier()  # ... and every thread's; every thread is past iteration it - 1
        if QUANT:
            _widen_x(xring.index(it % XD), xring.index(XD), x_layout)
            gl.thread_barrier()
            next_scales = _unit_scales(it + 1, total, pid, w_scale_ptr, w2_scale_ptr, w3_scale_ptr, K, KS, TN, BK,
                                       CHUNKS, TILES, G, QBN, QBK, SEGMENTS, SEG1, SEG2, 0, s_layout)
            next_scales_up = next_scales
            if GATED:
                next_scales_up = _unit_scales(it + 1, total, pid, w_scale_ptr, w2_scale_ptr, w3_scale_ptr, K, KS, TN,
                                              BK, CHUNKS, TILES, G, QBN, QBK, SEGMENTS, SEG1, SEG2, INTER, s_layout)
        else:
            xb_lo = xring.index(it % XD).slice(0, BK // 2, 1).permute([1, 0]).load(b_layout)
            xb_hi = xring.index(it % XD).slice(BK // 2, BK // 2, 1).permute([1, 0]).load(b_layout)
        # the slot refilled now is iteration it - 1's, which every thread has read
        _copy_x(xring.index((it + XD - 1) % XD), x_ptr, it + XD - 1, total, pid, xr, xk, M, K, KS, BK, CHUNKS, TILES,
                G)
        async_copy.commit_group()
        if QUANT:
            i, acc = _consume_scaled(i, ring, ready, empty, xring.index(XD), scales, scales_up, acc, QBK, HALVES,
                                     acc_layout, s_layout)
            if GATED and not HALVES:
                i, acc_up = _consume_scaled(i, ring, ready, empty, xring.index(XD), scales_up, scales_up, acc_up, QBK,
                                            False, acc_layout, s_layout)
            scales = next_scales
            scales_up = next_scales_up
        else:
            i, acc = _consume(i, ring, ready, empty, xb_lo, xb_hi, acc, a_layout)
            if GATED and not HALVES:
                i, acc_up = _consume(i, ring, ready, empty, xb_lo, xb_hi, acc_up, a_layout)
        if it % CHUNKS == CHUNKS - 1:
            _store_tile(acc, acc_up, pid + (it // CHUNKS) * G, out_ptr, bias_ptr, b2_ptr, b3_ptr, residual_ptr,
                        RES_PARTS, N, M, TILES, TN, HAS_BIAS, HAS_RESIDUAL, GATED, HALVES, SEGMENTS, SEG1, SEG2,
                        out_layout)
            acc = gl.zeros([BN, NP], gl.float32, acc_layout)
            acc_up = gl.zeros([BN, NP], gl.float32, acc_layout)
    async_copy.wait_group(0)
    gl.thread_barrier()  # the x ring is free for the next op
    return i
