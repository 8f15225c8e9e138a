"""The all-reduce op of tensor parallelism (``ops/parallel.py``): a rank's sum of every rank's
partial, read where each rank wrote it (the head's gather of a split vocabulary is ``head.gather_op``)."""

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
        for p in tl.static_range(RES_PARTS):  # past the L1: in a persistent program another CTA wrote it
            acc += tl.load(residual_ptr + p * M * H + m * H + c, mask=mask, other=0.0, cache_modifier=".cg")
        for s in tl.static_range(RANKS):
            part = peer(s, peer0, peer1, peer2, peer3, peer4, peer5, peer6, peer7)
            for p in tl.static_range(PARTS):
                acc += tl.load(part + p * M * H + m * H + c, mask=mask, other=0.0, volatile=True)
        tl.store(out_ptr + m * H + c, acc, mask=mask)

