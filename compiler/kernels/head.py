"""The ops around the layers: the token embedding, the LM head's logits and the greedy argmax
(the sampler is ``sample.py``).

``logits_op`` is the GEMV op over the vocabulary (x̂ · W_headᵀ in tiles of BN rows, fp32
logits) and, for a greedy or sampling head, each tile's max and first argmax per row
(``tile_parts``), for a sampling head also each tile's part of the rows' first draw;
``argmax_op`` (a task per row) reduces the tiles' partials to the next ids, ties to the lowest
id as ``torch.argmax`` does, and in a speculative verify band returns the row's verdict over
them; ``sample.sample_op`` (a task per token row) draws them, and ``sample.verdict_op`` (a task
per row) returns a sampled verify band's verdict.
"""

import triton
import triton.language as tl

from .common import load_act
from .gemv import gemv_op
from .sample import store_verdict, uniform


@triton.jit
def embed_op(pid, pre, tokens, embed, x_out, vocab_start, M, H: tl.constexpr, BH: tl.constexpr,
             X_PARTS: tl.constexpr, V_RANK: tl.constexpr, G):
    """x_out[m, :] = embed[tokens[m], :] in fp32; tasks are (row, chunk of BH columns).

    The layers read their input as X_PARTS split-K partials: the embedding is partial 0 and the
    others are zeroed, since they hold the last step's values. Under tensor parallelism (V_RANK
    > 0) ``embed`` is the rank's V_RANK rows from ``vocab_start``, and an id outside them reads zeros.
    """
    CHUNKS: tl.constexpr = (H + BH - 1) // BH
    for task in range(pid, M * CHUNKS, G):
        m = task // CHUNKS
        c = (task % CHUNKS) * BH + tl.arange(0, BH)
        token = tl.load(tokens + m).to(tl.int64)
        held = c < H
        if V_RANK > 0:
            token = token - vocab_start
            held = held & (token >= 0) & (token < V_RANK)
        row = tl.load(embed + token * H + c, mask=held, other=0.0)
        tl.store(x_out + m * H + c, row.to(tl.float32), mask=c < H)
        for p in tl.static_range(1, X_PARTS):
            tl.store(x_out + p * M * H + m * H + c, tl.zeros([BH], tl.float32), mask=c < H)


