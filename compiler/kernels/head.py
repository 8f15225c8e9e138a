"""The programs around the layers: the token embedding and the final norm + LM head.

``head_kernel`` has up to three stages: with NORM_STAGE, ``norm`` (x̂ = RMSNorm(x), a task per
token row, one copy every logits CTA reads); ``logits`` (x̂ · W_headᵀ in tiles of BN vocabulary
rows, fp32 logits, each tile's max and first argmax per row; without a norm stage each CTA first
stages x̂ itself); and, for a greedy head, ``argmax`` (one task per token row reduces the tiles'
partials to the next id; ties go to the lowest id, as ``torch.argmax`` does).
"""

import triton
import triton.language as tl

from .common import clock_end, clock_start, load_act, signal, step_epoch, wait
from .layer import gemv_stage, leading_norm_stage


@triton.jit
def embed_kernel(tokens, embed, x_out, M: tl.constexpr, H: tl.constexpr, BH: tl.constexpr, X_PARTS: tl.constexpr,
                 G: tl.constexpr):
    """x_out[m, :] = embed[tokens[m], :] in fp32; tasks are (row, chunk of BH columns).

    The layers read their input as X_PARTS split-K partials (see ``layer_kernel``): the embedding
    is partial 0 and the others are zeroed, since they hold the last step's values.
    """
    CHUNKS: tl.constexpr = (H + BH - 1) // BH
    for task in range(tl.program_id(0), M * CHUNKS, G):
        m = task // CHUNKS
        c = (task % CHUNKS) * BH + tl.arange(0, BH)
        token = tl.load(tokens + m).to(tl.int64)
        row = tl.load(embed + token * H + c, mask=c < H, other=0.0)
        tl.store(x_out + m * H + c, row.to(tl.float32), mask=c < H)
        for p in tl.static_range(1, X_PARTS):
            tl.store(x_out + p * M * H + m * H + c, tl.zeros([BH], tl.float32), mask=c < H)


@triton.jit
def head_kernel(
    x_in, final_norm, w_head, logits, tile_max, tile_arg, next_ids, x_hat, counters, hang_log, stage_clock,
    H: tl.constexpr, H_P: tl.constexpr, V: tl.constexpr, M: tl.constexpr, ROWS_P: tl.constexpr, EPS: tl.constexpr,
    BN: tl.constexpr, BK: tl.constexpr, TILES_P: tl.constexpr, X_PARTS: tl.constexpr, G: tl.constexpr,
    GREEDY: tl.constexpr, FIRST: tl.constexpr, LAST: tl.constexpr, PDL: tl.constexpr, DOT_IEEE: tl.constexpr,
    W_STAGES: tl.constexpr, NORM_ROWS: tl.constexpr, NORM_STAGE: tl.constexpr, WAIT_SPINS: tl.constexpr,
    HANG_SLOTS: tl.constexpr, CLOCK: tl.constexpr, CLOCK_SLOTS: tl.constexpr,
):
    """Final RMSNorm + LM head: stages FIRST..LAST (see the module docstring); x_in is the last
    layer's output, stored as X_PARTS split-K partials.

    With NORM_STAGE the stages are 0 norm, 1 logits, 2 argmax, and x_hat is the one [M, H] copy
    of x̂; without, 0 logits, 1 argmax, and x_hat holds each CTA's own [G, M, H] slice. Stage k's
    sync edge is counter k; its clock slots 1 + 2k, 2 + 2k.
    """
    TILES: tl.constexpr = (V + BN - 1) // BN
    PERSISTENT: tl.constexpr = FIRST < LAST
    N_LOGITS: tl.constexpr = 1 if NORM_STAGE else 0  # the stage indexes
    N_ARGMAX: tl.constexpr = N_LOGITS + 1
    # logits waits for the norm stage on the edge, or without one for the last layer's launch (PDL)
    LOGITS_WAIT: tl.constexpr = (1 if PERSISTENT else 0) if NORM_STAGE else (2 if PDL else 0)
    pid = tl.program_id(0)
    r = tl.arange(0, ROWS_P)
    target = 0
    if NORM_STAGE:
        target = leading_norm_stage(pid, x_in, X_PARTS, final_norm, x_hat, counters, stage_clock, M, H, H_P, EPS, G,
                                    FIRST <= 0 and LAST >= 0, PERSISTENT, PDL, CLOCK, CLOCK_SLOTS)
    if FIRST <= N_LOGITS and LAST >= N_LOGITS:
        gemv_stage(pid, x_hat if NORM_STAGE else x_in, 1 if NORM_STAGE else X_PARTS, final_norm, x_hat, w_head,
                   logits, final_norm, x_in, 1, counters, target, hang_log, stage_clock, 1 + 2 * N_LOGITS,
                   N=V, K=H, K_P=H_P, M=M, ROWS_P=ROWS_P, BN=BN, BK=BK, SPLIT=1, G=G, EPS=EPS, NORM=not NORM_STAGE,
                   HAS_BIAS=False, HAS_RESIDUAL=False, GATED=False, INTER=0, WAIT=LOGITS_WAIT,
                   DOT_IEEE=DOT_IEEE, W_STAGES=W_STAGES, NORM_ROWS=NORM_ROWS, WAIT_SPINS=WAIT_SPINS, HANG_SLOTS=HANG_SLOTS,
                   CLOCK=CLOCK, CLOCK_SLOTS=CLOCK_SLOTS)
        if GREEDY:  # a greedy head: each tile's max and first argmax per row
            tl.debug_barrier()  # this CTA's logits stores, before its threads read them back
            n = tl.arange(0, BN)
            for tile in range(pid, TILES, G):
                cols = tile * BN + n
                mask = (r[:, None] < M) & (cols[None, :] < V)
                vals = load_act(logits + r[:, None] * V + cols[None, :], mask)
                vals = tl.where(mask, vals, float("-inf"))
                best, where = tl.max(vals, axis=1, return_indices=True, return_indices_tie_break_left=True)
                tl.store(tile_max + r * TILES + tile, best, mask=r < M)
                tl.store(tile_arg + r * TILES + tile, tile * BN + where, mask=r < M)
        clock_end(stage_clock, 2 + 2 * N_LOGITS, CLOCK, CLOCK_SLOTS)
    if PERSISTENT and GREEDY:
        if not NORM_STAGE:
            target = (step_epoch(counters, G) + 1) * G
        signal(counters + N_LOGITS)
        wait(counters + N_LOGITS, target, hang_log, WAIT_SPINS, HANG_SLOTS)
    if GREEDY and FIRST <= N_ARGMAX and LAST >= N_ARGMAX:
        clock_start(stage_clock, 1 + 2 * N_ARGMAX, CLOCK, CLOCK_SLOTS)
        t = tl.arange(0, TILES_P)
        for m in range(pid, M, G):
            vals = tl.load(tile_max + m * TILES + t, mask=t < TILES, other=float("-inf"), cache_modifier=".cg")
            args = tl.load(tile_arg + m * TILES + t, mask=t < TILES, other=V, cache_modifier=".cg")
            best = tl.max(vals, axis=0)
            tl.store(next_ids + m, tl.min(tl.where(vals == best, args, V), axis=0))
        clock_end(stage_clock, 2 + 2 * N_ARGMAX, CLOCK, CLOCK_SLOTS)
