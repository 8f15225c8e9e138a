"""Tensor parallelism's cross-rank ops (``ops/parallel.py``, ``ops/head.py``), each reading the
peers' parts where they wrote them: the all-reduce (a rank's sum of every rank's partial), the
head's argmax over every rank's tile maxima, and the gather of a split vocabulary's logits."""

import triton
import triton.language as tl

from .head import _greedy_ids, tile_parts
from .sync import peer


@triton.jit
def reduce_op(pid, pre, residual_ptr, RES_PARTS: tl.constexpr, peer0, peer1, peer2, peer3, peer4, peer5, peer6,
              peer7, PARTS: tl.constexpr, out_ptr, M, H: tl.constexpr, BH: tl.constexpr, RANKS: tl.constexpr, G):
    """out[m, :] = Σ residual's RES_PARTS partials + Σ over ranks 0 … RANKS − 1 of that rank's PARTS
    partials (``peer<rank>``), in that order, in fp32; tasks are (row, chunk of BH columns). The
    peers' partials are read with volatile loads (past the L1; on gfx9 after the wait's cache
    invalidation): another GPU wrote them."""
    CHUNKS: tl.constexpr = (H + BH - 1) // BH
    for task in range(pid, M * CHUNKS, G):
        m = task // CHUNKS
        c = (task % CHUNKS) * BH + tl.arange(0, BH)
        mask = c < H
        acc = tl.zeros([BH], tl.float32)
        for p in tl.static_range(RES_PARTS):  # past the L1: in a persistent program another CTA wrote it
            acc += tl.load(residual_ptr + p * M * H + m * H + c, mask=mask, other=0.0, cache_modifier=".cg")
        for s in tl.static_range(RANKS):
            part = peer(s, peer0, peer1, peer2, peer3, peer4, peer5, peer6, peer7)
            for p in tl.static_range(PARTS):
                acc += tl.load(part + p * M * H + m * H + c, mask=mask, other=0.0, volatile=True)
        tl.store(out_ptr + m * H + c, acc, mask=mask)


@triton.jit
def ranks_argmax_op(pid, pre, tile_max0, tile_max1, tile_max2, tile_max3, tile_max4, tile_max5, tile_max6, tile_max7,
                    tile_arg0, tile_arg1, tile_arg2, tile_arg3, tile_arg4, tile_arg5, tile_arg6, tile_arg7, next_ids,
                    tokens, accepted, emitted, V: tl.constexpr, M: tl.constexpr, BN: tl.constexpr,
                    TILES_P: tl.constexpr, G: tl.constexpr, TOKENS: tl.constexpr, T_P: tl.constexpr,
                    RANKS: tl.constexpr):
    """``argmax_op`` over a vocabulary split over RANKS ranks of V rows each (tensor parallelism):
    each rank's tile maxima (``tile_max<rank>``, ``tile_arg<rank>``: its logits op's, read past the
    L1 where another GPU wrote them), its ids offset by rank · V; ties go to the lowest id, as
    ``torch.argmax`` takes them, and every rank decides the same ids."""
    TILES: tl.constexpr = (V + BN - 1) // BN
    t = tl.arange(0, TILES_P)
    j = tl.arange(0, T_P)
    rows_of = (j < TOKENS)[:, None] & (t < TILES)[None, :]
    for row in range(pid, M // TOKENS, G):
        m = row * TOKENS + j
        at = m[:, None] * TILES + t[None, :]
        best = tl.full([T_P], float("-inf"), tl.float32)
        ids = tl.zeros([T_P], tl.int32)
        for s in tl.static_range(RANKS):
            vals = tl.load(peer(s, tile_max0, tile_max1, tile_max2, tile_max3, tile_max4, tile_max5, tile_max6,
                                tile_max7) + at, mask=rows_of, other=float("-inf"), volatile=True)
            args = tl.load(peer(s, tile_arg0, tile_arg1, tile_arg2, tile_arg3, tile_arg4, tile_arg5, tile_arg6,
                                tile_arg7) + at, mask=rows_of, other=V, volatile=True)
            rank_best = tl.max(vals, axis=1)
            rank_ids = tl.min(tl.where(vals == rank_best[:, None], args, V), axis=1) + s * V
            ids = tl.where(rank_best > best, rank_ids, ids)  # a later rank (higher ids) only where larger
            best = tl.maximum(best, rank_best)
        _greedy_ids(row, m, j, ids, next_ids, tokens, accepted, emitted, TOKENS)


@triton.jit
def gather_op(pid, pre, peer0, peer1, peer2, peer3, peer4, peer5, peer6, peer7, logits, tile_max, tile_arg, positions,
              temperature, seed, tile_z, tile_zarg, tile_mass, M: tl.constexpr, V_RANK: tl.constexpr,
              VOCAB: tl.constexpr, ROWS_P: tl.constexpr, BN: tl.constexpr, RANKS: tl.constexpr, G: tl.constexpr,
              PARTS: tl.constexpr,
              SAMPLED: tl.constexpr, M_P: tl.constexpr, TOKENS: tl.constexpr):
    """A split vocabulary's logits made whole on this rank: for each tile of BN ids of the VOCAB
    real ids (every row), rank s's rows (``peer<s>``, its logits op's [M, V_RANK]; ids s · V_RANK
    onwards, read with volatile loads as ``reduce_op``'s partials) into ``logits`` [M, VOCAB];
    then, for a greedy or sampling head (PARTS), the tile's parts as ``logits_op`` leaves them
    for the argmax and sample ops (``tile_parts``, reading back this CTA's own stores), keyed by
    the whole vocabulary's ids, so the draws are the unsplit model's."""
    TILES: tl.constexpr = (VOCAB + BN - 1) // BN
    r = tl.arange(0, ROWS_P)
    for tile in range(pid, TILES, G):
        v = tile * BN + tl.arange(0, BN)
        rows = tl.zeros([ROWS_P, BN], tl.float32)
        for s in tl.static_range(RANKS):
            part = peer(s, peer0, peer1, peer2, peer3, peer4, peer5, peer6, peer7)
            mine = (r[:, None] < M) & ((v >= s * V_RANK) & (v < (s + 1) * V_RANK) & (v < VOCAB))[None, :]
            rows = tl.where(mine, tl.load(part + r[:, None] * V_RANK + (v - s * V_RANK)[None, :], mask=mine,
                                          other=0.0, volatile=True), rows)
        tl.store(logits + r[:, None] * VOCAB + v[None, :], rows, mask=(r[:, None] < M) & (v < VOCAB)[None, :])
        if PARTS:
            tl.debug_barrier()  # this CTA's logits stores, before its threads read them back
            tile_parts(logits, tile, tile_max, tile_arg, positions, temperature, seed, tile_z, tile_zarg, tile_mass,
                       None, VOCAB, M, ROWS_P, BN, SAMPLED, M_P, TOKENS)