@triton.jit
def _first_draw(logits, cols, tile, temperature, seed, positions, tile_z, tile_zarg, tile_mass, V: tl.constexpr,
                M: tl.constexpr, M_P: tl.constexpr, TILES: tl.constexpr, TOKENS: tl.constexpr):
    """Every token row's first sampling round over one vocabulary tile, where the tile's logits
    are (this CTA's own stores, read back in one load for all M rows): the tile's largest
    Gumbel-perturbed scaled logit (z = (logit − tile max) / temperature − log(−log u), u the
    round-0 uniforms ``sample_op`` would draw) and its first id, and the tile's mass
    Σ exp((logit − tile max) / temperature). Spread over every CTA's tiles, the round's Philox
    draws cost a CTA its own tiles' share, not one CTA the whole vocabulary. A greedy row's
    parts are computed too (temperature taken as 1) and never read."""
    m = tl.arange(0, M_P)  # M_P: M rounded up to a power of two
    live = m < M
    temp = tl.load(temperature + m // TOKENS, mask=live, other=1.0)
    inv_t = 1.0 / tl.where(temp > 0.0, temp, 1.0)
    valid = live[:, None] & (cols[None, :] < V)
    logit = tl.where(valid, load_act(logits + m[:, None] * V + cols[None, :], valid), float("-inf"))
    scaled = (logit - tl.max(logit, axis=1)[:, None]) * inv_t[:, None]
    key = tl.load(seed + m // TOKENS, mask=live, other=0)
    position = tl.load(positions + m, mask=live, other=0).to(tl.uint32)
    u = uniform(key[:, None], cols[None, :].to(tl.uint32), position[:, None], 0)
    z = tl.where(valid, scaled - tl.log(-tl.log(u)), float("-inf"))
    top, at = tl.max(z, axis=1, return_indices=True, return_indices_tie_break_left=True)
    tl.store(tile_z + m * TILES + tile, top, mask=live)
    tl.store(tile_zarg + m * TILES + tile, tile * cols.shape[0] + at, mask=live)
    tl.store(tile_mass + m * TILES + tile, tl.sum(tl.where(valid, tl.exp(scaled), 0.0), axis=1), mask=live)


@triton.jit
def logits_op(pid, pre, x_ptr, X_PARTS: tl.constexpr, norm_ptr, x_hat_ptr, w_ptr, logits, tile_max, tile_arg,
              positions, temperature, seed, tile_z, tile_zarg, tile_mass, vocab_valid, V: tl.constexpr, K: tl.constexpr,
              K_P: tl.constexpr, M: tl.constexpr, ROWS_P: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
              G: tl.constexpr, EPS: tl.constexpr, NORM: tl.constexpr, GREEDY: tl.constexpr, SAMPLED: tl.constexpr,
              M_P: tl.constexpr, TOKENS: tl.constexpr, DOT_IEEE: tl.constexpr, W_STAGES: tl.constexpr,
              NORM_ROWS: tl.constexpr):
    """fp32 logits of the CTA's vocabulary tiles; for a greedy head also each tile's max and
    first argmax per row, read back from this CTA's own logits stores, and for a sampling head
    (SAMPLED) each tile's part of the rows' first draw (``_first_draw``). Under tensor
    parallelism ``vocab_valid`` is how many of the rank's V rows are real ids (the rest pad the
    vocabulary): the tiles' parts leave the padding out; None: all V."""
    gemv_op(pid, pre, x_ptr, X_PARTS, norm_ptr, x_hat_ptr, w_ptr, None, None, None, None, None, False, 1, 1, logits,
            None, None, None, None, 1, N=V, K=K, K_P=K_P, M=M, ROWS_P=ROWS_P, BN=BN, BK=BK, SPLIT=1, G=G, EPS=EPS,
            NORM=NORM, HAS_BIAS=False, HAS_RESIDUAL=False, GATED=False, INTER=0, DOT_IEEE=DOT_IEEE, W_STAGES=W_STAGES,
            NORM_ROWS=NORM_ROWS, SEGMENTS=1, SEG1=V, SEG2=V)
    if GREEDY:
        tl.debug_barrier()  # this CTA's logits stores, before its threads read them back
        for tile in range(pid, (V + BN - 1) // BN, G):
            tile_parts(logits, tile, tile_max, tile_arg, positions, temperature, seed, tile_z, tile_zarg, tile_mass,
                       vocab_valid, V, M, ROWS_P, BN, SAMPLED, M_P, TOKENS)


@triton.jit
def tile_parts(logits, tile, tile_max, tile_arg, positions, temperature, seed, tile_z, tile_zarg, tile_mass,
               vocab_valid, V: tl.constexpr, M: tl.constexpr, ROWS_P: tl.constexpr, BN: tl.constexpr,
               SAMPLED: tl.constexpr, M_P: tl.constexpr, TOKENS: tl.constexpr):
    """What the argmax and sample ops take of one vocabulary tile of logits, per token row: its
    max and first argmax, and for a sampling head (SAMPLED) its part of the first draw."""
    TILES: tl.constexpr = (V + BN - 1) // BN
    r = tl.arange(0, ROWS_P)
    cols = tile * BN + tl.arange(0, BN)
    mask = (r[:, None] < M) & (cols[None, :] < V)
    vals = tl.where(mask, load_act(logits + r[:, None] * V + cols[None, :], mask), float("-inf"))
    if vocab_valid is not None:  # a rank's padding rows of the vocabulary (tensor parallelism)
        vals = tl.where(cols[None, :] < vocab_valid, vals, float("-inf"))
    best, where = tl.max(vals, axis=1, return_indices=True, return_indices_tie_break_left=True)
    tl.store(tile_max + r * TILES + tile, best, mask=r < M)
    tl.store(tile_arg + r * TILES + tile, tile * BN + where, mask=r < M)
    if SAMPLED:
        _first_draw(logits, cols, tile, temperature, seed, positions, tile_z, tile_zarg, tile_mass, V, M, M_P, TILES,
                    TOKENS)


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
        _greedy_ids(row, m, j, ids, next_ids, tokens, accepted, emitted, TOKENS)


@triton.jit
def _greedy_ids(row, m, j, ids, next_ids, tokens, accepted, emitted, TOKENS: tl.constexpr):
    """Store a row's greedy ids (``m``: its token rows, ``j`` their index, past TOKENS padding) and,
    in a verify band, the greedy verdict over them: a draft is kept where it is the id before it."""
    tl.store(next_ids + m, ids, mask=j < TOKENS)
    if TOKENS > 1:
        drafts = tl.load(tokens + m + 1, mask=j < TOKENS - 1, other=-1)  # token j + 1: the draft after j
        store_verdict(row, m, j, ids, drafts == ids, accepted, emitted, TOKENS)
