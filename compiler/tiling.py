"""How a band's programs are tiled: which executor runs a layer program, its GEMVs' tiles, K
chunks and K splits, and attention's KV splits and sub-streams, from the recipe and its schedule
table's entry for the program. The planner (``plan.py``) builds the ops and their programs
from these numbers; every kind of program (embedding, dense and routed layers, head) of a band
asks the same rules, so that they agree where they must (the hidden state's split-K partials,
``down_split``).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..schema import Band
from . import executor
from .errors import InputError
from .geometry import is_pow2, next_pow2
from .recipe import Recipe
from .schedule import Schedule, ScheduleEntry


@dataclass(frozen=True)
class KSplits:
    """How many K splits the qkv, o and down GEMVs use (a routed layer's router too; its experts'
    down takes down's). down's is also the number of partials the hidden state between layers is
    stored as, so the embedding, every layer program and the head of the band agree on it."""

    qkv: int
    o: int
    down: int
    router: int = 1


def kv_substreams(entry: ScheduleEntry, kt: int) -> int:
    """The long walk's sub-streams: the table's kv_substreams, as many as leave each sub-tile the
    16 tokens a product needs; 1 where there is no long walk."""
    if entry.long_kv_tile <= kt:
        return 1
    return max(1, min(entry.kv_substreams, entry.long_kv_tile // 16))


def norm_rows_per_load(entry: ScheduleEntry, band: Band) -> int:
    """Rows of x̂ a CTA stages per load: the schedule's ``norm_rows``, at most the band's rows
    (rounded up to a power of two). With norm stages no CTA stages x̂ itself, and it is 1."""
    return 1 if entry.norm_stages else min(entry.norm_rows, next_pow2(band.m))


def split_k(tiles: int, k: int, block_k: int, grid: int, cap: int) -> int:
    """The K split (a power of two ≤ cap, dividing K into whole chunks) that minimises the weight
    bytes the busiest CTA streams: ⌈tiles·s / grid⌉ tasks of K/s columns each. Ties keep fewer
    splits (fewer partials for the readers to add)."""
    best, best_cost = 1, -(-tiles // grid) * k
    s = 2
    while s <= cap and k % (s * block_k) == 0:
        cost = -(-tiles * s // grid) * (k // s)
        if cost < best_cost:
            best, best_cost = s, cost
        s *= 2
    return best


class Tiling:
    """The tiling rules of one recipe under one schedule table."""

    def __init__(self, recipe: Recipe, schedule: Schedule):
        self.recipe = recipe
        self.schedule = schedule

    def entry(self, kind: str, band: Band) -> ScheduleEntry:
        """The table's entry for the band's program of ``kind``."""
        return self.schedule.entry(kind, self.recipe.rank_geometry.hidden, band.rows, band.tokens,
                                   weights=self.recipe.deployment.dtypes.projection)

    def k_splits(self, band: Band, kind: str = "layer") -> KSplits:
        """The GEMVs' K splits of the band's ``kind`` layer program (``layer``: dense; ``moe``:
        routed), one per op for every mode and executor of the band (the staged programs read the
        persistent program's partials), in whole K chunks of whichever executor has the larger
        ones. down's is the band's, whatever the kind (``down_split``)."""
        g = self.recipe.rank_geometry
        entry = self.entry(kind, band)
        grid, bn, bk = self.gemv_tiling(entry)
        tiles = -(-g.hidden // bn)
        qkv = split_k(-(-g.qkv_rows // bn), g.hidden, bk, grid, entry.max_split_qkv)
        o = split_k(tiles, g.q_heads * g.head_dim, bk, grid, entry.max_split_k)
        router = split_k(-(-g.experts.count // bn), g.hidden, bk, grid, entry.max_split_k) if kind == "moe" else 1
        return KSplits(qkv, o, self.down_split(band), router)

    def gemv_tiling(self, entry: ScheduleEntry) -> tuple[int, int, int]:
        """A layer program's grid, GEMV output rows a task and K chunk."""
        bk = self.stream_block_k(entry) if self.streams(entry, "persistent") else self.block_k(entry)
        return self.recipe.deployment.sm_count * entry.ctas_per_sm, self.block_n(entry), bk

    def down_split(self, band: Band) -> int:
        """The K split of a layer's last GEMV: the partials the hidden state leaves every layer in,
        which the next layer, the embedding and the head of the band agree on. A routed model's is
        its routed down's (whose K is the chosen experts' columns, one row's top_k at the least),
        halved until it also splits a dense layer's down into whole chunks where the model has one."""
        g = self.recipe.rank_geometry
        dense = len(g.moe_layers) < g.layers
        if g.experts is None:
            grid, bn, bk = self.gemv_tiling(self.entry("layer", band))
            return split_k(-(-g.hidden // bn), g.intermediate, bk, grid, self.entry("layer", band).max_split_k)
        e, entry = g.experts, self.entry("moe", band)
        grid, bn, bk = self.gemv_tiling(entry)
        down = split_k(-(-g.hidden // bn), e.top_k * -(-e.intermediate // bk) * bk, bk, grid, entry.max_split_k)
        dense_bk = self.gemv_tiling(self.entry("layer", band))[2]
        while down > 1 and dense and g.intermediate % (down * dense_bk):
            down //= 2
        return down

    def block_n(self, entry: ScheduleEntry) -> int:
        """A layer GEMV's output rows a task: the table's, or the streaming executor's tile."""
        return executor.stream_rows(entry.num_warps) if entry.streaming else entry.block_n

    def streams(self, entry: ScheduleEntry, mode: str) -> bool:
        """Whether the band's layer program in ``mode`` is the streaming executor's (sm_90,
        persistent, bf16 activations and KV cache, bf16 or FP8 projections and experts whose scale
        blocks hold whole tiles, k and v whole tiles, heads of a power of two up to
        ``executor.HEAD_DIM``, one rank: the cross-rank ops are the Triton executor's); the table
        must not ask for it where it cannot be."""
        d = self.recipe.deployment
        if not entry.streaming or d.tensor_parallel > 1:
            return False
        if not d.target.is_nvidia:
            raise InputError(self.schedule.source, "streaming", f"the streaming executor is written for sm_90 (Gluon, "
                                                                f"TMA), not {d.target.name}")
        if entry.long_kv_tile:
            raise InputError(self.schedule.source, "long_kv_tile", "a streaming program walks the KV cache kv_tile "
                                                                   "tokens a tile: set long_kv_tile 0 where streaming is 1")
        if entry.ctas_per_sm != 1:
            raise InputError(self.schedule.source, "ctas_per_sm", "a streaming program is one CTA per SM (its weight "
                                                                  "ring takes the SM's shared memory): set 1 where "
                                                                  "streaming is 1")
        dtypes = d.dtypes
        rows = executor.stream_rows(entry.num_warps)
        if d.quant is not None and d.quant.block_rows % rows:
            return False  # a streamed unit's rows share one scale row; the Triton executor scales per row
        if self.recipe.rank_geometry.kv_heads * self.recipe.rank_geometry.head_dim % rows:
            return False  # a unit would span two of q, k, v (the Triton executor reads any row of any of them)
        head_dim = self.recipe.rank_geometry.head_dim
        if not is_pow2(head_dim) or head_dim > executor.HEAD_DIM:
            return False  # the Triton executor's attention pads any head; the streaming one is written for these
        return (mode == "persistent" and {dtypes.weights, dtypes.activations, dtypes.kv} == {executor.DTYPE}
                and dtypes.projection in executor.PROJECTIONS)

    def block_k(self, entry: ScheduleEntry, quantized: bool = True) -> int:
        """A GEMV's K chunk: the table's, at most the hidden size and, for block-scaled weights
        (the layers' projections, not the head's), one scale block (a chunk's product is scaled
        by one scale a row)."""
        quant = self.recipe.deployment.quant if quantized else None
        return min(entry.block_k, next_pow2(self.recipe.rank_geometry.hidden), quant.block_cols if quant else 1 << 30)

    def stream_block_k(self, entry: ScheduleEntry) -> int:
        """The streaming executor's K chunk, a ring unit's columns: the table's, at most the
        hidden size. A block-scaled weight's unit holds whole scale blocks (the GEMV scales each
        block's product by its own scale) and, its elements being half a bf16 one's bytes, is
        widened where it would hold less than one KV tile (attention's tiles share the ring):
        an entry written for bf16 units (Qwen3-8B's block_k 256, 32 KB) streams E4M3 units of the
        same bytes (512 columns)."""
        g, d = self.recipe.rank_geometry, self.recipe.deployment
        widest = next_pow2(g.hidden)
        bk = min(entry.block_k, widest)
        quant = d.quant
        if quant is None:
            return bk
        bk = -(-bk // quant.block_cols) * quant.block_cols
        least = self.least_kv_tile(entry)
        unit = lambda cols: executor.ring(1, entry.num_warps, cols, 1, 0, d.dtypes.projection)  # noqa: E731
        while bk < widest and executor.kv_tile_tokens(unit(bk), g.head_dim, d.kv_cache.block_size) < least:
            bk *= 2
        return bk

    def least_kv_tile(self, entry: ScheduleEntry) -> int:
        """The fewest tokens a streamed KV tile may hold: a page, and a product's 16 tokens a
        compute warp."""
        return max(16 * entry.num_warps, self.recipe.deployment.kv_cache.block_size)

    def kv_splits(self, band: Band, grid: int, entry: ScheduleEntry) -> int:
        """Attention's KV splits: a CTA's worth of the grid per (row, KV head), at most the table's
        max_splits and the pages of the longest context."""
        d, g = self.recipe.deployment, self.recipe.rank_geometry
        pages = -(-d.max_context // d.kv_cache.block_size)
        return max(1, min(entry.max_splits, grid // (band.rows * g.kv_heads), pages))
