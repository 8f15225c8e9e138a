"""The planner: a recipe and its schedule become per-program plans.

For each distinct layer shape × band (identical layers share one program) and each mode the
recipe asks for, a ProgramPlan says which stages the code object runs, how many tasks each
stage has (task t runs on CTA t mod grid), the cross-CTA regions with their writer and readers,
the sync edges between stages (persistent mode only: in staged mode the launch boundary orders
the stages), the constexprs the emitter specialises the kernel with, and the bytes each stage
must move. The embedding and the final norm + LM head are programs of their own.
"""

from __future__ import annotations

from dataclasses import dataclass

from .geometry import Geometry, next_pow2
from .recipe import Band, Recipe
from .schedule import Schedule, ScheduleEntry, load_schedule

DTYPE_BYTES = {"bf16": 2, "fp32": 4, "i32": 4, "i64": 8}
HANG_SLOTS = 64  # wait-timeout records a debug build keeps per step (hang_log: a count, then 4 × int64 each)
CLOCK_SLOTS = 17  # int64 per CTA in a profiling build's stage_clock: the SM id, then (start, end) per stage (up to 8)


@dataclass(frozen=True)
class Region:
    """Memory a program writes or reads across CTAs (weights, read-only, are not regions)."""

    name: str
    kind: str  # io (the program's input/output) | scratch | kv_cache
    dtype: str
    shape: tuple[int, ...]
    writer: str | None  # the stage that writes it; None: written before the launch
    readers: tuple[str, ...]
    # Why a reader in the writer's own stage needs no sync edge (checked by contract C1): the
    # reads and writes touch disjoint elements, or each CTA reads back only what it wrote.
    same_stage: str | None = None

    @property
    def nbytes(self) -> int:
        n = DTYPE_BYTES[self.dtype]
        for dim in self.shape:
            n *= dim
        return n


@dataclass(frozen=True)
class Stage:
    index: int
    name: str
    tasks: int
    task: str  # what one task does
    weight_bytes: int  # weights it must read once
    kv_bytes_per_token: int  # KV cache it must read per token of context (all rows of the band)
    io_bytes: int  # other bytes that must move through HBM (KV appends, embeddings, logits)


@dataclass(frozen=True)
class SyncEdge:
    counter: int  # index in the launch's counter block
    producer: str
    consumer: str
    regions: tuple[str, ...]  # regions the edge orders (written by producer, read by consumer)
    signals_per_epoch: int  # every CTA of the grid signals once per step


@dataclass(frozen=True)
class ProgramPlan:
    name: str
    kind: str  # embed | layer | head
    kernel: str  # the @triton.jit function in monobuild.compiler.kernels
    band: Band
    mode: str  # persistent | staged
    stages: tuple[Stage, ...]  # the stages this code object runs, in order
    grid: int
    num_warps: int
    regions: tuple[Region, ...]
    syncs: tuple[SyncEdge, ...]
    constexprs: tuple[tuple[str, object], ...]
    launch_pdl: bool
    launch_cooperative: bool
    schedule: ScheduleEntry

    def constexpr(self, name: str):
        return dict(self.constexprs)[name]


@dataclass(frozen=True)
class Launch:
    program: str
    layer: int | None  # the decoder layer it runs (weights, KV cache, counters), None for embed/head


@dataclass(frozen=True)
class StepPlan:
    """The ordered launches of one decode step for a band in a mode."""

    band: Band
    mode: str
    launches: tuple[Launch, ...]


@dataclass(frozen=True)
class Plan:
    recipe: Recipe
    schedule_source: str
    programs: tuple[ProgramPlan, ...]
    steps: tuple[StepPlan, ...]

    def program(self, name: str) -> ProgramPlan:
        for p in self.programs:
            if p.name == name:
                return p
        raise KeyError(name)

    def step(self, band: Band, mode: str) -> StepPlan:
        for s in self.steps:
            if s.band == band and s.mode == mode:
                return s
        raise KeyError((band, mode))

    def step_bytes(self, band: Band, context: int) -> int:
        """Bytes a step of this band must move at ``context`` tokens per row (the roofline's numerator)."""
        total = 0
        for launch in self.step(band, self.recipe.deployment.modes[0]).launches:
            for stage in self.program(launch.program).stages:
                total += stage.weight_bytes + stage.io_bytes + stage.kv_bytes_per_token * context
        return total


