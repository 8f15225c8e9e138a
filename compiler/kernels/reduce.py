"""Tensor parallelism's cross-rank ops (``ops/parallel.py``): the all-reduce (a rank's sum of
every rank's partial) and the all-gather of a split vocabulary's logits, each reading the peers'
parts where they wrote them."""

import triton
import triton.language as tl

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
        for p in tl.static_range(RES_PARTS):
            acc += tl.load(residual_ptr + p * M * H + m * H + c, mask=mask, other=0.0)
        for s in tl.static_range(RANKS):
            part = peer(s, peer0, peer1, peer2, peer3, peer4, peer5, peer6, peer7)
            for p in tl.static_range(PARTS):
                acc += tl.load(part + p * M * H + m * H + c, mask=mask, other=0.0, volatile=True)
        tl.store(out_ptr + m * H + c, acc, mask=mask)


@triton.jit
def gather_op(pid, pre, peer0, peer1, peer2, peer3, peer4, peer5, peer6, peer7, out_ptr, M, V_RANK: tl.constexpr,
              VOCAB: tl.constexpr, BV: tl.constexpr, RANKS: tl.constexpr, G):
    """out[m, :VOCAB] = every rank's rows side by side: rank s's V_RANK rows (``peer<s>``, its
    logits op's [M, V_RANK]) are ids s · V_RANK onwards, less the vocabulary's padding past VOCAB;
    tasks are (row, chunk of BV ids). Read with volatile loads, as ``reduce_op``'s partials."""
    CHUNKS: tl.constexpr = (VOCAB + BV - 1) // BV
    for task in range(pid, M * CHUNKS, G):
        m = task // CHUNKS
        v = (task % CHUNKS) * BV + tl.arange(0, BV)
        row = tl.zeros([BV], tl.float32)
        for s in tl.static_range(RANKS):
            part = peer(s, peer0, peer1, peer2, peer3, peer4, peer5, peer6, peer7)
            mine = (v >= s * V_RANK) & (v < (s + 1) * V_RANK) & (v < VOCAB)
            row = tl.where(mine, tl.load(part + m * V_RANK + (v - s * V_RANK), mask=mine, other=0.0, volatile=True),
                           row)
        tl.store(out_ptr + m * VOCAB + v, row, mask=v < VOCAB)
