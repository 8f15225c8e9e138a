"""The allowed set of a sampling row whose top-k or top-p restricts it: its threshold (the least
logit that passes the membership test, which is monotone in the logit) and its mass, found in one
CTA from the row's logits and its tiles' maxima (``allowed_threshold``), with the passes that
read only the tiles that can hold an id above a bound (``walk_first``, ``walk_ahead``), which the
sample op's draws walk too.
"""

import triton
import triton.language as tl


@triton.jit
def tile_maxima(tile_max, m, V: tl.constexpr, BN: tl.constexpr, TILES_P: tl.constexpr):
    """Token row m's tile maxima, −inf past its tiles."""
    t = tl.arange(0, TILES_P)
    return tl.load(tile_max + m * ((V + BN - 1) // BN) + t, mask=t < (V + BN - 1) // BN, other=float("-inf"),
                   cache_modifier=".cg")


@triton.jit
def allowed_threshold(row, held_list, vals, floor, best, inv_t, total, k, p, V: tl.constexpr, BN: tl.constexpr,
                      TILES_P: tl.constexpr):
    """S's threshold for a row whose top_k or top_p restricts it, and S's mass (of
    exp((logit − best) · inv_t)): S = the ids x whose more likely ids number fewer than k (k > 0)
    and hold less than p · total, so S is every id whose logit is at least the smallest logit τ
    that passes (the test is monotone in the logit). τ is found by SPLITS-ary search: a pass
    counts, at each of SPLITS thresholds, the ids above it and their mass, and the interval
    (lo, hi] that holds τ (the test fails at lo and passes at hi) shrinks to the pair of
    thresholds around the last that passes, until the ids inside it share one logit. lo starts
    at the tiles' ``floor`` (``tiles_floor``) and a pass reads only the tiles whose max (``vals``,
    the row's tile maxima) is above lo, so a top-k of k reads about k tiles however large the
    vocabulary. The first pass's thresholds close in on the floor geometrically; with no floor
    they sit 2^(i/2) temperatures below the best logit (and where every one passes, τ lies
    between the row's least logit and the lowest). ``held_list`` is the token row's scratch for
    the passes' lists of tiles (``walk_first``)."""
    SPLITS: tl.constexpr = 16
    GT: tl.constexpr = max(1, 256 // BN)  # tiles a step of a pass reads: 256 ids
    i = tl.arange(0, SPLITS)
    lo = floor
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
        count, over, inside_min, inside_max, least = _cut_pass(row, held_list, vals, lo, hi, cuts, count_hi, over_hi,
                                                               best, inv_t, V, BN, TILES_P, SPLITS, GT)
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
    mass = tl.zeros([GT * BN], tl.float32)  # S's: the ids at or above τ, a sum a lane
    steps, dense, n, ahead, _, _, tiles = walk_first(row, vals >= tau, held_list, GT, V, BN, TILES_P)
    for step in range(0, steps):
        logit = ahead
        ahead, _, _, tiles = walk_ahead(row, held_list, n, dense, tiles, step, GT, V, BN)
        mass += tl.where(logit >= tau, tl.exp((logit - best) * inv_t), 0.0)
    return tau, tl.sum(mass, axis=0)


@triton.jit
def tiles_floor(vals, weight, best, total, k, p):
    """A logit at which the allowed-set test fails, from the row's tile maxima ``vals`` alone (and
    their masses ``weight``, exp((max − best) · inv_t)), −inf where they show none: a tile whose
    max is above c holds at least that id above c, so where the tiles with a max above c number
    k or more, or their maxima's mass reaches p of the whole, so do the ids (the mass with 1e-5
    to spare for fp32's rounding of both sums). The highest such c, by bisection over the floats
    in their order (as int32 keys: 32 halvings, each two reductions over the maxima), is just
    below a tile's max: only the tiles whose max is above it hold an id of S."""
    fails = maxima_fail(float("-inf"), vals, weight, k, p, total)
    lo = _float_key(tl.full([], float("-inf"), tl.float32)).to(tl.int64)  # fails, where any c does
    hi = _float_key(best).to(tl.int64)  # passes: no tile's max is above the best logit
    while fails & (hi - lo > 1):
        mid = lo + (hi - lo) // 2
        fails_mid = maxima_fail(_key_float(mid.to(tl.int32)), vals, weight, k, p, total)
        lo = tl.where(fails_mid, mid, lo)
        hi = tl.where(fails_mid, hi, mid)
    return tl.where(fails, _key_float(lo.to(tl.int32)), float("-inf"))


@triton.jit
def maxima_fail(c, vals, weight, k, p, total):
    """Whether the tiles' maxima alone show the allowed-set test failing at logit c: k or more
    maxima above it, or their mass (``weight``: exp((max − best) · inv_t)) at p of the whole. The
    test fails at c exactly where c is at or below ``tiles_floor`` (it is monotone in c)."""
    above = vals > c
    return (((k > 0) & (tl.sum(above.to(tl.int32), axis=0) >= k))
            | (tl.sum(tl.where(above, weight, 0.0), axis=0) >= p * total * 1.00001))


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
def _cut_pass(row, held_list, vals, lo, hi, cuts, count_hi, over_hi, best, inv_t, V: tl.constexpr, BN: tl.constexpr,
              TILES_P: tl.constexpr, SPLITS: tl.constexpr, GT: tl.constexpr):
    """A pass of ``allowed_threshold``'s search over the tiles whose max is above lo (every id
    above lo is in one): at each cut, the ids above it and their mass (``count_hi`` and
    ``over_hi``, those above hi, an earlier pass's, and the ids inside (lo, hi] this one counts:
    a step with none inside skips the cuts); the least and the greatest logit in (lo, hi]; and the
    least logit read (the row's where lo is −inf). Its sums stay a lane's until the walk ends: a
    step's one reduction across the CTA is the test for ids inside."""
    # a count and a mass a cut and lane, summed after the walk; cut-major, so that a step's ids
    # broadcast over the cuts in the layout they were loaded in (no exchange through shared memory)
    count = tl.zeros([SPLITS, GT * BN], tl.int32)
    over = tl.zeros([SPLITS, GT * BN], tl.float32)
    inside_min = tl.full([GT * BN], float("inf"), tl.float32)
    inside_max = tl.full([GT * BN], float("-inf"), tl.float32)
    least = tl.full([GT * BN], float("inf"), tl.float32)
    steps, dense, n, ahead, ahead_ok, _, tiles = walk_first(row, vals > lo, held_list, GT, V, BN, TILES_P)
    for step in range(0, steps):
        logit, ok = ahead, ahead_ok
        ahead, ahead_ok, _, tiles = walk_ahead(row, held_list, n, dense, tiles, step, GT, V, BN)
        inside = (logit > lo) & (logit <= hi)
        if tl.max(inside.to(tl.int32), axis=0) > 0:
            above = inside[None, :] & (logit[None, :] > cuts[:, None])
            count += above.to(tl.int32)
            over += tl.where(above, tl.exp((logit - best) * inv_t)[None, :], 0.0)
            inside_min = tl.minimum(inside_min, tl.where(inside, logit, float("inf")))
            inside_max = tl.maximum(inside_max, tl.where(inside, logit, float("-inf")))
        least = tl.minimum(least, tl.where(ok, logit, float("inf")))
    return (tl.sum(count, axis=1) + count_hi, tl.sum(over, axis=1) + over_hi, tl.min(inside_min, axis=0),
            tl.max(inside_max, axis=0), tl.min(least, axis=0))


@triton.jit
def walk_first(row, held, held_list, GT: tl.constexpr, V: tl.constexpr, BN: tl.constexpr, TILES_P: tl.constexpr):
    """The start of a pass over the tiles ``held`` marks (those that may hold an id it counts), a
    step GT tiles: its steps; whether it walks every tile in order instead (where over half are
    held, an unheld tile's ids being at or below the pass's bound, where they count for nothing
    it finds); the tiles held; its first step's logits, which of them are ids and their ids; and
    its second step's tiles. Walking the held tiles, it first lists them in ``held_list`` (the
    token row's scratch, TILES_P entries; between CTA barriers, since the pass before may still
    be reading the list and every thread reads all of it), so that a step finds its tiles with
    one load ahead of it instead of a search across the CTA a tile."""
    TILES: tl.constexpr = (V + BN - 1) // BN
    n = tl.sum(held.to(tl.int32), axis=0)
    dense = n * 2 > TILES
    if ~dense:
        tl.debug_barrier()
        tl.store(held_list + tl.cumsum(held.to(tl.int32), axis=0) - 1, tl.arange(0, TILES_P), mask=held)
        tl.debug_barrier()
    logit, ok, v = _step_logits(row, _step_tiles(held_list, n, 0, dense, GT, V, BN), V, BN)
    return (tl.where(dense, (TILES + GT - 1) // GT, (n + GT - 1) // GT), dense, n, logit, ok, v,
            _step_tiles(held_list, n, 1, dense, GT, V, BN))


@triton.jit
def walk_ahead(row, held_list, n, dense, tiles, step, GT: tl.constexpr, V: tl.constexpr, BN: tl.constexpr):
    """What a pass loads at its step'th, ahead of that step's arithmetic: step + 1's logits (which
    of them are ids, their ids), from its ``tiles`` loaded a step before, and step + 2's tiles.
    A step past the walk's last reads nothing (every id −inf)."""
    logit, ok, v = _step_logits(row, tiles, V, BN)
    return logit, ok, v, _step_tiles(held_list, n, step + 2, dense, GT, V, BN)


@triton.jit
def _step_tiles(held_list, n, step, dense, GT: tl.constexpr, V: tl.constexpr, BN: tl.constexpr):
    """Each lane's tile in a pass's step (lane e takes the step's (e // BN)'th): the step'th GT in
    order walking densely, else the held list's; past the walk's last, a tile past the vocabulary."""
    slot = step * GT + tl.arange(0, GT * BN) // BN
    if dense:
        tiles = slot
    else:
        tiles = tl.load(held_list + slot, mask=slot < n, other=(V + BN - 1) // BN, cache_modifier=".cg")
    return tiles


@triton.jit
def _step_logits(row, tiles, V: tl.constexpr, BN: tl.constexpr):
    """A step's logits from each lane's tile, −inf past the vocabulary; which of them are ids; their ids."""
    v = tiles * BN + tl.arange(0, tiles.shape[0]) % BN
    return tl.load(row + v, mask=v < V, other=float("-inf"), cache_modifier=".cg"), v < V, v