def _layer_stages(g: Geometry, band: Band, w: int, kvb: int, splits: int, kv_tiles: str,
                  norm_stages: bool) -> tuple[Stage, ...]:
    h, d, m = g.hidden, g.head_dim, band.m
    bias = g.qkv_rows * w if g.qkv_bias else 0
    qk_norm = 2 * d * w if g.qk_norm else 0
    kv_row = band.rows * g.kv_heads * d * 2 * kvb
    # With norm stages the norm weights move to the norm stages; qkv still counts reading x_in.
    qkv_norm_w, up_norm_w = (0, 0) if norm_stages else (h * w, h * w)
    stages = [
        ("qkv", 0, "RMSNorm(x_in) · W_qkv rows" if not norm_stages else "x̂ · W_qkv rows",
         g.qkv_rows * h * w + bias + qkv_norm_w, 0, m * h * 4),
        ("attn", band.rows * g.kv_heads * splits, "(row, KV head, split): q/k norm, RoPE, KV append, "
         f"split-KV attention in {kv_tiles}", qk_norm, kv_row, kv_row * band.tokens),
        ("combine", m * g.q_heads, "(token row, query head): merge split partials", 0, 0, 0),
        ("o", 0, "attn_out · W_o rows + x_in", h * g.q_heads * d * w, 0, 0),
        ("up", 0, ("RMSNorm(x1) · " if not norm_stages else "x̂_up · ") + "W_gate|W_up rows, silu(g)·u",
         2 * g.intermediate * h * w + up_norm_w, 0, 0),
        ("down", 0, "h · W_down rows + x1", h * g.intermediate * w, 0, m * h * 4),
    ]
    if norm_stages:
        stages.insert(0, ("norm_qkv", m, "(token row): x̂_qkv = RMSNorm(x_in), read by every qkv task", h * w, 0, 0))
        stages.insert(5, ("norm_up", m, "(token row): x̂_up = RMSNorm(x1), read by every up task", h * w, 0, 0))
    return tuple(Stage(i, *s) for i, s in enumerate(stages))


@dataclass(frozen=True)
class KSplits:
    """How many K splits the qkv, o and down GEMVs use. down's is also the number of partials the
    hidden state between layers is stored as, so the embedding and the head of the band agree on it."""

    qkv: int
    o: int
    down: int


