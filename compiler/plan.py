"""The planner: a recipe and its schedule become per-program plans.

Each program is an ordered list of ops (``compiler/ops``): the dense layer's, the head's, the
embedding's. For each distinct layer shape × band (identical layers share one program) and each
mode the recipe asks for, a ProgramPlan holds the ops the code object runs (all of them in
persistent mode, one per program in staged mode) and what is derived from them
(``compiler/derive.py``): the stages and their bytes, the regions with their writer and readers,
the sync edges (persistent mode only: in staged mode the launch boundary orders the ops) with
their counters, and the kernel's named ABI. Task t of an op runs on CTA t mod grid.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..schema import DTYPE_BYTES, Arg, Band, CrossRankSite, Launch, Region, Stage, Step, SyncEdge, takes_draft_probs
from . import derive, executor
from .errors import InputError
from .executor import Ring
from .geometry import next_pow2
from .ops.dense import LayerShape, RoutedShape, layer_ops, layer_regions
from .ops.head import HeadShape, embed_ops, head_ops, head_regions
from .ops.moe import moe_layer_ops, moe_layer_regions
from .ops.spec import Op
from .recipe import Recipe
from .schedule import Schedule, ScheduleEntry, load_schedule
from .tiling import Tiling, kv_substreams, norm_rows_per_load

HANG_SLOTS = 64  # wait-timeout records a debug build keeps per step (hang_log: a count, then 4 × int64 each)
#: The kernel argument a program of one op takes for each band constant its op passes at launch
#: (``Op.band_args``).
BAND_ARGS = {"M": "m", "ROWS": "rows", "SPLITS": "kv_splits", "G": "grid"}


@dataclass(frozen=True)
class ProgramPlan:
    name: str
    kind: str  # embed | layer (a dense decoder layer) | moe (a routed one) | head
    band: Band
    mode: str  # persistent | staged
    ops: tuple[Op, ...]  # the ops this code object runs, in order
    stages: tuple[Stage, ...]  # one per op, numbered by the op's place in its kind's list
    grid: int
    num_warps: int
    regions: tuple[Region, ...]
    syncs: tuple[SyncEdge, ...]
    args: tuple[Arg, ...]  # the named ABI
    params: tuple[tuple[str, object], ...]  # the ops' shared constants (shapes, tiles), for reading the plan
    launch_pdl: bool
    launch_cooperative: bool
    wait_spins: int  # a debug build's waits give up after this many polls (0: never)
    hang_slots: int  # hang_log records (debug builds; 0 otherwise)
    clock_slots: int  # int64 per CTA in a profiling build's stage clock (0: not clocked)
    schedule: ScheduleEntry
    executor: str = "triton"  # triton | gluon (compiler/executor.py)
    ring: Ring | None = None  # the streaming executor's shared-memory rings
    scalars: tuple[tuple[str, int], ...] = ()  # the values of its band arguments (role ``band``), by name

    def param(self, name: str):
        return dict(self.params)[name]

    @property
    def cross_rank(self) -> tuple[CrossRankSite, ...]:
        """Where its ops meet the other ranks (tensor parallelism), in program order."""
        return tuple(CrossRankSite(op.name, kind, at.site, at.ranks) for op in self.ops
                     for kind, at in (("wait", op.peer_wait), ("signal", op.peer_signal)) if at is not None)

    @property
    def counters(self) -> int:
        """The sync counters one launch of the program uses (its edges)."""
        return len(self.syncs)


@dataclass(frozen=True)
class Plan:
    recipe: Recipe
    schedule: Schedule  # the table the programs were planned with (derived entries included)
    programs: tuple[ProgramPlan, ...]
    steps: tuple[Step, ...]

    @property
    def schedule_source(self) -> str:
        return self.schedule.source

    def program(self, name: str) -> ProgramPlan:
        for p in self.programs:
            if p.name == name:
                return p
        raise KeyError(name)

    def step(self, band: Band, mode: str) -> Step:
        for s in self.steps:
            if s.band == band and s.mode == mode:
                return s
        raise KeyError((band, mode))

    def step_bytes(self, band: Band, context: int, selected: dict[int, int] | None = None) -> int:
        """Bytes a step of this band must move at ``context`` tokens per row (the roofline's
        numerator). A routed layer's experts count as many times as its rows chose distinct
        experts, ``selected[layer]``, known after the step (``runtime``'s ``DecodeStep.routed``);
        without it, the most they can choose."""
        g = self.recipe.rank_geometry
        return sum(stage.bytes_moved(g.attended(context), g.experts_chosen(launch.layer, band.m, selected))
                   for launch in self.step(band, self.recipe.deployment.modes[0]).launches
                   for stage in self.program(launch.program).stages)


class Planner:
    """Turns a Recipe (and its target's schedule) into a Plan."""

    def __init__(self, recipe: Recipe, schedule: Schedule | None = None):
        self.recipe = recipe
        self.schedule = schedule or load_schedule(recipe.deployment.target.name)
        self.tiling = Tiling(recipe, self.schedule)
        d = recipe.deployment
        self.w = DTYPE_BYTES[d.dtypes.weights]
        self.kvb = DTYPE_BYTES[d.dtypes.kv]

    def plan(self) -> Plan:
        programs, steps = [], []
        for band in self.recipe.deployment.bands:
            for mode in self.recipe.deployment.modes:
                g = self.recipe.rank_geometry
                embed = self._embed(band, mode)
                dense = self._layer(band, mode, "layer") if len(g.moe_layers) < g.layers else ()
                moe = self._layer(band, mode, "moe") if g.moe_layers else ()
                head = self._head(band, mode)
                for p in (*embed, *dense, *moe, *head):
                    if p.name not in {q.name for q in programs}:
                        programs.append(p)
                launches = [Launch(p.name, None) for p in embed]
                for layer_index in range(g.layers):
                    layer = moe if g.is_moe(layer_index) else dense
                    launches += [Launch(p.name, layer_index) for p in layer]
                launches += [Launch(p.name, None) for p in head]
                steps.append(Step(band, mode, tuple(launches)))
        clock_slots = 1 + 2 * max(len(p.stages) + p.stages[0].index for p in programs)
        if self.recipe.deployment.stage_clock:  # one row stride for every clocked launch
            programs = [_with_clock_slots(p, clock_slots) if _clocked(p.kind, True) else p for p in programs]
        return Plan(self.recipe, self.schedule, tuple(programs), tuple(steps))

    # -- programs ------------------------------------------------------------------------------

    def _common(self, band: Band) -> dict:
        return {"ROWS_P": max(16, next_pow2(band.m)), "EPS": self.recipe.geometry.norm_eps,
                "DOT_IEEE": self.recipe.deployment.dtypes.activations == "fp32"}

    def _x_parts(self, band: Band) -> int:
        """The partials the hidden state between layers is held in (``LayerShape.x_parts``)."""
        return 1 if self.recipe.deployment.tensor_parallel > 1 else self.tiling.down_split(band)

    def _embed(self, band: Band, mode: str) -> tuple[ProgramPlan, ...]:
        """The band's embedding program (staged in every mode: a row gather); under tensor
        parallelism a second, the all-reduce of the ranks' rows."""
        g, d = self.recipe.rank_geometry, self.recipe.deployment
        entry = self.tiling.entry("embed", band)
        block = min(entry.embed_block, next_pow2(g.hidden))
        grid = min(d.sm_count * entry.ctas_per_sm, band.m * -(-g.hidden // block))
        parts = self._x_parts(band)
        ops = embed_ops(band.m, g.hidden, block, parts, grid, d.dtypes.weights, self.w, d.tensor_parallel, g.vocab)
        declared = {r.name: r for op in ops for r in op.writes}
        params = {"M": band.m, "H": g.hidden, "BH": block, "X_PARTS": parts, "G": grid}
        names = [f"embed.{band.name}", f"embed.{band.name}.reduce"]
        return tuple(self._program(name, "embed", band, "staged", (op,), index, declared, grid, params, entry,
                                   pdl=False) for index, (name, op) in enumerate(zip(names, ops)))

    def _layer(self, band: Band, mode: str, kind: str) -> tuple[ProgramPlan, ...]:
        """The band's layer programs of ``kind`` in ``mode``: the dense layers' (``layer``) or the
        routed layers' (``moe``), each with its own schedule entry (the table's entries for one
        kind say nothing of the other)."""
        g, d = self.recipe.rank_geometry, self.recipe.deployment
        entry = self.tiling.entry(kind, band)
        full_grid = d.sm_count * entry.ctas_per_sm
        splits = self.tiling.kv_splits(band, full_grid, entry)
        k_splits = self.tiling.k_splits(band, kind)
        kt, long_kt = max(entry.kv_tile, d.kv_cache.block_size), entry.long_kv_tile
        sub = kv_substreams(entry, kt)
        in_subs = f", each as {sub} sub-tiles with their own softmax states" if sub > 1 else ""
        kv_tiles = f"{kt}-token tiles" + (f" ({long_kt} where a split holds ≥ {long_kt} tokens{in_subs})"
                                          if long_kt > kt else "")
        if g.sliding_window:
            kv_tiles += f", over the last {g.sliding_window} positions (sliding window)"
        norm_stages = bool(entry.norm_stages)
        bn = self.tiling.block_n(entry)
        cx = {
            **self._common(band), "H": g.hidden, "H_P": next_pow2(g.hidden), "NQ": g.q_heads, "NKV": g.kv_heads,
            "D": g.head_dim, "DP": next_pow2(g.head_dim), "INTER": g.intermediate, "ROWS": band.rows, "TOKENS": band.tokens,
            "QP": max(16, next_pow2(g.group * band.tokens)), "TP": max(16, next_pow2(band.tokens)),
            "QK_NORM": g.qk_norm, "QKV_BIAS": g.qkv_bias, "BS": d.kv_cache.block_size,
            "KT": kt, "LONG_KT": long_kt, "KV_STAGES": entry.kv_stages, "WINDOW": g.sliding_window,
            "LONG_KV_STAGES": entry.long_kv_stages or entry.kv_stages, "KV_SUB": sub,
            "SPLITS": splits,
            "SP": max(2, next_pow2(splits)), "BN": bn, "BK": self.tiling.block_k(entry),
            "QKV_SPLIT": k_splits.qkv, "O_SPLIT": k_splits.o, "DOWN_SPLIT": k_splits.down, "W_STAGES": entry.weight_stages,
            "NORM_ROWS": norm_rows_per_load(entry, band), "NORM_STAGES": norm_stages,
        }
        routed = None
        if kind == "moe":
            e = g.experts
            routed = RoutedShape(e.count, e.top_k, e.intermediate, e.normalize, e.selected(band.m), k_splits.router)
            cx |= {"E_P": next_pow2(e.count), "SLOTS_P": next_pow2(routed.slots), "ROUTER_SPLIT": k_splits.router}

        def shape(grid: int) -> LayerShape:
            return LayerShape(g.hidden, g.q_heads, g.kv_heads, g.head_dim, g.intermediate, g.qkv_bias, g.qk_norm,
                              band.rows, band.tokens, d.dtypes, self.w, self.kvb, grid,
                              bn, splits, k_splits.qkv, k_splits.o, k_splits.down, norm_stages, kv_tiles,
                              tuple(sorted(cx.items())), d.quant, routed, d.tensor_parallel)

        # Region shapes (the per-CTA x̂ slices) are the full grid's in every mode.
        regions, ops = (moe_layer_regions, moe_layer_ops) if routed else (layer_regions, layer_ops)
        declared = regions(shape(full_grid))
        programs = self._moded(kind, band, mode, lambda grid: ops(shape(grid)), declared, full_grid, cx, entry)
        return self._streamed(band, entry, cx, programs, declared) if self.tiling.streams(entry, mode) else programs

    def _streamed(self, band: Band, entry: ScheduleEntry, cx: dict, programs: tuple[ProgramPlan, ...],
                  declared: dict) -> tuple[ProgramPlan, ...]:
        """The persistent layer programs (dense or routed) as the streaming executor runs them."""
        g, d = self.recipe.rank_geometry, self.recipe.deployment
        other = executor.shared_other(entry.num_warps, cx["QP"], g.head_dim, cx.get("SLOTS_P", 0), cx.get("E_P", 0),
                                      band.m)
        rings = executor.ring(entry.stream_slots, entry.num_warps, self.tiling.stream_block_k(entry), band.m, other,
                              d.dtypes.projection)
        kv_tile = executor.kv_tile_tokens(rings, g.head_dim, d.kv_cache.block_size)
        least = self.tiling.least_kv_tile(entry)
        if kv_tile < least or kv_tile & (kv_tile - 1):
            raise InputError(self.schedule.source, "block_k",
                             f"a streamed KV tile is whole pages of K and V in one ring unit, a power of two of at "
                             f"least {least} tokens (16 a compute warp): a {rings.unit_bytes} B unit holds "
                             f"{kv_tile} tokens of head_dim {g.head_dim}; raise block_k")
        return tuple(self._streaming(p, rings, declared) for p in programs)

    def _streaming(self, p: ProgramPlan, rings: Ring, declared: dict) -> ProgramPlan:
        """A persistent layer program as the streaming executor runs it: its streamed weights and
        KV caches bound as TMA descriptors (so its ABI says so)."""
        d = self.recipe.deployment
        ops = executor.streamed(p.ops, rings)
        args = derive.abi(ops, declared, counters=bool(p.syncs), hang_log=bool(p.hang_slots),
                          stage_clock=_clocked(p.kind, d.stage_clock))
        return replace(p, ops=ops, stages=derive.stages(ops, p.stages[0].index), args=args, executor="gluon",
                       ring=rings)

    def _head(self, band: Band, mode: str) -> tuple[ProgramPlan, ...]:
        g, d = self.recipe.rank_geometry, self.recipe.deployment
        entry = self.tiling.entry("head", band)
        bn = entry.head_block_n
        tiles = -(-g.vocab // bn)
        full_grid = d.sm_count * entry.ctas_per_sm
        norm_stage = bool(entry.norm_stages)
        parts = self._x_parts(band)
        cx = {**self._common(band), "H": g.hidden, "H_P": next_pow2(g.hidden), "V": g.vocab, "M": band.m, "BN": bn,
              "BK": self.tiling.block_k(entry, quantized=False), "TILES_P": next_pow2(tiles), "X_PARTS": parts,
              "GREEDY": d.head != "logits", "W_STAGES": entry.weight_stages, "NORM_STAGE": norm_stage,
              "NORM_ROWS": norm_rows_per_load(entry, band)}

        def shape(grid: int) -> HeadShape:
            return HeadShape(g.hidden, g.vocab, band.m, d.dtypes, self.w, grid, bn, parts, d.head != "logits",
                             norm_stage, tuple(sorted(cx.items())), band.tokens, d.head == "sample",
                             takes_draft_probs(d, band), d.tensor_parallel, self.recipe.geometry.vocab)

        declared = head_regions(shape(full_grid))
        return self._moded("head", band, mode, lambda grid: head_ops(shape(grid)), declared, full_grid, cx, entry)

    def _moded(self, kind, band, mode, build_ops, declared, full_grid, cx, entry) -> tuple[ProgramPlan, ...]:
        """One persistent program running every op, or one staged program per op."""
        ops = build_ops(full_grid)
        if mode == "persistent" and len(ops) > 1:
            return (self._program(f"{kind}.{band.name}.persistent", kind, band, mode, ops, 0, declared, full_grid,
                                  {**cx, "G": full_grid}, entry, pdl=self.recipe.deployment.target.is_nvidia),)
        out = []
        for index, op in enumerate(ops):
            grid = min(full_grid, op.tasks)
            name = f"{kind}.{band.name}.{mode}" if mode == "persistent" else f"{kind}.{band.name}.{op.name}"
            out.append(self._program(name, kind, band, mode, (build_ops(grid)[index],), index, declared, grid,
                                     {**cx, "G": grid}, entry, pdl=False))
        return tuple(out)

    def _program(self, name, kind, band, mode, ops, first, declared, grid, params, entry, *, pdl) -> ProgramPlan:
        d = self.recipe.deployment
        scalars = ()
        if len(ops) == 1:
            op, scalars = band_generic(ops[0])
            ops = (op,)
        syncs = derive.edges(ops, grid) if len(ops) > 1 else ()
        waits = bool(syncs) or any(op.peer_wait is not None for op in ops)  # a debug build's waits give up
        debug = waits and d.debug_wait_spins > 0
        args = derive.abi(ops, declared, counters=bool(syncs), hang_log=debug, stage_clock=_clocked(kind, d.stage_clock))
        return ProgramPlan(name, kind, band, mode, ops, derive.stages(ops, first), grid, entry.num_warps,
                           derive.regions(declared, ops), syncs, args, tuple(sorted(params.items())), pdl,
                           len(ops) > 1, d.debug_wait_spins if debug else 0, HANG_SLOTS if debug else 0, 0, entry,
                           scalars=scalars)


def band_generic(op: Op) -> tuple[Op, tuple[tuple[str, int], ...]]:
    """The op of a one-op program with its band constants (``Op.band_args``) made run-time arguments,
    and their values. Its text then names no row count, KV split count or grid, so the bands
    whose programs have the same tiles (a recipe's 2-, 4- and 8-row staged GEMVs, say) compile
    to one code object; a multi-op program keeps them in its text, where they size its sync
    edges and register tiles."""
    bindings, scalars = [], []
    for name, value in op.bindings:
        if name in op.band_args:
            arg = Arg(BAND_ARGS[name], "i32", "band")
            scalars.append((arg.name, value))
            value = arg
        bindings.append((name, value))
    return replace(op, bindings=tuple(bindings)), tuple(scalars)


def _clocked(kind: str, profiling: bool) -> bool:
    """Whether a profiling build clocks the program: every one but the embedding (a row gather)."""
    return profiling and kind != "embed"


def _with_clock_slots(p: ProgramPlan, slots: int) -> ProgramPlan:
    return replace(p, clock_slots=slots)


def plan_recipe(recipe: Recipe, schedule: Schedule | None = None) -> Plan:
    return Planner(recipe, schedule).plan()
