"""The routed MLP's ops (``compiler/ops/moe.py``): routing, the experts' gate/up and down.

Routing is done by every CTA of experts_up from the router's logits, the same values in the same
order, so every CTA lays out the same routing-dependent task list; nothing about it leaves the
device. A task's expert comes from the slot table in registers (``slot_experts``: derived from
the routing in experts_up, loaded from CTA 0's record, ``routed``, before the task loop in
experts_down): a load of it inside the software-pipelined loop would become an L1-cached
asynchronous copy (``cp.async.ca``: Triton's pipeliner has no 4-byte ``.cg`` copy), which
contract I3 refuses for a region another CTA writes. Expert e's rows are addressed from
``w_ptr + e · (its rows × columns)`` in 64-bit arithmetic (a model's experts together pass 2³¹
elements), the rows within it in 32-bit. An FP8 checkpoint's experts are E4M3 with one fp32
scale per block (``expert_scales``: the expert's own from the stack's), and a chunk's product is
scaled by its rows' scales as a dense FP8 GEMV's (``common.chunk_product``): the chunk lies in one
scale block's columns, and an expert's gate and up rows are whole blocks apart (the recipe refuses
an intermediate size that is not whole blocks).
"""

import triton
import triton.language as tl

from .common import chunk_product, load_parts, load_w_chunk
from .gemv import _store_tile, _tile_rows