def _kv_substreams(entry: ScheduleEntry, kt: int) -> int:
    """The long walk's sub-streams: the table's kv_substreams, as many as leave each sub-tile the
    16 tokens a product needs; 1 where there is no long walk."""
    if entry.long_kv_tile <= kt:
        return 1
    return max(1, min(entry.kv_substreams, entry.long_kv_tile // 16))


def _norm_rows_per_load(entry: ScheduleEntry, band: Band) -> int:
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


def _with_tasks(stages: tuple[Stage, ...], bn: int, g: Geometry, k_splits: KSplits) -> tuple[Stage, ...]:
    rows = {"qkv": g.qkv_rows, "o": g.hidden, "up": g.intermediate, "down": g.hidden}
    splits = {"qkv": k_splits.qkv, "o": k_splits.o, "down": k_splits.down}
    out = []
    for s in stages:
        if s.name in rows:
            split = splits.get(s.name, 1)
            what = f"(tiles of {bn}" + (f") × {split} K splits" if split > 1 else ")")
            s = Stage(s.index, s.name, -(-rows[s.name] // bn) * split, f"{s.task} {what}", s.weight_bytes,
                      s.kv_bytes_per_token, s.io_bytes)
        out.append(s)
    return tuple(out)


_KV_DISJOINT = ("disjoint: the step's tokens are appended at positions ≥ context − tokens; the cache is read "
                "below that, and the step's own K/V come from qkv")
_CTA_LOCAL = "cta-local: each CTA reads back only the logits tiles it wrote, after a CTA barrier"
_CTA_PRIVATE = "cta-local: each CTA writes and reads back only its own slice (its normed input), after a CTA barrier"


def _x_hat(name: str, norm: str, gemv: str, dtype: str, m: int, h: int, grid: int, norm_stage: bool) -> Region:
    """The normed input x̂ of a GEMV after an RMSNorm (qkv, up, the LM head): with a norm stage
    (``norm``) one [M, hidden] copy it writes and every CTA of ``gemv`` reads after their edge;
    without, each CTA's own slice, staged by the CTA itself."""
    if norm_stage:
        return Region(name, "scratch", dtype, (m, h), norm, (gemv,))
    return Region(name, "scratch", dtype, (grid, m, h), gemv, (gemv,), _CTA_PRIVATE)


def _layer_regions(g: Geometry, band: Band, splits: int, kv_dtype: str, k_splits: KSplits, w_dtype: str,
                   grid: int, norm_stages: bool) -> tuple[Region, ...]:
    m, h, d = band.m, g.hidden, g.head_dim
    qkv_in, up_in = ("norm_qkv", "norm_up") if norm_stages else ("qkv", "up")
    x_hats = (_x_hat("x_hat_qkv", "norm_qkv", "qkv", w_dtype, m, h, grid, norm_stages),
              _x_hat("x_hat_up", "norm_up", "up", w_dtype, m, h, grid, norm_stages))
    return (
        Region("x_in", "io", "fp32", (k_splits.down, m, h), None, (qkv_in, "o")),
        Region("qkv", "scratch", "fp32", (k_splits.qkv, m, g.qkv_rows), "qkv", ("attn",)),
        Region("k_cache", "kv_cache", kv_dtype, (band.rows, g.kv_heads, d), "attn", ("attn",), _KV_DISJOINT),
        Region("v_cache", "kv_cache", kv_dtype, (band.rows, g.kv_heads, d), "attn", ("attn",), _KV_DISJOINT),
        Region("part_acc", "scratch", "fp32", (m, g.q_heads, splits, d), "attn", ("combine",)),
        Region("part_ml", "scratch", "fp32", (m, g.q_heads, splits, 2), "attn", ("combine",)),
        # attn_out and h only feed a GEMV, which casts them to the weight dtype: stored in it.
        Region("attn_out", "scratch", w_dtype, (m, g.q_heads * d), "combine", ("o",)),
        Region("x1", "scratch", "fp32", (k_splits.o, m, h), "o", (up_in, "down")),
        Region("h", "scratch", w_dtype, (m, g.intermediate), "up", ("down",)),
        *x_hats,
        Region("x_out", "io", "fp32", (k_splits.down, m, h), "down", ()),
    )


def _edges(stage_names: tuple[str, ...], regions: tuple[Region, ...], grid: int) -> tuple[SyncEdge, ...]:
    """One edge between consecutive stages, ordering every scratch region the later stage reads."""
    edges = []
    for i, (producer, consumer) in enumerate(zip(stage_names, stage_names[1:])):
        ordered = tuple(r.name for r in regions if r.kind == "scratch" and r.writer == producer
                        and consumer in r.readers)
        edges.append(SyncEdge(i, producer, consumer, ordered, grid))
    return tuple(edges)


class Planner:
    """Turns a Recipe (and its target's schedule) into a Plan."""

    def __init__(self, recipe: Recipe, schedule: Schedule | None = None):
        self.recipe = recipe
        self.schedule = schedule or load_schedule(recipe.deployment.target.name)
        d = recipe.deployment
        self.w = DTYPE_BYTES[d.dtype]
        self.kvb = DTYPE_BYTES[d.kv_cache.dtype]

    def plan(self) -> Plan:
        programs, steps = [], []
        for band in self.recipe.deployment.bands:
            for mode in self.recipe.deployment.modes:
                embed = self._embed(band)
                layer = self._layer(band, mode)
                head = self._head(band, mode)
                for p in (embed, *layer, *head):
                    if p.name not in {q.name for q in programs}:
                        programs.append(p)
                launches = [Launch(embed.name, None)]
                for layer_index in range(self.recipe.geometry.layers):
                    launches += [Launch(p.name, layer_index) for p in layer]
                launches += [Launch(p.name, None) for p in head]
                steps.append(StepPlan(band, mode, tuple(launches)))
        return Plan(self.recipe, self.schedule.source, tuple(programs), tuple(steps))

    # -- programs ------------------------------------------------------------------------------

    def _entry(self, kind: str, band: Band) -> ScheduleEntry:
        return self.schedule.entry(kind, self.recipe.geometry.hidden, band.rows, band.tokens)

    def _common(self, band: Band) -> dict:
        return {"ROWS_P": max(16, next_pow2(band.m)), "EPS": self.recipe.geometry.norm_eps,
                "DOT_IEEE": self.recipe.deployment.dtype == "fp32", "WAIT_SPINS": self.recipe.deployment.debug_wait_spins,
                "HANG_SLOTS": HANG_SLOTS, "CLOCK": self.recipe.deployment.stage_clock, "CLOCK_SLOTS": CLOCK_SLOTS}

    def _k_splits(self, band: Band) -> KSplits:
        g, d = self.recipe.geometry, self.recipe.deployment
        entry = self._entry("layer", band)
        grid, bn, bk = d.sm_count * entry.ctas_per_sm, entry.block_n, self._block_k(entry)
        tiles = -(-g.hidden // bn)
        return KSplits(split_k(-(-g.qkv_rows // bn), g.hidden, bk, grid, entry.max_split_qkv),
                       split_k(tiles, g.q_heads * g.head_dim, bk, grid, entry.max_split_k),
                       split_k(tiles, g.intermediate, bk, grid, entry.max_split_k))

    def _block_k(self, entry: ScheduleEntry) -> int:
        return min(entry.block_k, next_pow2(self.recipe.geometry.hidden))

    def _splits(self, band: Band, grid: int, entry: ScheduleEntry) -> int:
        d, g = self.recipe.deployment, self.recipe.geometry
        pages = -(-d.max_context // d.kv_cache.block_size)
        return max(1, min(entry.max_splits, grid // (band.rows * g.kv_heads), pages))

    def _embed(self, band: Band) -> ProgramPlan:
        g, d = self.recipe.geometry, self.recipe.deployment
        entry = self._entry("embed", band)
        block = min(entry.embed_block, next_pow2(g.hidden))
        tasks = band.m * -(-g.hidden // block)
        grid = min(d.sm_count * entry.ctas_per_sm, tasks)
        stage = Stage(0, "embed", tasks, f"(token row, {block} columns): gather an embedding row", 0, 0,
                      band.m * g.hidden * (self.w + 4))
        parts = self._k_splits(band).down
        regions = (Region("x_out", "io", "fp32", (parts, band.m, g.hidden), "embed", ()),)
        cx = {"M": band.m, "H": g.hidden, "BH": block, "X_PARTS": parts, "G": grid}
        return ProgramPlan(f"embed.{band.name}", "embed", "embed_kernel", band, "staged", (stage,), grid,
                           entry.num_warps, regions, (), tuple(sorted(cx.items())), False, False, entry)

    def _layer(self, band: Band, mode: str) -> tuple[ProgramPlan, ...]:
        g, d = self.recipe.geometry, self.recipe.deployment
        entry = self._entry("layer", band)
        full_grid = d.sm_count * entry.ctas_per_sm
        splits = self._splits(band, full_grid, entry)
        k_splits = self._k_splits(band)
        kt, long_kt = max(entry.kv_tile, d.kv_cache.block_size), entry.long_kv_tile
        sub = _kv_substreams(entry, kt)
        in_subs = f", each as {sub} sub-tiles with their own softmax states" if sub > 1 else ""
        kv_tiles = f"{kt}-token tiles" + (f" ({long_kt} where a split holds ≥ {long_kt} tokens{in_subs})"
                                          if long_kt > kt else "")
        norm_stages = bool(entry.norm_stages)
        stages = _with_tasks(_layer_stages(g, band, self.w, self.kvb, splits, kv_tiles, norm_stages), entry.block_n, g,
                             k_splits)
        regions = _layer_regions(g, band, splits, d.kv_cache.dtype, k_splits, d.dtype, full_grid, norm_stages)
        cx = {
            **self._common(band), "H": g.hidden, "H_P": next_pow2(g.hidden), "NQ": g.q_heads, "NKV": g.kv_heads,
            "D": g.head_dim, "INTER": g.intermediate, "ROWS": band.rows, "TOKENS": band.tokens,
            "QP": max(16, next_pow2(g.group * band.tokens)), "TP": max(16, next_pow2(band.tokens)),
            "QK_NORM": g.qk_norm, "QKV_BIAS": g.qkv_bias, "BS": d.kv_cache.block_size,
            "KT": kt, "LONG_KT": long_kt, "KV_STAGES": entry.kv_stages,
            "LONG_KV_STAGES": entry.long_kv_stages or entry.kv_stages, "KV_SUB": sub,
            "SPLITS": splits,
            "SP": max(2, next_pow2(splits)), "BN": entry.block_n, "BK": self._block_k(entry),
            "QKV_SPLIT": k_splits.qkv, "O_SPLIT": k_splits.o, "DOWN_SPLIT": k_splits.down, "W_STAGES": entry.weight_stages,
            "NORM_ROWS": _norm_rows_per_load(entry, band), "NORM_STAGES": norm_stages,
        }
        return self._moded("layer", "layer_kernel", band, mode, stages, regions, full_grid, cx, entry)

    def _head(self, band: Band, mode: str) -> tuple[ProgramPlan, ...]:
        g, d = self.recipe.geometry, self.recipe.deployment
        entry = self._entry("head", band)
        bn = entry.head_block_n
        tiles = -(-g.vocab // bn)
        full_grid = d.sm_count * entry.ctas_per_sm
        norm_stage = bool(entry.norm_stages)
        stages = [("logits", tiles, f"{'x̂' if norm_stage else 'RMSNorm(x)'} · W_head rows (tiles of {bn}), fp32 logits",
                   g.vocab * g.hidden * self.w + (0 if norm_stage else g.hidden * self.w), 0, band.m * g.vocab * 4)]
        parts = self._k_splits(band).down
        logits_in = "norm" if norm_stage else "logits"
        regions = [Region("x_in", "io", "fp32", (parts, band.m, g.hidden), None, (logits_in,)),
                   Region("logits", "io", "fp32", (band.m, g.vocab), "logits", ("logits",) if d.head == "ids" else (),
                          _CTA_LOCAL if d.head == "ids" else None)]
        regions.append(_x_hat("x_hat", "norm", "logits", d.dtype, band.m, g.hidden, full_grid, norm_stage))
        if norm_stage:
            stages.insert(0, ("norm", band.m, "(token row): x̂ = RMSNorm(x), read by every logits task",
                              g.hidden * self.w, 0, 0))
        if d.head == "ids":
            stages.append(("argmax", band.m, "(token row): reduce tile maxima to the greedy id", 0, 0, band.m * 4))
            regions += [Region("tile_max", "scratch", "fp32", (band.m, tiles), "logits", ("argmax",)),
                        Region("tile_arg", "scratch", "i32", (band.m, tiles), "logits", ("argmax",)),
                        Region("next_ids", "io", "i32", (band.m,), "argmax", ())]
        cx = {**self._common(band), "H": g.hidden, "H_P": next_pow2(g.hidden), "V": g.vocab, "M": band.m, "BN": bn,
              "BK": self._block_k(entry), "TILES_P": next_pow2(tiles), "X_PARTS": parts,
              "GREEDY": d.head == "ids", "W_STAGES": entry.weight_stages, "NORM_STAGE": norm_stage,
              "NORM_ROWS": _norm_rows_per_load(entry, band)}
        stages = tuple(Stage(i, *s) for i, s in enumerate(stages))
        return self._moded("head", "head_kernel", band, mode, stages, tuple(regions), full_grid, cx, entry)

    def _moded(self, kind, kernel, band, mode, stages, regions, full_grid, cx, entry) -> tuple[ProgramPlan, ...]:
        """One persistent program running every stage, or one staged program per stage."""
        pdl = self.recipe.deployment.target.is_nvidia
        if mode == "persistent" and len(stages) > 1:
            syncs = _edges(tuple(s.name for s in stages), regions, full_grid)
            consts = {**cx, "G": full_grid, "FIRST": 0, "LAST": len(stages) - 1, "PDL": pdl}
            return (ProgramPlan(f"{kind}.{band.name}.persistent", kind, kernel, band, mode, stages, full_grid,
                                entry.num_warps, regions, syncs, tuple(sorted(consts.items())), pdl, True, entry),)
        out = []
        for s in stages:
            grid = min(full_grid, s.tasks)
            consts = {**cx, "G": grid, "FIRST": s.index, "LAST": s.index, "PDL": False}
            name = f"{kind}.{band.name}.{mode}" if mode == "persistent" else f"{kind}.{band.name}.{s.name}"
            out.append(ProgramPlan(name, kind, kernel, band, mode, (s,), grid, entry.num_warps, regions, (),
                                   tuple(sorted(consts.items())), False, False, entry))
        return tuple(out)


def plan_recipe(recipe: Recipe, schedule: Schedule | None = None) -> Plan:
    return Planner(recipe, schedule).plan()
