"""The ops around the layers: the token embedding, the LM head's logits and the greedy argmax.

``logits_op`` is the GEMV op over the vocabulary (x̂ · W_headᵀ in tiles of BN rows, fp32
logits) and, for a greedy head, each tile's max and first argmax per row; ``argmax_op`` (a task
per row) reduces the tiles' partials to the next ids, ties to the lowest id as ``torch.argmax``
does, and for a speculative verify band returns the row's greedy verdict.
"""

import triton
import triton.language as tl

from .common import load_act
from .gemv import gemv_op


@triton.jit
def embed_op(pid, pre, tokens, embed, x_out, M: tl.constexpr, H: tl.constexpr, BH: tl.constexpr,
             X_PARTS: tl.constexpr, G: tl.constexpr):
    """x_out[m, :] = embed[tokens[m], :] in fp32; tasks are (row, chunk of BH columns).

    The layers read their input as X_PARTS split-K partials: the embedding is partial 0 and the
    others are zeroed, since they hold the last step's values.
    """
    CHUNKS: tl.constexpr = (H + BH - 1) // BH
    for task in range(pid, M * CHUNKS, G):
        m = task // CHUNKS
        c = (task % CHUNKS) * BH + tl.arange(0, BH)
        token = tl.load(tokens + m).to(tl.int64)
        row = tl.load(embed + token * H + c, mask=c < H, other=0.0)
        tl.store(x_out + m * H + c, row.to(tl.float32), mask=c < H)
        for p in tl.static_range(1, X_PARTS):
            tl.store(x_out + p * M * H + m * H + c, tl.zeros([BH], tl.float32), mask=c < H)


@triton.jit
def logits_op(pid, pre, x_ptr, X_PARTS: tl.constexpr, norm_ptr, x_hat_ptr, w_ptr, logits, tile_max, tile_arg,
              V: tl.constexpr, K: tl.constexpr, K_P: tl.constexpr, M: tl.constexpr, ROWS_P: tl.constexpr,
              BN: tl.constexpr, BK: tl.constexpr, G: tl.constexpr, EPS: tl.constexpr, NORM: tl.constexpr,
              GREEDY: tl.constexpr, DOT_IEEE: tl.constexpr, W_STAGES: tl.constexpr, NORM_ROWS: tl.constexpr):
    """fp32 logits of the CTA's vocabulary tiles; for a greedy head also each tile's max and
    first argmax per row, read back from this CTA's own logits stores."""
    gemv_op(pid, pre, x_ptr, X_PARTS, norm_ptr, x_hat_ptr, w_ptr, None, False, 1, 1, logits, None, None, 1, N=V, K=K,
            K_P=K_P, M=M, ROWS_P=ROWS_P, BN=BN, BK=BK, SPLIT=1, G=G, EPS=EPS, NORM=NORM, HAS_BIAS=False, HAS_RESIDUAL=False,
            GATED=False, INTER=0, DOT_IEEE=DOT_IEEE, W_STAGES=W_STAGES, NORM_ROWS=NORM_ROWS)
    if GREEDY:
        TILES: tl.constexpr = (V + BN - 1) // BN
        tl.debug_barrier()  # this CTA's logits stores, before its threads read them back
        r = tl.arange(0, ROWS_P)
        n = tl.arange(0, BN)
        for tile in range(pid, TILES, G):
            cols = tile * BN + n
            mask = (r[:, None] < M) & (cols[None, :] < V)
            vals = load_act(logits + r[:, None] * V + cols[None, :], mask)
            vals = tl.where(mask, vals, float("-inf"))
            best, where = tl.max(vals, axis=1, return_indices=True, return_indices_tie_break_left=True)
            tl.store(tile_max + r * TILES + tile, best, mask=r < M)
            tl.store(tile_arg + r * TILES + tile, tile * BN + where, mask=r < M)


@triton.jit
def argmax_op(pid, pre, tile_max, tile_arg, next_ids, tokens, accepted, emitted, V: tl.constexpr, M: tl.constexpr,
              BN: tl.constexpr, TILES_P: tl.constexpr, G: tl.constexpr, TOKENS: tl.constexpr, T_P: tl.constexpr):
    """next_ids[m] = the first index of token row m's largest logit, from the tiles' maxima; a task
    per row of TOKENS token rows. A verify band's rows (TOKENS > 1) also get the greedy verdict:
    token j + 1 of a row is the draft for what token j predicts, so the row accepts its drafts up
    to the first that is not token j's id, ``accepted`` = how many, and emits ``emitted[0 …
    accepted]`` = those drafts and the id that follows them (the correction or the bonus token),
    −1 after them."""
    TILES: tl.constexpr = (V + BN - 1) // BN
    t = tl.arange(0, TILES_P)
    j = tl.arange(0, T_P)
    rows_of = (j < TOKENS)[:, None] & (t < TILES)[None, :]
    for row in range(pid, M // TOKENS, G):
        m = row * TOKENS + j
        at = m[:, None] * TILES + t[None, :]
        vals = tl.load(tile_max + at, mask=rows_of, other=float("-inf"), cache_modifier=".cg")
        args = tl.load(tile_arg + at, mask=rows_of, other=V, cache_modifier=".cg")
        best = tl.max(vals, axis=1)
        ids = tl.min(tl.where(vals == best[:, None], args, V), axis=1)
        tl.store(next_ids + m, ids, mask=j < TOKENS)
        if TOKENS > 1:
            drafts = tl.load(tokens + m + 1, mask=j < TOKENS - 1, other=-1)  # token j + 1: the draft after j
            missed = tl.cumsum((drafts != ids).to(tl.int32), axis=0)  # 0 while every draft so far matched
            n = tl.sum(((missed == 0) & (j < TOKENS - 1)).to(tl.int32), axis=0)
            tl.store(accepted + row, n)
            tl.store(emitted + m, tl.where(j <= n, ids, -1), mask=j < TOKENS)
