"""The sampling head's sample op: each token row's id drawn from its row's softmax within top-k
and top-p (``_draw``: a first draw over every id, whose parts the logits op's tiles made, kept
where it is allowed, else a second over the allowed set), a task per token row, and in a verify
band each token row's part of the speculative verdict (``sample_op``, ``_proposal_verdict``),
which ``verdict_op`` chains over the row; ``uniform`` is the counter-based generator every draw
takes its noise from. The allowed set's threshold comes from ``allowed.py``.
"""

import triton
import triton.language as tl

from .allowed import allowed_threshold, maxima_fail, tile_maxima, tiles_floor, walk_ahead, walk_first


@triton.jit
def uniform(seed, v, position, round):
    """A uniform draw in (0, 1) per vocabulary entry ``v``: Philox4x32-10 keyed by the row's seed,
    its counter (v, position, round, 0); its first word's top 23 bits plus a half, over 2²³ (exact
    in fp32, so never 0 or 1)."""
    zero = v * 0
    word, _, _, _ = tl.philox(seed, v, zero + position, zero + round, zero)
    return ((word >> 9).to(tl.float32) + 0.5) * (1.0 / 8388608.0)


@triton.jit
def sample_op(pid, pre, logits, tile_max, tile_arg, tile_z, tile_zarg, tile_mass, held_tiles, next_ids, positions,
              temperature, top_k, top_p, seed, tokens, token_emit, token_keep, draft_probs, DRAFT_PROBS: tl.constexpr,
              V: tl.constexpr, M: tl.constexpr, BN: tl.constexpr, TILES_P: tl.constexpr, G: tl.constexpr,
              TOKENS: tl.constexpr, VERDICT_ROUND: tl.constexpr):
    """next_ids[m]: each token row's id drawn by its row's settings (``_draw``); a task per token
    row, so a verify band's token rows draw side by side. There each token row also takes its
    part of the speculative verdict, the id it emits and whether it keeps the draft after it
    (``token_emit``, ``token_keep``), which ``verdict_op`` chains over the row: as the greedy
    head's, the drafts up to the first that is not the id drawn after the token before it are
    accepted, and the drawn id after them is emitted (the correction or the bonus token).
    For drafts a deterministic proposer made (its distribution one id), this is the
    speculative-sampling rule exactly: a draft d is accepted with probability p(d), and a
    rejected position's id is distributed as p without d, renormalized, which is what drawing x
    from p and keeping it when x ≠ d gives. For drafts drawn from a distribution q of the
    proposer's own, that rule still emits ids distributed as the target's (each emitted id is a
    draw from p; the drafts only decide how far the row goes), but it accepts d only with
    probability p(d); with DRAFT_PROBS the verdict takes q (``draft_probs``, [rows, drafts, V])
    and decides by the speculative-sampling rule (``_proposal_verdict``). A token row after the
    row's first rejection decides too (its verdict is not emitted): the token rows do not wait
    on each other."""
    for m in range(pid, M, G):
        row = m // TOKENS
        j = m % TOKENS
        temp = tl.load(temperature + row)
        p = tl.load(top_p + row)
        k = tl.load(top_k + row)
        key = tl.load(seed + row)
        position = tl.load(positions + m).to(tl.uint32)
        held_list = held_tiles + m * TILES_P  # the token row's scratch for its passes' lists of tiles
        pick, best, total, tau, norm, found = _draw(m, logits, held_list, tile_max, tile_arg, tile_z, tile_zarg,
                                                    tile_mass, temp, p, k, key, position, V, BN, TILES_P)
        tl.store(next_ids + m, pick)
        if TOKENS > 1:
            has_draft = j < TOKENS - 1
            draft = tl.load(tokens + m + 1, mask=has_draft, other=-1)  # token j + 1: the draft after j
            emit = pick
            keep = draft == pick
            if DRAFT_PROBS:  # noqa: SIM102 (compiled out without q; the inner branch is run time)
                if has_draft:
                    emit, keep = _proposal_verdict(m, row * (TOKENS - 1) + j, draft, pick, logits, held_list, best,
                                                   total, tau, norm, found, tile_max, draft_probs, temp, p, k, key,
                                                   position, V, BN, TILES_P, VERDICT_ROUND)
            tl.store(token_emit + m, emit)
            tl.store(token_keep + m, keep.to(tl.int32))


