"""The ops around the layers: the token embedding, the LM head's logits, the greedy argmax and
the sampler.

``logits_op`` is the GEMV op over the vocabulary (x̂ · W_headᵀ in tiles of BN rows, fp32
logits) and, for a greedy or sampling head, each tile's max and first argmax per row
(``tile_parts``), for a sampling head also each tile's part of the rows' first draw;
``argmax_op`` (a task per row) reduces the tiles' partials to the next ids, ties to the lowest
id as ``torch.argmax`` does, and ``sample_op`` (a task per row) draws them; in a speculative
verify band either returns the row's verdict over its ids.
"""

import triton
import triton.language as tl

from .common import load_act
from .gemv import gemv_op


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
def _uniform(seed, v, position, round):
    """A uniform draw in (0, 1) per vocabulary entry ``v``: Philox4x32-10 keyed by the row's seed,
    its counter (v, position, round, 0); its first word's top 23 bits plus a half, over 2²³ (exact
    in fp32, so never 0 or 1)."""
    zero = v * 0
    word, _, _, _ = tl.philox(seed, v, zero + position, zero + round, zero)
    return ((word >> 9).to(tl.float32) + 0.5) * (1.0 / 8388608.0)


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
    u = _uniform(key[:, None], cols[None, :].to(tl.uint32), position[:, None], 0)
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
    in a verify band, the greedy verdict over them."""
    tl.store(next_ids + m, ids, mask=j < TOKENS)
    if TOKENS > 1:
        drafts = tl.load(tokens + m + 1, mask=j < TOKENS - 1, other=-1)  # token j + 1: the draft after j
        missed = tl.cumsum((drafts != ids).to(tl.int32), axis=0)  # 0 while every draft so far matched
        n = tl.sum(((missed == 0) & (j < TOKENS - 1)).to(tl.int32), axis=0)
        tl.store(accepted + row, n)
        tl.store(emitted + m, tl.where(j <= n, ids, -1), mask=j < TOKENS)


@triton.jit
def sample_op(pid, pre, logits, tile_max, tile_arg, tile_z, tile_zarg, tile_mass, next_ids, positions, temperature,
              top_k, top_p, seed, tokens, accepted, emitted, draft_probs, DRAFT_PROBS: tl.constexpr, V: tl.constexpr,
              M: tl.constexpr, BN: tl.constexpr, TILES_P: tl.constexpr, G: tl.constexpr, TOKENS: tl.constexpr,
              BV: tl.constexpr, VERDICT_ROUND: tl.constexpr):
    """next_ids[m]: each token row's id drawn by its row's settings (``_draw``); a task per row of
    TOKENS token rows. A verify band's rows (TOKENS > 1) also get the speculative verdict, as the
    greedy head's: the drafts up to the first that is not the id drawn after the token before it
    are accepted, and the drawn id after them is emitted (the correction or the bonus token).
    For drafts a deterministic proposer made (its distribution one id), this is the
    speculative-sampling rule exactly: a draft d is accepted with probability p(d), and a
    rejected position's id is distributed as p without d, renormalized, which is what drawing x
    from p and keeping it when x ≠ d gives. For drafts drawn from a distribution q of the
    proposer's own, that rule still emits ids distributed as the target's (each emitted id is a
    draw from p; the drafts only decide how far the row goes), but it accepts d only with
    probability p(d); with DRAFT_PROBS the verdict takes q (``draft_probs``, [rows, drafts, V])
    and decides by the speculative-sampling rule (``_proposal_verdict``)."""
    for row in range(pid, M // TOKENS, G):
        # the row's settings, read once for its token rows
        temp = tl.load(temperature + row)
        p = tl.load(top_p + row)
        k = tl.load(top_k + row)
        key = tl.load(seed + row)
        alive = tl.full([], 1, tl.int1)  # every draft so far accepted
        n = tl.full([], 0, tl.int32)
        for j in range(TOKENS):
            m = row * TOKENS + j
            position = tl.load(positions + m).to(tl.uint32)
            pick, best, total, tau, norm, found = _draw(m, logits, tile_max, tile_arg, tile_z, tile_zarg, tile_mass,
                                                        temp, p, k, key, position, V, BN, TILES_P)
            tl.store(next_ids + m, pick)
            if TOKENS > 1:
                has_draft = j < TOKENS - 1
                draft = tl.load(tokens + m + 1, mask=has_draft, other=-1)  # token j + 1: the draft after j
                emit = pick
                keep = draft == pick
                if DRAFT_PROBS:  # noqa: SIM102 (compiled out without q; the inner branch is run time)
                    if alive & has_draft:
                        emit, keep = _proposal_verdict(m, row * (TOKENS - 1) + j, draft, pick, logits, best, total,
                                                       tau, norm, found, tile_max, draft_probs, temp, p, k, key,
                                                       position, V, BN, BV, TILES_P, VERDICT_ROUND)
                tl.store(emitted + m, tl.where(alive, emit, -1))
                alive = alive & has_draft & keep
                n += alive.to(tl.int32)
        if TOKENS > 1:
            tl.store(accepted + row, n)


@triton.jit
def _proposal_verdict(m, draft_row, draft, pick, logits, best, total, tau, norm, found, tile_max, draft_probs, temp,
                      p, k, key, position, V: tl.constexpr, BN: tl.constexpr, BV: tl.constexpr,
                      TILES_P: tl.constexpr, VERDICT_ROUND: tl.constexpr):
    """Token row m's verdict on ``draft``, which the proposer drew from q (``draft_probs`` row
    ``draft_row``): (the id to emit, whether the draft is kept), by the speculative-sampling rule
    over p, softmax(logits / temperature) renormalized over the row's allowed ids S (``_draw``'s
    top-k and top-p): keep d when u · q(d) < p(d), else emit a draw from max(0, p − q),
    renormalized (Gumbel-max in one pass over the row's logits and q). ``best``, ``total``,
    ``tau``, ``norm`` and ``found`` are ``_draw``'s: the row's largest logit, the mass of every
    id, and S's threshold and mass where its draw found them. p's normalizer is ``total`` where
    S is every id, else the mass at or above S's threshold (``_allowed_threshold``, from the
    row's logits and its tiles' maxima in ``tile_max``, where the draw did not find it). A greedy
    row (temperature or top_p 0) keeps d when it is its greedy id ``pick`` and emits ``pick``:
    the rule over a one-id p. The uniforms are the row's seed's at the token's position in
    rounds past the draw's (u: round VERDICT_ROUND at id d; the correction's noise: the round
    after), independent of ``pick``'s."""
    n = tl.arange(0, BV)
    emit = pick
    keep = draft == pick
    if (temp > 0.0) & (p > 0.0):
        inv_t = 1.0 / temp
        floor = tau  # S: the ids whose logit is at least it
        if ~found & ~(((k <= 0) | (k >= V)) & (p >= 1.0)):
            floor, norm = _allowed_threshold(logits + m * V, _tile_maxima(tile_max, m, V, BN, TILES_P), best, inv_t,
                                             total, k, p, V, BN, TILES_P)
        q = draft_probs + draft_row * V
        d = tl.minimum(tl.maximum(draft, 0), V - 1)  # a draft outside the vocabulary is never kept
        logit_d = tl.load(logits + m * V + d, cache_modifier=".cg")
        p_d = tl.where(logit_d >= floor, tl.exp((logit_d - best) * inv_t) / norm, 0.0)
        u = _uniform(key, d.to(tl.uint32), position, VERDICT_ROUND)
        keep = (u * tl.load(q + d) < p_d) & (draft >= 0) & (draft < V)
        emit = tl.where(keep, draft, pick)
        if ~keep:  # the correction: a draw from max(0, p − q) (p's own draw where fp32 leaves it no mass)
            top_z = tl.full([], float("-inf"), tl.float32)
            for c in range(0, V, BV):
                v = c + n
                logit = tl.load(logits + m * V + v, mask=v < V, other=float("-inf"), cache_modifier=".cg")
                p_v = tl.where(logit >= floor, tl.exp((logit - best) * inv_t) / norm, 0.0)
                excess = p_v - tl.load(q + v, mask=v < V, other=0.0)
                noise = _uniform(key, v.to(tl.uint32), position, VERDICT_ROUND + 1)
                positive = (excess > 0.0) & (v < V)
                z = tl.where(positive, tl.log(tl.where(positive, excess, 1.0)) - tl.log(-tl.log(noise)), float("-inf"))
                chunk_z, at = tl.max(z, axis=0, return_indices=True, return_indices_tie_break_left=True)
                emit = tl.where(chunk_z > top_z, c + at, emit)
                top_z = tl.maximum(chunk_z, top_z)
    return emit, keep


