"""Tensor parallelism's sharding rules: which part of each tensor rank r of N holds.

The rules are vLLM's, so that an engine's own sharded weights are a rank's weights as they are:
attention split by heads (q/k/v by rows, o by columns; where N exceeds the KV heads, each KV head
held by N / kv_heads consecutive ranks, vLLM's replicas), the MLP by its intermediate rows (gate/up
by rows, down by columns; each routed expert likewise), the embedding and the LM head by vocabulary
rows over the vocabulary padded to a multiple of 64 (vLLM's ``VocabParallelEmbedding``; the padding
rows are zeros), norms and the router whole on every rank. A rank's decoder layer then computes a
partial of o's and down's outputs, and the layer's result is the sum over ranks of those partials
plus the residual (the all-reduce); the embedding is the sum of each rank's rows (ids outside a
rank's range read zeros), the logits the concatenation of each rank's, less the padding.

``rank_geometry`` is what one rank's programs are planned for and its weights are checked
against. Standard library only, like ``schema``: the compiler plans with it, the runtime binds
with it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from .schema import Geometry, WeightQuant

SIZES = (1, 2, 4, 8)  # the tensor-parallel sizes served
VOCAB_PADDING = 64  # vLLM's: the embedding's and the LM head's rows are padded to a multiple of it
#: The cross-rank sites a step passes, in order (the embedding's all-reduce, o's and down's in
#: each layer, the head's argmax), each with a counter per source rank in every rank's
#: ``tp_counters`` (``compiler/ops/parallel.py``): [SITES, SLOTS] int64.
SITE_EMBED, SITE_O, SITE_DOWN, SITE_LOGITS = range(4)
SITES = 4
SLOTS = max(SIZES)  # a site's counters: one for each source rank


@dataclass(frozen=True)
class TensorParallel:
    """N ranks sharing each layer's weights (``size``; 1: one GPU holds the whole model)."""

    size: int

    def refusal(self, g: Geometry, quant: WeightQuant | None = None) -> str | None:
        """Why ``g`` (with its projections' block scaling ``quant``) cannot be split over the
        ranks this way, or None: each rank's share of heads, intermediate rows and (an FP8
        checkpoint) scale blocks must be whole, as vLLM requires."""
        n = self.size
        if n not in SIZES:
            return f"{n} ranks: the sizes served are {', '.join(map(str, SIZES))}"
        if g.q_heads % n:
            return f"{g.q_heads} query heads do not split over {n} ranks"
        if (g.kv_heads % n) if n <= g.kv_heads else (n % g.kv_heads):
            return (f"{g.kv_heads} KV heads neither split over {n} ranks nor repeat a whole number of times "
                    f"across them")
        mlps = [("intermediate", g.intermediate)] if len(g.moe_layers) < g.layers else []
        if g.experts is not None:
            mlps.append(("experts' intermediate", g.experts.intermediate))
            if g.experts.shared_intermediate:
                mlps.append(("shared experts' intermediate", g.experts.shared_intermediate))
        for what, rows in mlps:
            if rows % n:
                return f"the {what} size {rows} does not split over {n} ranks"
        if quant is not None and n > 1:
            r = self.rank_geometry(g)
            outputs = [("query rows", r.q_heads * r.head_dim), ("KV rows", r.kv_heads * r.head_dim)]
            inputs = [("o's columns", r.q_heads * r.head_dim)]
            for what, rows in mlps:
                outputs.append((f"{what} rows", rows // n))
                inputs.append((f"down's columns ({what})", rows // n))
            for what, size in outputs:
                if size % quant.block_rows:
                    return f"a rank's {size} {what} are not whole {quant.block_rows}-row scale blocks"
            for what, size in inputs:
                if size % quant.block_cols:
                    return f"a rank's {size} {what} are not whole {quant.block_cols}-column scale blocks"
        return None

    def kv_replicas(self, g: Geometry) -> int:
        """How many consecutive ranks hold each KV head (1 where the ranks split them)."""
        return max(1, self.size // g.kv_heads)

    def kv_block(self, g: Geometry, rank: int) -> int:
        """The index of the block of KV heads rank ``rank`` holds (a block is the rank's KV heads)."""
        return rank // self.kv_replicas(g)

    def kv_heads(self, g: Geometry, rank: int) -> slice:
        """The model's KV heads rank ``rank`` holds (its KV cache's heads of a whole cache's)."""
        per_rank = self.rank_geometry(g).kv_heads
        return slice(self.kv_block(g, rank) * per_rank, (self.kv_block(g, rank) + 1) * per_rank)

    def padded_vocab(self, g: Geometry) -> int:
        return -(-g.vocab // VOCAB_PADDING) * VOCAB_PADDING

    def vocab_range(self, g: Geometry, rank: int) -> tuple[int, int]:
        """The padded vocabulary's rows rank ``rank`` holds: [start, stop)."""
        share = self.padded_vocab(g) // self.size
        return rank * share, (rank + 1) * share

    def rank_geometry(self, g: Geometry) -> Geometry:
        """One rank's share of ``g``: the shapes its weights, KV cache and programs have (its
        vocabulary is its rows of the padded one)."""
        n = self.size
        if n == 1:
            return g
        experts = g.experts
        if experts is not None:
            experts = replace(experts, intermediate=experts.intermediate // n,
                              shared_intermediate=experts.shared_intermediate // n)
        return replace(g, q_heads=g.q_heads // n, kv_heads=max(1, g.kv_heads // n), intermediate=g.intermediate // n,
                       vocab=self.padded_vocab(g) // n, experts=experts)