@triton.jit
def route(logits_ptr, L_PARTS: tl.constexpr, context_lens_ptr, M: tl.constexpr, ROWS_P: tl.constexpr,
          TOKENS: tl.constexpr, E: tl.constexpr, E_P: tl.constexpr, TOPK: tl.constexpr, NORMALIZE: tl.constexpr):
    """Each token row's routing, as [ROWS_P, E_P] (weight, chosen): the row's TOPK largest logits
    (ties to the lower expert, as ``torch.topk`` takes them: the first index of the maximum, TOPK
    times), their weights the softmax over all E experts taken there, renormalized over the chosen
    ones with NORMALIZE. A dead row (context length 0) and padding rows choose nothing. The logits
    are fp32 [L_PARTS, M, E] K-split partials, summed in a fixed order."""
    r = tl.arange(0, ROWS_P)
    e = tl.arange(0, E_P)
    ctx = tl.load(context_lens_ptr + r // TOKENS, mask=r < M, other=0)
    live = (r < M) & (ctx > 0)
    valid = live[:, None] & (e[None, :] < E)
    logits = load_parts(logits_ptr + r[:, None] * E + e[None, :], valid, L_PARTS, M * E)
    logits = tl.where(valid, logits, float("-inf"))
    chosen = tl.zeros([ROWS_P, E_P], tl.int1)
    rest = logits
    for _ in tl.static_range(TOPK):
        best = tl.max(rest, axis=1)
        first = tl.min(tl.where(rest == best[:, None], e[None, :], E_P), axis=1)
        pick = (e[None, :] == first[:, None]) & live[:, None]
        chosen = chosen | pick
        rest = tl.where(pick, float("-inf"), rest)
    top = tl.max(logits, axis=1)
    p = tl.where(valid, tl.exp(logits - tl.where(live, top, 0.0)[:, None]), 0.0)
    total = tl.sum(tl.where(chosen, p, 0.0), axis=1) if NORMALIZE else tl.sum(p, axis=1)
    weight = tl.where(chosen, p / tl.where(total > 0, total, 1.0)[:, None], 0.0)
    return weight, chosen


@triton.jit
def slot_expert(slot_experts, slot, SLOTS_P: tl.constexpr):
    """The expert of ``slot``, from the [SLOTS_P] table in registers (a warp's shuffle reduction)."""
    return tl.sum(tl.where(tl.arange(0, SLOTS_P) == slot, slot_experts, 0), axis=0)


@triton.jit
def expert_scales(scale_ptr, expert, ROWS: tl.constexpr, COLS: tl.constexpr, QBN: tl.constexpr, QBK: tl.constexpr):
    """Expert ``expert``'s block scales in a stack of [⌈ROWS/QBN⌉, ⌈COLS/QBK⌉] per expert."""
    return scale_ptr + expert.to(tl.int64) * (((ROWS + QBN - 1) // QBN) * ((COLS + QBK - 1) // QBK))


@triton.jit
def experts_up_op(pid, pre, logits_ptr, L_PARTS: tl.constexpr, context_lens_ptr, M: tl.constexpr,
                  ROWS_P: tl.constexpr, TOKENS: tl.constexpr, E: tl.constexpr, E_P: tl.constexpr, TOPK: tl.constexpr,
                  NORMALIZE: tl.constexpr, SLOTS: tl.constexpr, SLOTS_P: tl.constexpr, routed_ptr, x_ptr, w_ptr,
                  scale_ptr, QUANT: tl.constexpr, QBN: tl.constexpr, QBK: tl.constexpr, h_ptr, INTER: tl.constexpr,
                  K: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, G: tl.constexpr, DOT_IEEE: tl.constexpr,
                  W_STAGES: tl.constexpr):
    """Route the band's rows, then the CTA's (slot, tile) tasks: h[slot, :M, tile] = weight ·
    silu(x̂ · W_gate[e, tile]ᵀ) · (x̂ · W_up[e, tile]ᵀ), e the slot's expert, weight each row's
    weight of e (0 where the row did not choose it). One software-pipelined loop over the CTA's
    (task, K chunk) pairs, as the dense GEMV's (``gemv.py``), its trip count the routing's."""
    weight, chosen = route(logits_ptr, L_PARTS, context_lens_ptr, M, ROWS_P, TOKENS, E, E_P, TOPK, NORMALIZE)
    e = tl.arange(0, E_P)
    used = tl.max(chosen.to(tl.int32), axis=0)  # [E_P]: an expert some row chose
    slot_of = tl.cumsum(used, axis=0) - 1  # its slot: the chosen experts in expert order
    n = tl.sum(used, axis=0)
    s = tl.arange(0, SLOTS_P)
    # reduced over its first axis, the table lies along the lanes of a warp: a lookup of it in
    # the task loop is shuffles alone (reduced over its second, across the warps: a barrier each)
    slot_experts = tl.sum(tl.where((slot_of[:, None] == s[None, :]) & (used[:, None] > 0), e[:, None], 0), axis=0)
    if pid == 0:  # the step's record: how many slots, then their experts (-1 past them)
        tl.store(routed_ptr + 1 + s, tl.where(s < n, slot_experts, -1), mask=s < SLOTS)
        tl.store(routed_ptr, n)

    TILES: tl.constexpr = (INTER + BN - 1) // BN
    CHUNKS: tl.constexpr = (K + BK - 1) // BK
    j = tl.arange(0, 2 * BN)
    r = tl.arange(0, ROWS_P)
    k = tl.arange(0, BK)
    acc = tl.zeros([ROWS_P, 2 * BN], tl.float32)
    for it in tl.range(0, tl.cdiv(n * TILES - pid, G) * CHUNKS, num_stages=W_STAGES):
        task = pid + (it // CHUNKS) * G
        chunk = it % CHUNKS
        slot = task // TILES
        tile = task % TILES
        expert = slot_expert(slot_experts, slot, SLOTS_P)
        w_e = w_ptr + expert.to(tl.int64) * (2 * INTER * K)
        rows, row_mask = _tile_rows(tile, j, BN, INTER, True, INTER)
        k0 = chunk * BK
        if QUANT:
            s_e = expert_scales(scale_ptr, expert, 2 * INTER, K, QBN, QBK)
        else:
            s_e = scale_ptr
        w = load_w_chunk(w_e, w_e, w_e, rows, row_mask, k0, K, BK, 1, 0, 0)
        x = tl.load(x_ptr + r[:, None] * K + (k0 + k)[None, :], mask=(r[:, None] < M) & (k0 + k < K)[None, :],
                    other=0.0, cache_modifier=".cg")
        acc += chunk_product(x, w, s_e, s_e, s_e, rows, row_mask, k0, K, QUANT, QBN, QBK, 1, 0, 0, DOT_IEEE)
        if chunk == CHUNKS - 1:
            gate, up = tl.split(tl.reshape(acc, [ROWS_P, BN, 2]))
            row_weight = tl.sum(tl.where(e[None, :] == expert, weight, 0.0), axis=1)
            h = gate / (1.0 + tl.exp(-gate)) * up * row_weight[:, None]
            n_out = tile * BN + tl.arange(0, BN)
            tl.store(h_ptr + slot * M * INTER + r[:, None] * INTER + n_out[None, :], h.to(h_ptr.dtype.element_ty),
                     mask=(r[:, None] < M) & (n_out[None, :] < INTER))
            acc = tl.zeros([ROWS_P, 2 * BN], tl.float32)


@triton.jit
def experts_down_op(pid, pre, routed_ptr, h_ptr, w_ptr, scale_ptr, QUANT: tl.constexpr, QBN: tl.constexpr,
                    QBK: tl.constexpr, residual_ptr, RES_PARTS: tl.constexpr, out_ptr,
                    N: tl.constexpr, INTER: tl.constexpr, M: tl.constexpr, ROWS_P: tl.constexpr, BN: tl.constexpr,
                    BK: tl.constexpr, SPLIT: tl.constexpr, SLOTS: tl.constexpr, SLOTS_P: tl.constexpr, G: tl.constexpr,
                    DOT_IEEE: tl.constexpr, W_STAGES: tl.constexpr):
    """The CTA's (tile of N output rows, K split) tasks over the slots' concatenated columns: chunk
    c is columns [(c mod CH)·BK, …) of slot c div CH (CH chunks a slot), split s takes chunks
    [s·per, (s+1)·per), per = ⌈slots·CH / SPLIT⌉ (at least one, so that a step whose rows chose
    nothing still writes its partials). Partial ``split`` of out; split 0 adds x1."""
    TILES: tl.constexpr = (N + BN - 1) // BN
    CH: tl.constexpr = (INTER + BK - 1) // BK
    n = tl.load(routed_ptr, cache_modifier=".cg")
    s = tl.arange(0, SLOTS_P)
    slot_experts = tl.load(routed_ptr + 1 + s, mask=s < SLOTS, other=0, cache_modifier=".cg")
    total = n * CH
    per = tl.maximum(tl.cdiv(total, SPLIT), 1)
    r = tl.arange(0, ROWS_P)
    k = tl.arange(0, BK)
    acc = tl.zeros([ROWS_P, BN], tl.float32)
    for it in tl.range(0, tl.cdiv(TILES * SPLIT - pid, G) * per, num_stages=W_STAGES):
        task = pid + (it // per) * G
        step = it % per
        tile = task % TILES
        split = task // TILES
        c = split * per + step
        valid = c < total
        slot = tl.where(valid, c // CH, 0)
        k0 = (c % CH) * BK
        expert = tl.maximum(slot_expert(slot_experts, slot, SLOTS_P), 0)  # -1 past the slots: masked anyway
        w_e = w_ptr + expert.to(tl.int64) * (N * INTER)
        if QUANT:
            s_e = expert_scales(scale_ptr, expert, N, INTER, QBN, QBK)
        else:
            s_e = scale_ptr
        rows = tile * BN + tl.arange(0, BN)
        row_mask = (rows < N) & valid
        w = load_w_chunk(w_e, w_e, w_e, rows, row_mask, k0, INTER, BK, 1, 0, 0)
        x = tl.load(h_ptr + slot * M * INTER + r[:, None] * INTER + (k0 + k)[None, :],
                    mask=(r[:, None] < M) & (k0 + k < INTER)[None, :] & valid, other=0.0, cache_modifier=".cg")
        acc += chunk_product(x, w, s_e, s_e, s_e, rows, row_mask, k0, INTER, QUANT, QBN, QBK, 1, 0, 0, DOT_IEEE)
        if step == per - 1:
            _store_tile(acc, tile, split, out_ptr, None, None, None, residual_ptr, RES_PARTS, N, M, ROWS_P, BN, False,
                        RES_PARTS > 0, False, 1, 0, 0)
            acc = tl.zeros([ROWS_P, BN], tl.float32)