@triton.jit
def _tile_maxima(tile_max, m, V: tl.constexpr, BN: tl.constexpr, TILES_P: tl.constexpr):
    """Token row m's tile maxima, −inf past its tiles."""
    t = tl.arange(0, TILES_P)
    return tl.load(tile_max + m * ((V + BN - 1) // BN) + t, mask=t < (V + BN - 1) // BN, other=float("-inf"),
                   cache_modifier=".cg")


@triton.jit
def _allowed_threshold(row, vals, best, inv_t, total, k, p, V: tl.constexpr, BN: tl.constexpr,
                       TILES_P: tl.constexpr):
    """S's threshold for a row whose top_k or top_p restricts it, and S's mass (of
    exp((logit − best) · inv_t)): S = the ids x whose more likely ids number fewer than k (k > 0)
    and hold less than p · total, so S is every id whose logit is at least the smallest logit τ
    that passes (the test is monotone in the logit). τ is found by SPLITS-ary search: a pass
    counts, at each of SPLITS thresholds, the ids above it and their mass, and the interval
    (lo, hi] that holds τ (the test fails at lo and passes at hi) shrinks to the pair of
    thresholds around the last that passes, until the ids inside it share one logit. lo starts
    at the tiles' floor (``_tiles_floor``) and a pass reads only the tiles whose max (``vals``,
    the row's tile maxima) is above lo, so a top-k of k reads about k tiles however large the
    vocabulary. The first pass's thresholds close in on the floor geometrically; with no floor
    they sit 2^(i/2) temperatures below the best logit (and where every one passes, τ lies
    between the row's least logit and the lowest)."""
    SPLITS: tl.constexpr = 16
    TILES: tl.constexpr = (V + BN - 1) // BN
    GT: tl.constexpr = max(1, 256 // BN)  # tiles a step of a pass reads: 256 ids
    i = tl.arange(0, SPLITS)
    lo = _tiles_floor(best, inv_t, total, k, p, vals, TILES_P)
    hi = best
    tau = best
    count_hi = tl.full([], 0, tl.int32)  # the ids above hi, and their mass
    over_hi = tl.full([], 0.0, tl.float32)
    found = tl.full([], 0, tl.int1)
    rounds = 0
    while (~found) & (rounds < 24):
        if rounds > 0:  # descending, strictly inside (lo, hi)
            cuts = hi - (hi - lo) * (i + 1).to(tl.float32) / (SPLITS + 1)
        elif lo > float("-inf"):  # descending, from hi toward the floor: lo + 2^(−3(i+1)/4) of the way
            cuts = lo + (hi - lo) * tl.exp2((i + 1).to(tl.float32) * -0.75)
        else:  # descending: best − 1, − √2, − 2, … − 2^7.5 temperatures
            cuts = best - tl.exp2(i.to(tl.float32) * 0.5) / inv_t
        count, over, inside_min, inside_max, least = _cut_pass(row, vals, lo, hi, cuts, count_hi, over_hi, best,
                                                               inv_t, V, BN, TILES_P, SPLITS, GT)
        passes = ((k <= 0) | (count < k)) & (over < p * total)
        found = inside_min == inside_max  # one logit left in (lo, hi]: τ
        tau = tl.where(found, inside_max, tau)
        if ~found:  # (lo, hi] ← (the first cut that fails, the last that passes]
            last = tl.max(tl.where(passes, i, -1), axis=0)
            hi = tl.where(last >= 0, tl.sum(tl.where(i == last, cuts, 0.0), axis=0), hi)
            count_hi = tl.where(last >= 0, tl.sum(tl.where(i == last, count, 0), axis=0), count_hi)
            over_hi = tl.where(last >= 0, tl.sum(tl.where(i == last, over, 0.0), axis=0), over_hi)
            # where every cut of a pass with no floor passes, just below the least logit: the test
            # fails there (every id is above it: V ≥ k where 0 < k < V, else a whole mass ≥ p < 1);
            # below it by at least 8 of its ulps, so at any magnitude
            lo = tl.where(last < SPLITS - 1, tl.sum(tl.where(i == last + 1, cuts, 0.0), axis=0),
                          tl.where(lo == float("-inf"), least - 1.0 - tl.abs(least) * 1e-6, lo))
        rounds += 1
    tau = tl.where(found, tau, hi)
    mass = tl.full([], 0.0, tl.float32)  # S's: the ids at or above τ
    held = vals >= tau
    steps, dense = _held_steps(held, TILES, GT)
    after = tl.full([], -1, tl.int32)
    for step in range(0, steps):
        logit, _, _, after = _step_ids(row, held, after, step, dense, GT, V, BN, TILES_P)
        mass += tl.sum(tl.where(logit >= tau, tl.exp((logit - best) * inv_t), 0.0), axis=0)
    return tau, mass


@triton.jit
def _tiles_floor(best, inv_t, total, k, p, vals, TILES_P: tl.constexpr):
    """A logit at which the allowed-set test fails, from the row's tile maxima ``vals`` alone
    (−inf where they show none): a tile whose max is above c holds at least that id above c, so
    where the tiles with a max above c number k or more, or their maxima's mass reaches p of the
    whole, so do the ids (the mass with 1e-5 to spare for fp32's rounding of both sums). The
    highest such c, by bisection over the floats in their order (as int32 keys: 32 halvings, each
    two reductions over the maxima), is just below a tile's max: only the tiles whose max is
    above it hold an id of S."""
    weight = tl.exp((vals - best) * inv_t)
    fails = (((k > 0) & (tl.sum((vals > float("-inf")).to(tl.int32), axis=0) >= k))
             | (tl.sum(weight, axis=0) >= p * total * 1.00001))
    lo = _float_key(tl.full([], float("-inf"), tl.float32)).to(tl.int64)  # fails, where any c does
    hi = _float_key(best).to(tl.int64)  # passes: no tile's max is above the best logit
    while fails & (hi - lo > 1):
        mid = lo + (hi - lo) // 2
        above = vals > _key_float(mid.to(tl.int32))
        fails_mid = (((k > 0) & (tl.sum(above.to(tl.int32), axis=0) >= k))
                     | (tl.sum(tl.where(above, weight, 0.0), axis=0) >= p * total * 1.00001))
        lo = tl.where(fails_mid, mid, lo)
        hi = tl.where(fails_mid, hi, mid)
    return tl.where(fails, _key_float(lo.to(tl.int32)), float("-inf"))


@triton.jit
def _float_key(x):
    """An int32 whose order is fp32 ``x``'s (not NaN)."""
    bits = x.to(tl.int32, bitcast=True)
    return tl.where(bits < 0, bits ^ 0x7FFFFFFF, bits)


@triton.jit
def _key_float(key):
    """``_float_key``'s inverse."""
    return tl.where(key < 0, key ^ 0x7FFFFFFF, key).to(tl.float32, bitcast=True)


@triton.jit
def _cut_pass(row, vals, lo, hi, cuts, count_hi, over_hi, best, inv_t, V: tl.constexpr, BN: tl.constexpr,
              TILES_P: tl.constexpr, SPLITS: tl.constexpr, GT: tl.constexpr):
    """A pass of ``_allowed_threshold``'s search over the tiles whose max is above lo (every id
    above lo is in one): at each cut, the ids above it and their mass (``count_hi`` and
    ``over_hi``, those above hi, an earlier pass's, and the ids inside (lo, hi] this one counts:
    a step with none inside skips the cuts); the least and the greatest logit in (lo, hi]; and the
    least logit read (the row's where lo is −inf). A step reads GT tiles."""
    held = vals > lo
    steps, dense = _held_steps(held, (V + BN - 1) // BN, GT)
    after = tl.full([], -1, tl.int32)
    count = tl.zeros([SPLITS], tl.int32) + count_hi
    over = tl.zeros([SPLITS], tl.float32) + over_hi
    inside_min = tl.full([GT * BN], float("inf"), tl.float32)
    inside_max = tl.full([GT * BN], float("-inf"), tl.float32)
    least = tl.full([GT * BN], float("inf"), tl.float32)
    for step in range(0, steps):
        logit, ok, _, after = _step_ids(row, held, after, step, dense, GT, V, BN, TILES_P)
        inside = (logit > lo) & (logit <= hi)
        if tl.max(inside.to(tl.int32), axis=0) > 0:
            above = inside[:, None] & (logit[:, None] > cuts[None, :])
            count += tl.sum(above.to(tl.int32), axis=0)
            over += tl.sum(tl.where(above, tl.exp((logit - best) * inv_t)[:, None], 0.0), axis=0)
            inside_min = tl.minimum(inside_min, tl.where(inside, logit, float("inf")))
            inside_max = tl.maximum(inside_max, tl.where(inside, logit, float("-inf")))
        least = tl.minimum(least, tl.where(ok, logit, float("inf")))
    return count, over, tl.min(inside_min, axis=0), tl.max(inside_max, axis=0), tl.min(least, axis=0)


@triton.jit
def _held_steps(held, TILES: tl.constexpr, GT: tl.constexpr):
    """How a pass walks the tiles ``held`` marks (those that may hold an id it counts): its steps
    of GT tiles, and whether it walks every tile in order instead (where over half are held,
    gathering them would cost more than it skips)."""
    n = tl.sum(held.to(tl.int32), axis=0)
    dense = n * 2 > TILES
    return tl.where(dense, (TILES + GT - 1) // GT, (n + GT - 1) // GT), dense


@triton.jit
def _step_ids(row, held, after, step, dense, GT: tl.constexpr, V: tl.constexpr, BN: tl.constexpr,
              TILES_P: tl.constexpr):
    """A pass's step: GT · BN logits, −inf past the vocabulary (and past the last held tile),
    which of them are ids, their ids, and the last tile it took. Walking densely, the step'th GT
    tiles in order (an unheld tile's ids are at or below the pass's bound, where they count for
    nothing it finds); else the next GT held tiles after tile ``after``."""
    e = tl.arange(0, GT * BN)
    last = after
    if dense:
        v = step * (GT * BN) + e
        ok = v < V
    else:
        t = tl.arange(0, TILES_P)
        v = tl.zeros([GT * BN], tl.int32)
        ok = tl.zeros([GT * BN], tl.int1)
        for g in tl.static_range(GT):
            last = tl.min(tl.where(held & (t > last), t, TILES_P), axis=0)  # TILES_P: past the last held tile
            part = e // BN == g
            v = tl.where(part, last * BN + e % BN, v)
            ok = tl.where(part, last < TILES_P, ok)
        ok = ok & (v < V)
    return tl.load(row + v, mask=ok, other=float("-inf"), cache_modifier=".cg"), ok, v, last


@triton.jit
def _draw(m, logits, tile_max, tile_arg, tile_z, tile_zarg, tile_mass, temp, p, k, key, position, V: tl.constexpr,
          BN: tl.constexpr, TILES_P: tl.constexpr):
    """Token row m's id, drawn from softmax(logits / temperature) over its row's set S, the ids
    within its top_k (0: any) whose more likely ids hold less than top_p of the probability (both
    against the whole distribution). The first draw is over every id (Gumbel-max; its uniforms
    are round 0's, its parts the logits op's tiles'); it stands where S is every id (top_k 0,
    top_p ≥ 1: no pass at all) or where it lands in S (a pass over the tiles above it counts its
    more likely ids and their mass). Else the id is a second draw, over S alone: S's threshold
    (``_allowed_threshold``), then one Gumbel-max pass over the ids at or above it with round 1's
    uniforms. This draws the softmax over S exactly: with π the softmax over every id, the first
    draw lands on an id y of S with probability π(y), the second, taken with probability
    1 − π(S), gives y with π(y) / π(S), and the two sum to π(y) / π(S). A row of temperature 0
    (or top_p ≤ 0) takes its greedy id, the first index of its largest logit. The uniforms come
    from the row's seed, the token's position and the round. ``temp``, ``p``, ``k`` and ``key``
    are the row's settings, ``position`` the token's; TILES_P is the tiles rounded up to a power
    of two. Returns the id, with what a verdict over the same distribution reuses
    (``_proposal_verdict``): the row's largest logit, the mass of every id (0 for a greedy row),
    and S's threshold and mass where the second draw found them (else −inf and the mass of every
    id), and whether it did."""
    TILES: tl.constexpr = (V + BN - 1) // BN
    t = tl.arange(0, TILES_P)
    row = logits + m * V
    # every load up front, so their L2 round trips overlap
    part = m * TILES + t
    vals = tl.load(tile_max + part, mask=t < TILES, other=float("-inf"), cache_modifier=".cg")
    args = tl.load(tile_arg + part, mask=t < TILES, other=V, cache_modifier=".cg")
    mass = tl.load(tile_mass + part, mask=t < TILES, other=0.0, cache_modifier=".cg")
    tiles_z = tl.load(tile_z + part, mask=t < TILES, other=float("-inf"), cache_modifier=".cg")
    tiles_zarg = tl.load(tile_zarg + part, mask=t < TILES, other=V, cache_modifier=".cg")
    best = tl.max(vals, axis=0)
    pick = tl.min(tl.where(vals == best, args, V), axis=0)
    total = tl.full([], 0.0, tl.float32)
    tau = tl.full([], float("-inf"), tl.float32)
    norm = tl.full([], 0.0, tl.float32)
    found = tl.full([], 0, tl.int1)
    if (temp > 0.0) & (p > 0.0):
        inv_t = 1.0 / temp
        shift = (vals - best) * inv_t  # the tiles' parts, from each tile's max to the row's
        total = tl.sum(tl.exp(shift) * mass, axis=0)
        norm = total
        tiles_z += shift
        top = tl.max(tiles_z, axis=0)
        pick = tl.min(tl.where(tiles_z == top, tiles_zarg, V), axis=0)
        if ~(((k <= 0) | (k >= V)) & (p >= 1.0)):
            above, over_mass = _above(row, vals, tl.load(row + pick, cache_modifier=".cg"), best, inv_t, V, BN,
                                      TILES_P)
            if ~(((k <= 0) | (above < k)) & (over_mass < p * total)):
                tau, norm = _allowed_threshold(row, vals, best, inv_t, total, k, p, V, BN, TILES_P)
                found = tl.full([], 1, tl.int1)
                pick = _draw_within(row, vals, tau, best, inv_t, key, position, V, BN, TILES_P)
    return pick, best, total, tau, norm, found


@triton.jit
def _above(row, vals, x, best, inv_t, V: tl.constexpr, BN: tl.constexpr, TILES_P: tl.constexpr):
    """How many of the row's logits are above x, and their mass, over the tiles whose max
    (``vals``) is above it."""
    GT: tl.constexpr = max(1, 256 // BN)
    held = vals > x
    steps, dense = _held_steps(held, (V + BN - 1) // BN, GT)
    after = tl.full([], -1, tl.int32)
    count = tl.full([], 0, tl.int32)
    over = tl.full([], 0.0, tl.float32)
    for step in range(0, steps):
        logit, _, _, after = _step_ids(row, held, after, step, dense, GT, V, BN, TILES_P)
        count += tl.sum((logit > x).to(tl.int32), axis=0)
        over += tl.sum(tl.where(logit > x, tl.exp((logit - best) * inv_t), 0.0), axis=0)
    return count, over


@triton.jit
def _draw_within(row, vals, tau, best, inv_t, key, position, V: tl.constexpr, BN: tl.constexpr,
                 TILES_P: tl.constexpr):
    """A Gumbel-max draw among the row's ids at or above τ, with round 1's uniforms, over the
    tiles whose max is: the first id of the largest perturbed logit."""
    GT: tl.constexpr = max(1, 256 // BN)
    held = vals >= tau
    steps, dense = _held_steps(held, (V + BN - 1) // BN, GT)
    after = tl.full([], -1, tl.int32)
    top_z = tl.full([], float("-inf"), tl.float32)
    pick = tl.full([], 0, tl.int32)
    for step in range(0, steps):
        logit, ok, v, after = _step_ids(row, held, after, step, dense, GT, V, BN, TILES_P)
        u = _uniform(key, v.to(tl.uint32), position, 1)
        z = tl.where(ok & (logit >= tau), (logit - best) * inv_t - tl.log(-tl.log(u)), float("-inf"))
        step_z, at = tl.max(z, axis=0, return_indices=True, return_indices_tie_break_left=True)
        at_id = tl.sum(tl.where(tl.arange(0, GT * BN) == at, v, 0), axis=0)
        pick = tl.where(step_z > top_z, at_id, pick)
        top_z = tl.maximum(step_z, top_z)
    return pick