@triton.jit
def verdict_op(pid, pre, token_emit, token_keep, accepted, emitted, M: tl.constexpr, G: tl.constexpr,
               TOKENS: tl.constexpr, T_P: tl.constexpr):
    """A sampled verify band's verdict, a task per row, from its token rows' parts (``sample_op``'s
    ``token_emit`` and ``token_keep``)."""
    j = tl.arange(0, T_P)
    for row in range(pid, M // TOKENS, G):
        m = row * TOKENS + j
        emit = tl.load(token_emit + m, mask=j < TOKENS, other=-1, cache_modifier=".cg")
        keep = tl.load(token_keep + m, mask=j < TOKENS - 1, other=0, cache_modifier=".cg") != 0
        store_verdict(row, m, j, emit, keep, accepted, emitted, TOKENS)


@triton.jit
def store_verdict(row, m, j, emit, keep, accepted, emitted, TOKENS: tl.constexpr):
    """A verify band's verdict over a row's token rows (``m``; ``j`` their index, past TOKENS
    padding), given each one's id to emit and whether it keeps the draft after it (token j + 1):
    the row accepts its drafts up to the first not kept, ``accepted`` = how many, and emits
    ``emitted[0 … accepted]`` = those token rows' ids (the kept drafts, then the correction or
    the bonus token), −1 after them."""
    missed = tl.cumsum((~keep).to(tl.int32), axis=0)  # 0 while every draft so far was kept
    n = tl.sum(((missed == 0) & (j < TOKENS - 1)).to(tl.int32), axis=0)
    tl.store(accepted + row, n)
    tl.store(emitted + m, tl.where(j <= n, emit, -1), mask=j < TOKENS)


@triton.jit
def _proposal_verdict(m, draft_row, draft, pick, logits, held_list, best, total, tau, norm, found, tile_max,
                      draft_probs, temp, p, k, key, position, V: tl.constexpr, BN: tl.constexpr,
                      TILES_P: tl.constexpr, VERDICT_ROUND: tl.constexpr):
    """Token row m's verdict on ``draft``, which the proposer drew from q (``draft_probs`` row
    ``draft_row``): (the id to emit, whether the draft is kept), by the speculative-sampling rule
    over p, softmax(logits / temperature) renormalized over the row's allowed ids S (``_draw``'s
    top-k and top-p): keep d when u · q(d) < p(d), else emit a draw from max(0, p − q),
    renormalized (``_correction``). ``best``, ``total``,
    ``tau``, ``norm`` and ``found`` are ``_draw``'s: the row's largest logit, the mass of every
    id, and S's threshold and mass where its draw found them. p's normalizer is ``total`` where
    S is every id, else the mass at or above S's threshold (``allowed_threshold``, from the
    row's logits and its tiles' maxima in ``tile_max``, where the draw did not find it), which
    is not searched for where d is in S and u · q(d) < π(d) / total (p(d) is at least that, so
    d is kept whatever S's mass: a pass at most, as the draw's check). A greedy
    row (temperature or top_p 0) keeps d when it is its greedy id ``pick`` and emits ``pick``:
    the rule over a one-id p. The uniforms are the row's seed's at the token's position in
    rounds past the draw's (u: round VERDICT_ROUND at id d; the correction's noise: the round
    after), independent of ``pick``'s."""
    emit = pick
    keep = draft == pick
    if (temp > 0.0) & (p > 0.0):
        inv_t = 1.0 / temp
        q = draft_probs + draft_row * V
        in_vocabulary = (draft >= 0) & (draft < V)  # a draft outside the vocabulary is never kept
        d = tl.minimum(tl.maximum(draft, 0), V - 1)
        logit_d = tl.load(logits + m * V + d, cache_modifier=".cg")
        weight_d = tl.exp((logit_d - best) * inv_t)
        u_q = uniform(key, d.to(tl.uint32), position, VERDICT_ROUND) * tl.load(q + d)
        floor = tau  # S: the ids whose logit is at least it
        if ~found & ~(((k <= 0) | (k >= V)) & (p >= 1.0)):
            # p(d) = π(d) / π(S) ≥ π(d) / π(every id): where u · q(d) is below even that and d is
            # in S, d is kept whatever S's mass, and S's threshold is not searched for
            vals = tile_maxima(tile_max, m, V, BN, TILES_P)
            weight = tl.exp((vals - best) * inv_t)
            sure = in_vocabulary & (u_q < weight_d / total)
            if sure:
                sure = _allowed_at(logits + m * V, held_list, vals, weight, logit_d, best, inv_t, total, k, p, V, BN,
                                   TILES_P)
            if sure:
                floor, norm = logit_d, total
            else:
                floor, norm = allowed_threshold(logits + m * V, held_list, vals,
                                                tiles_floor(vals, weight, best, total, k, p), best, inv_t, total, k,
                                                p, V, BN, TILES_P)
        p_d = tl.where(logit_d >= floor, weight_d / norm, 0.0)
        keep = (u_q < p_d) & in_vocabulary
        emit = tl.where(keep, draft, pick)
        if ~keep:  # the correction: a draw from max(0, p − q) (p's own draw where fp32 leaves it no mass)
            emit = _correction(logits + m * V, held_list, tile_maxima(tile_max, m, V, BN, TILES_P), floor, norm, q,
                               best, inv_t, key, position, pick, V, BN, TILES_P, VERDICT_ROUND + 1)
    return emit, keep


@triton.jit
def _keep_first_best(z, v, top_z, best_id):
    """A Gumbel-max walk's step: each lane's largest z so far and its id. A lane's ids ascend with
    the walk's steps, so on a tie the first stays."""
    return tl.maximum(z, top_z), tl.where(z > top_z, v, best_id)


@triton.jit
def _first_of_best(top_z, best_id, V: tl.constexpr):
    """A Gumbel-max walk's draw: the first id of the largest z over the lanes; V where no lane has
    a finite z (its ids are V until one has)."""
    return tl.min(tl.where(top_z == tl.max(top_z, axis=0), best_id, V), axis=0)


@triton.jit
def _correction(row, held_list, vals, floor, norm, q, best, inv_t, key, position, pick, V: tl.constexpr,
                BN: tl.constexpr, TILES_P: tl.constexpr, ROUND: tl.constexpr):
    """A draw from max(0, p − q), renormalized, p = the row's softmax over S (the ids at or above
    ``floor``, of mass ``norm``): Gumbel-max with round ROUND's uniforms, the first id of the
    largest, over the tiles whose max (``vals``) is at or above the floor, since p and the excess
    are 0 elsewhere; ``pick`` where fp32 leaves the excess no mass."""
    GT: tl.constexpr = max(1, 256 // BN)
    top_z = tl.full([GT * BN], float("-inf"), tl.float32)  # a lane's best and its first id
    emit = tl.full([GT * BN], V, tl.int32)
    steps, dense, n, ahead, ahead_ok, ahead_v, tiles = walk_first(row, vals >= floor, held_list, GT, V, BN, TILES_P)
    for step in range(0, steps):
        logit, ok, v = ahead, ahead_ok, ahead_v
        ahead, ahead_ok, ahead_v, tiles = walk_ahead(row, held_list, n, dense, tiles, step, GT, V, BN)
        p_v = tl.where(logit >= floor, tl.exp((logit - best) * inv_t) / norm, 0.0)
        excess = p_v - tl.load(q + v, mask=ok, other=0.0)
        noise = uniform(key, v.to(tl.uint32), position, ROUND)
        positive = (excess > 0.0) & ok
        z = tl.where(positive, tl.log(tl.where(positive, excess, 1.0)) - tl.log(-tl.log(noise)), float("-inf"))
        top_z, emit = _keep_first_best(z, v, top_z, emit)
    first = _first_of_best(top_z, emit, V)
    return tl.where(first < V, first, pick)


@triton.jit
def _draw(m, logits, held_list, tile_max, tile_arg, tile_z, tile_zarg, tile_mass, temp, p, k, key, position,
          V: tl.constexpr, BN: tl.constexpr, TILES_P: tl.constexpr):
    """Token row m's id, drawn from softmax(logits / temperature) over its row's set S, the ids
    within its top_k (0: any) whose more likely ids hold less than top_p of the probability (both
    against the whole distribution). The first draw is over every id (Gumbel-max; its uniforms
    are round 0's, its parts the logits op's tiles'); it stands where S is every id (top_k 0,
    top_p ≥ 1: no pass at all) or where it lands in S (a pass over the tiles above it counts its
    more likely ids and their mass; none where the tiles' maxima already put it outside,
    ``maxima_fail``). Else the id is a second draw, over S alone: S's threshold
    (``allowed_threshold``), then one Gumbel-max pass over the ids at or above it with round 1's
    uniforms. This draws the softmax over S exactly: with π the softmax over every id, the first
    draw lands on an id y of S with probability π(y), the second, taken with probability
    1 − π(S), gives y with π(y) / π(S), and the two sum to π(y) / π(S). A row of temperature 0
    (or top_p ≤ 0) takes its greedy id, the first index of its largest logit. The uniforms come
    from the row's seed, the token's position and the round. ``temp``, ``p``, ``k`` and ``key``
    are the row's settings, ``position`` the token's; TILES_P is the tiles rounded up to a power
    of two, and ``held_list`` the token row's TILES_P entries of scratch for its passes' lists
    of tiles (``allowed.walk_first``). Returns the id, with what a verdict over the same distribution reuses
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
        weight = tl.exp(shift)  # each tile's max's mass
        total = tl.sum(weight * mass, axis=0)
        norm = total
        tiles_z += shift
        top = tl.max(tiles_z, axis=0)
        pick = tl.min(tl.where(tiles_z == top, tiles_zarg, V), axis=0)
        if ~(((k <= 0) | (k >= V)) & (p >= 1.0)):
            stands = _allowed_at(row, held_list, vals, weight, tl.load(row + pick, cache_modifier=".cg"), best,
                                 inv_t, total, k, p, V, BN, TILES_P)
            if ~stands:
                tau, norm = allowed_threshold(row, held_list, vals, tiles_floor(vals, weight, best, total, k, p),
                                              best, inv_t, total, k, p, V, BN, TILES_P)
                found = tl.full([], 1, tl.int1)
                pick = _draw_within(row, held_list, vals, tau, best, inv_t, key, position, V, BN, TILES_P)
    return pick, best, total, tau, norm, found


@triton.jit
def _allowed_at(row, held_list, vals, weight, x, best, inv_t, total, k, p, V: tl.constexpr, BN: tl.constexpr,
                TILES_P: tl.constexpr):
    """Whether an id of logit x is in the row's allowed set S: no pass where the tiles' maxima
    (``vals``, their masses ``weight``) already show the test failing at x (``maxima_fail``),
    else one over the tiles whose max is above x counts its more likely ids and their mass."""
    allowed = ~maxima_fail(x, vals, weight, k, p, total)
    if allowed:
        above, over = _above(row, held_list, vals, x, best, inv_t, V, BN, TILES_P)
        allowed = ((k <= 0) | (above < k)) & (over < p * total)
    return allowed


@triton.jit
def _above(row, held_list, vals, x, best, inv_t, V: tl.constexpr, BN: tl.constexpr, TILES_P: tl.constexpr):
    """How many of the row's logits are above x, and their mass, over the tiles whose max
    (``vals``) is above it."""
    GT: tl.constexpr = max(1, 256 // BN)
    count = tl.zeros([GT * BN], tl.int32)  # a lane's, summed after the walk
    over = tl.zeros([GT * BN], tl.float32)
    steps, dense, n, ahead, _, _, tiles = walk_first(row, vals > x, held_list, GT, V, BN, TILES_P)
    for step in range(0, steps):
        logit = ahead
        ahead, _, _, tiles = walk_ahead(row, held_list, n, dense, tiles, step, GT, V, BN)
        count += (logit > x).to(tl.int32)
        over += tl.where(logit > x, tl.exp((logit - best) * inv_t), 0.0)
    return tl.sum(count, axis=0), tl.sum(over, axis=0)


@triton.jit
def _draw_within(row, held_list, vals, tau, best, inv_t, key, position, V: tl.constexpr, BN: tl.constexpr,
                 TILES_P: tl.constexpr):
    """A Gumbel-max draw among the row's ids at or above τ, with round 1's uniforms, over the
    tiles whose max is: the first id of the largest perturbed logit."""
    GT: tl.constexpr = max(1, 256 // BN)
    top_z = tl.full([GT * BN], float("-inf"), tl.float32)  # a lane's best and its first id
    pick = tl.full([GT * BN], V, tl.int32)
    steps, dense, n, ahead, ahead_ok, ahead_v, tiles = walk_first(row, vals >= tau, held_list, GT, V, BN, TILES_P)
    for step in range(0, steps):
        logit, ok, v = ahead, ahead_ok, ahead_v
        ahead, ahead_ok, ahead_v, tiles = walk_ahead(row, held_list, n, dense, tiles, step, GT, V, BN)
        u = uniform(key, v.to(tl.uint32), position, 1)
        z = tl.where(ok & (logit >= tau), (logit - best) * inv_t - tl.log(-tl.log(u)), float("-inf"))
        top_z, pick = _keep_first_best(z, v, top_z, pick)
    return _first_of_best(top_z, pick, V)
