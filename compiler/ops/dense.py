"""The dense decoder layer as an op list: [norm_qkv], qkv, attn, combine, o, [norm_up], up, down.

``layer_ops`` builds it from the layer's shape (``LayerShape``, which the planner fills from the
geometry, band and schedule entry): the attention half (``attention_ops``, which a routed layer
shares, ``moe.py``), then the dense MLP. The norms are ops of their own with the schedule's
``norm_stages``; without, each CTA of qkv and up stages its own x̂ (docs/plan.md says when each
pays).
"""

from __future__ import annotations

from dataclasses import dataclass

from ...schema import DTYPE_BYTES, Arg, DtypeRoles, Region, WeightQuant
from . import parallel
from .spec import Need, Op, WeightStream

_KV_DISJOINT = ("disjoint: the step's tokens are appended at positions ≥ context − tokens; the cache is read "
                "below that, and the step's own K/V come from qkv")
CTA_PRIVATE = "cta-local: each CTA writes and reads back only its own slice (its normed input), after a CTA barrier"


@dataclass(frozen=True)
class RoutedShape:
    """A routed MLP as a band's layer program builds it: the model's experts (``schema.Experts``),
    the most distinct ones the band's rows can select (its ``slots``), and the router GEMV's K split."""

    count: int
    top_k: int
    inter: int
    normalize: bool
    slots: int
    router_split: int


@dataclass(frozen=True)
class LayerShape:
    """What the layer's ops are built from: geometry, band, dtypes and the schedule's choices."""

    hidden: int
    q_heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    qkv_bias: bool
    qk_norm: bool
    rows: int
    tokens: int
    dtypes: DtypeRoles
    w_bytes: int
    kv_bytes: int
    grid: int
    block_n: int
    splits: int  # attention's KV splits
    qkv_split: int  # K splits of the GEMVs
    o_split: int
    down_split: int
    norm_stages: bool
    kv_tiles: str  # how attention walks the cache, for the task's description
    params: tuple[tuple[str, object], ...]  # the device functions' constants (EPS, BN, BK, …)
    quant: WeightQuant | None = None  # the projections' block scaling (their dtype: dtypes.projection)
    routed: RoutedShape | None = None  # a routed (mixture-of-experts) layer's MLP, ops/moe.py; None: dense
    ranks: int = 1  # tensor parallelism: the ranks whose partials o's and down's all-reduces sum (ops/parallel.py)

    @property
    def m(self) -> int:
        return self.rows * self.tokens

    @property
    def x_parts(self) -> int:
        """The partials the hidden state between layers is held in: down's K splits, or one
        (the all-reduce's sum) under tensor parallelism."""
        return 1 if self.ranks > 1 else self.down_split

    @property
    def x1_parts(self) -> int:
        """Likewise for x1, the residual stream after attention: o's K splits, or one."""
        return 1 if self.ranks > 1 else self.o_split

    @property
    def qkv_rows(self) -> int:
        return (self.q_heads + 2 * self.kv_heads) * self.head_dim


def x_hat(name: str, norm: str, gemv: str, dtype: str, m: int, h: int, grid: int, norm_stage: bool) -> Region:
    """The normed input x̂ of a GEMV after an RMSNorm (qkv, up, the LM head): with a norm op
    (``norm``) one [M, hidden] copy it writes and every CTA of ``gemv`` reads after their edge;
    without, each CTA's own slice, staged by the CTA itself."""
    if norm_stage:
        return Region(name, "scratch", dtype, (m, h), norm, ())
    return Region(name, "scratch", dtype, (grid, m, h), gemv, (), CTA_PRIVATE)


def tensor(name: str, dtype: str, role: str) -> Arg:
    return Arg(name, "*" + dtype, role)


def region_arg(region: Region) -> Arg:
    return tensor(region.name, region.dtype, {"io": "io", "scratch": "scratch", "kv_cache": "kv_cache"}[region.kind])


def _tiles(n: int, bn: int, split: int) -> tuple[int, str]:
    """A GEMV's tasks over n output rows: (count, description)."""
    return -(-n // bn) * split, f"(tiles of {bn}" + (f") × {split} K splits" if split > 1 else ")")


@dataclass(frozen=True)
class Projection:
    """A GEMV's weight as the engine holds it: one tensor, or several stacked by rows (q, k, v;
    gate, up) that the programs read where they are (``kernels/common.segment_ptrs``), with their
    block scales for a quantized checkpoint."""

    tensors: tuple[Arg, ...]
    scales: tuple[Arg, ...]  # one per tensor (a quantized checkpoint's ``weight_scale_inv``), else empty
    starts: tuple[int, ...]  # the first stacked row of each tensor after the first
    streams: tuple[WeightStream, ...]


def stacked_slots(names: tuple[str, str, str], args: tuple[Arg, ...]) -> tuple[tuple[str, Arg | None], ...]:
    """The device functions' three pointer parameters of a stacked weight (``names``) bound to its
    tensors ``args``, those it does not have to None."""
    return tuple((n, args[i] if i < len(args) else None) for i, n in enumerate(names))


def projection(s: LayerShape, names: tuple[str, ...], rows: tuple[int, ...], cols: int, tile_rows: int = 1,
               k_split: int = 1) -> Projection:
    """The projection held as the tensors ``names`` (``rows`` rows each), their block scales
    (quantized checkpoints) and the bytes they stream."""
    dtype = s.dtypes.projection
    tensors = tuple(tensor(n, dtype, "layer_weight") for n in names)
    streams = tuple(WeightStream(n, r, cols, DTYPE_BYTES[dtype], tile_rows, k_split) for n, r in zip(names, rows))
    starts = tuple(sum(rows[:i]) for i in range(1, len(rows)))
    if s.quant is None:
        return Projection(tensors, (), starts, streams)
    scales = tuple(tensor(n + "_scale", s.dtypes.scales, "layer_weight") for n in names)
    scale_streams = tuple(WeightStream(n + "_scale", *s.quant.scale_shape(r, cols), DTYPE_BYTES[s.dtypes.scales])
                          for n, r in zip(names, rows))
    return Projection(tensors, scales, starts, streams + scale_streams)


def gemv_bindings(s: LayerShape, *, x: Arg, x_parts: int, norm: Arg | None, staged: Arg | None, w: Projection,
                  out: Arg, n: int, k: int, split: int, bias: tuple[Arg, ...] = (), residual: Arg | None = None,
                  res_parts: int = 1, gated: bool = False) -> tuple[tuple[str, object], ...]:
    p = dict(s.params)
    q = s.quant
    quant = bool(w.scales)
    stacked = 2 * n if gated else n
    seg1, seg2 = (w.starts + (stacked, stacked))[:2]
    return (("x_ptr", x), ("X_PARTS", x_parts), ("norm_ptr", norm), ("x_hat_ptr", staged),
            *stacked_slots(("w_ptr", "w2_ptr", "w3_ptr"), w.tensors),
            *stacked_slots(("w_scale_ptr", "w2_scale_ptr", "w3_scale_ptr"), w.scales),
            ("SEGMENTS", len(w.tensors)), ("SEG1", seg1), ("SEG2", seg2), ("QUANT", quant),
            ("QBN", q.block_rows if quant else 1), ("QBK", q.block_cols if quant else 1), ("out_ptr", out),
            *stacked_slots(("bias_ptr", "b2_ptr", "b3_ptr"), bias), ("residual_ptr", residual),
            ("RES_PARTS", res_parts), ("N", n), ("K", k), ("K_P", p["H_P"]), ("M", s.m), ("ROWS_P", p["ROWS_P"]),
            ("BN", s.block_n), ("BK", p["BK"]),
            ("SPLIT", split), ("G", s.grid), ("EPS", p["EPS"]), ("NORM", norm is not None and staged is not None),
            ("HAS_BIAS", bool(bias)), ("HAS_RESIDUAL", residual is not None), ("GATED", gated),
            ("INTER", s.intermediate if gated else 0), ("DOT_IEEE", p["DOT_IEEE"]), ("W_STAGES", p["W_STAGES"]),
            ("NORM_ROWS", p["NORM_ROWS"]))


def gemv_band_args(x_parts: int, staged: Arg | None, gated: bool = False) -> tuple[str, ...]:
    """A GEMV's band constants taken at run time (``Op.band_args``): its row count, unless each
    CTA stages its input (a norm or a sum of partials, unrolled over the rows) or the GEMV is
    gated. Up's activation loads, given its rows, skip the padding rows' copies outright; as a
    run-time value they cost its launch 5–7% at 2 and 8 rows on the H200 (0.379 → 0.404 ms a
    step at 2 rows, docs/measurements/2026-12-06-h200-up-s2), for two more code objects in the
    default recipe."""
    return ("M",) if x_parts == 1 and staged is None and not gated else ()


def norm_op(s: LayerShape, name: str, x: Region, x_parts: int, norm: Arg, out: Region, reader: str,
            first: bool = False) -> Op:
    p = dict(s.params)
    h = s.hidden
    return Op(name, "norm_op", None, s.m, f"(token row): {out.name.replace('x_hat', 'x̂')} = RMSNorm({x.name}), "
              f"read by every {reader} task",
              (("x_ptr", region_arg(x)), ("X_PARTS", x_parts), ("norm_ptr", norm), ("x_hat_ptr", region_arg(out)),
               ("M", s.m), ("K", h), ("K_P", p["H_P"]), ("EPS", p["EPS"]), ("G", s.grid)),
              writes=(out,), reads=(x.name,), needs=(Need(x.name, "whole rows (a row's norm is a reduction over it)"),),
              weights=(WeightStream(norm.name, 1, h, s.w_bytes),), after_previous_launch=first)


def attention_regions(s: LayerShape) -> list[Region]:
    """The regions of the layer's attention half (``attention_ops``), x_in to x1; x̂_qkv apart
    (``x_hat_qkv``), the ABI ordering regions as they are declared."""
    m, h, d = s.m, s.hidden, s.head_dim
    return [
        Region("x_in", "io", "fp32", (s.x_parts, m, h), None, ()),
        Region("qkv", "scratch", "fp32", (s.qkv_split, m, s.qkv_rows), "qkv", ()),
        Region("k_cache", "kv_cache", s.dtypes.kv, (s.rows, s.kv_heads, d), "attn", (), _KV_DISJOINT),
        Region("v_cache", "kv_cache", s.dtypes.kv, (s.rows, s.kv_heads, d), "attn", (), _KV_DISJOINT),
        Region("part_acc", "scratch", "fp32", (m, s.q_heads, s.splits, d), "attn", ()),
        Region("part_ml", "scratch", "fp32", (m, s.q_heads, s.splits, 2), "attn", ()),
        # attn_out, h and x̂ only feed a GEMV: stored in the activation dtype its product takes.
        Region("attn_out", "scratch", s.dtypes.activations, (m, s.q_heads * d), "combine", ()),
        *parallel.reduced(Region("x1", "scratch", "fp32", (s.o_split, m, h), "o", ()), s.ranks),
    ]


def x_hat_qkv(s: LayerShape) -> Region:
    return x_hat("x_hat_qkv", "norm_qkv" if s.norm_stages else "qkv", "qkv", s.dtypes.activations, s.m, s.hidden,
                 s.grid, s.norm_stages)


def x_out(s: LayerShape, writer: str) -> tuple[Region, ...]:
    """The layer's output, the next launch's x_in: one partial per K split of its last GEMV;
    under tensor parallelism this rank's partial and the all-reduce's sum (``parallel.reduced``)."""
    return parallel.reduced(Region("x_out", "io", "fp32", (s.down_split, s.m, s.hidden), writer, ()), s.ranks)


def layer_regions(s: LayerShape) -> dict[str, Region]:
    """Every region the dense layer's ops touch, by name (writers set; readers derived by the planner)."""
    up_in = "norm_up" if s.norm_stages else "up"
    regions = [*attention_regions(s), Region("h", "scratch", s.dtypes.activations, (s.m, s.intermediate), "up", ()),
               x_hat_qkv(s), x_hat("x_hat_up", up_in, "up", s.dtypes.activations, s.m, s.hidden, s.grid, s.norm_stages),
               *x_out(s, "down")]
    return {r.name: r for r in regions}


def layer_ops(s: LayerShape) -> tuple[Op, ...]:
    """The dense layer's ops in program order."""
    r = layer_regions(s)
    return attention_ops(s, r) + dense_mlp_ops(s, r)


def attention_ops(s: LayerShape, r: dict[str, Region]) -> tuple[Op, ...]:
    """The layer's ops up to o (x1 = x_in + attention), which dense and routed layers share."""
    p = dict(s.params)
    arg = {name: region_arg(region) for name, region in r.items()}
    w, h, d, m = s.dtypes.weights, s.hidden, s.head_dim, s.m
    wt = lambda name: tensor(name, w, "layer_weight")  # noqa: E731
    attn_norm = wt("attn_norm")
    wb, kvb = s.w_bytes, s.kv_bytes
    ns = s.norm_stages
    ops = []
    if ns:
        ops.append(norm_op(s, "norm_qkv", r["x_in"], s.x_parts, attn_norm, r["x_hat_qkv"], "qkv", first=True))

    # qkv: x̂ · [W_q; W_k; W_v]ᵀ (+ bias) → qkv (raw, fp32; one partial per K split)
    tasks, tiles = _tiles(s.qkv_rows, s.block_n, s.qkv_split)
    nq, nkv = s.q_heads * d, s.kv_heads * d
    w_qkv = projection(s, ("w_q", "w_k", "w_v"), (nq, nkv, nkv), h, s.block_n, s.qkv_split)
    bias = (wt("b_q"), wt("b_k"), wt("b_v")) if s.qkv_bias else ()
    x_qkv = "x_hat_qkv" if ns else "x_in"
    ops.append(Op(
        "qkv", "gemv_op", "gemv_prefetch", tasks, ("x̂" if ns else "RMSNorm(x_in)") + " · W_q|W_k|W_v rows " + tiles,
        gemv_bindings(s, x=arg[x_qkv], x_parts=1 if ns else s.x_parts, norm=attn_norm,
                      staged=None if ns else arg["x_hat_qkv"], w=w_qkv, out=arg["qkv"], n=s.qkv_rows, k=h,
                      split=s.qkv_split, bias=bias),
        writes=(r["qkv"],) + (() if ns else (r["x_hat_qkv"],)), reads=(x_qkv,) + (() if ns else ("x_hat_qkv",)),
        needs=(Need(x_qkv, "the task's K-slice of every row" if ns else "whole rows (each CTA norms them)"),),
        weights=w_qkv.streams
        + tuple(WeightStream(b.name, 1, rows, wb) for b, rows in zip(bias, (nq, nkv, nkv)))
        + (() if ns else (WeightStream("attn_norm", 1, h, wb),)),
        io_bytes=m * h * 4, after_previous_launch=not ns,
        band_args=gemv_band_args(1 if ns else s.x_parts, None if ns else arg["x_hat_qkv"])))

    # attn: (row, KV head, split) → partials; q/k norm, RoPE and the KV append (live rows only)
    kv_row = s.rows * s.kv_heads * d * 2 * kvb
    qk = (("q_norm_ptr", wt("q_norm")), ("k_norm_ptr", wt("k_norm"))) if s.qk_norm else (("q_norm_ptr", None),
                                                                                          ("k_norm_ptr", None))
    ops.append(Op(
        "attn", "attention_op", "attention_prefetch", s.rows * s.kv_heads * s.splits,
        f"(row, KV head, split): q/k norm, RoPE, KV append, split-KV attention in {s.kv_tiles}",
        (("qkv_ptr", arg["qkv"]), ("QKV_PARTS", s.qkv_split), ("rope_ptr", tensor("rope", "fp32", "table")), *qk,
         ("k_cache_ptr", arg["k_cache"]), ("v_cache_ptr", arg["v_cache"]),
         ("block_tables_ptr", tensor("block_tables", "i32", "step_input")),
         ("bt_stride", Arg("bt_stride", "i32", "step_input")),
         ("context_lens_ptr", tensor("context_lens", "i32", "step_input")),
         ("positions_ptr", tensor("positions", "i32", "step_input")),
         ("part_acc_ptr", arg["part_acc"]), ("part_ml_ptr", arg["part_ml"]),
         *((k, p[k]) for k in ("ROWS", "NQ", "NKV", "D", "DP", "TOKENS", "SPLITS", "BS", "KT", "LONG_KT", "KV_STAGES",
                               "LONG_KV_STAGES", "KV_SUB", "QP", "TP", "QK_NORM", "EPS", "DOT_IEEE", "WINDOW")),
         ("G", s.grid), ("TASKS", s.rows * s.kv_heads * s.splits)),
        writes=(r["k_cache"], r["v_cache"], r["part_acc"], r["part_ml"]), reads=("qkv", "k_cache", "v_cache"),
        needs=(Need("qkv", "the q, k and v columns of the task's KV head (all K-split partials)"),),
        weights=((WeightStream("q_norm", 1, d, wb), WeightStream("k_norm", 1, d, wb)) if s.qk_norm else ()),
        kv_bytes_per_token=kv_row, io_bytes=kv_row * s.tokens, band_args=("ROWS", "SPLITS")))

    ops.append(Op(
        "combine", "combine_op", None, m * s.q_heads, "(token row, query head): merge split partials",
        (("part_acc_ptr", arg["part_acc"]), ("part_ml_ptr", arg["part_ml"]), ("attn_out_ptr", arg["attn_out"]),
         ("M", m), ("NQ", s.q_heads), ("D", d), ("DP", p["DP"]), ("SPLITS", s.splits), ("SP", p["SP"]), ("G", s.grid)),
        writes=(r["attn_out"],), reads=("part_acc", "part_ml"),
        needs=(Need("part_acc", "the head's splits"), Need("part_ml", "the head's splits"))))

    tasks, tiles = _tiles(h, s.block_n, s.o_split)
    w_o = projection(s, ("w_o",), (h,), s.q_heads * d, s.block_n, s.o_split)
    split = s.ranks > 1  # o writes this rank's partial; the all-reduce adds the residual
    out = "x1_part" if split else "x1"
    ops.append(parallel.signalling(Op(
        "o", "gemv_op", "gemv_prefetch", tasks, "attn_out · W_o rows " + ("" if split else "+ x_in ") + tiles,
        gemv_bindings(s, x=arg["attn_out"], x_parts=1, norm=None, staged=None, w=w_o, out=arg[out], n=h,
                      k=s.q_heads * d, split=s.o_split, residual=None if split else arg["x_in"],
                      res_parts=s.x_parts),
        writes=(r[out],), reads=("attn_out",) + (() if split else ("x_in",)),
        needs=(Need("attn_out", "the query heads in the task's K-slice"),),
        weights=w_o.streams, band_args=gemv_band_args(1, None)), parallel.SITE_O, s.ranks))
    if split:
        ops.append(parallel.reduce_op("reduce_o", r["x1_part"], r["x_in"], r["x1"], parallel.SITE_O, s.ranks, s.grid,
                                      dict(s.params)["H_P"]))
    return tuple(ops)


def dense_mlp_ops(s: LayerShape, r: dict[str, Region]) -> tuple[Op, ...]:
    """The dense MLP: [norm_up], up (gate and up rows, silu(g)·u), down (+ x1)."""
    arg = {name: region_arg(region) for name, region in r.items()}
    h = s.hidden
    mlp_norm = tensor("mlp_norm", s.dtypes.weights, "layer_weight")
    wb, m = s.w_bytes, s.m
    ns = s.norm_stages
    ops = []
    if ns:
        ops.append(norm_op(s, "norm_up", r["x1"], s.x1_parts, mlp_norm, r["x_hat_up"], "up"))
    tasks, tiles = _tiles(s.intermediate, s.block_n, 1)
    w_gate_up = projection(s, ("w_gate", "w_up"), (s.intermediate, s.intermediate), h, s.block_n)
    x_up = "x_hat_up" if ns else "x1"
    ops.append(Op(
        "up", "gemv_op", "gemv_prefetch", tasks,
        ("x̂_up · " if ns else "RMSNorm(x1) · ") + "W_gate|W_up rows, silu(g)·u " + tiles,
        gemv_bindings(s, x=arg[x_up], x_parts=1 if ns else s.x1_parts, norm=mlp_norm,
                      staged=None if ns else arg["x_hat_up"], w=w_gate_up, out=arg["h"], n=s.intermediate, k=h,
                      split=1, gated=True),
        writes=(r["h"],) + (() if ns else (r["x_hat_up"],)), reads=(x_up,) + (() if ns else ("x_hat_up",)),
        needs=(Need(x_up, "every row's K columns" if ns else "whole rows (each CTA norms them)"),),
        weights=w_gate_up.streams
        + (() if ns else (WeightStream("mlp_norm", 1, h, wb),)),
        band_args=gemv_band_args(1 if ns else s.x1_parts, None if ns else arg["x_hat_up"], gated=True)))

    tasks, tiles = _tiles(h, s.block_n, s.down_split)
    w_down = projection(s, ("w_down",), (h,), s.intermediate, s.block_n, s.down_split)
    split = s.ranks > 1  # down writes this rank's partial; the all-reduce adds x1
    out = "x_out_part" if split else "x_out"
    ops.append(parallel.signalling(Op(
        "down", "gemv_op", "gemv_prefetch", tasks, "h · W_down rows " + ("" if split else "+ x1 ") + tiles,
        gemv_bindings(s, x=arg["h"], x_parts=1, norm=None, staged=None, w=w_down, out=arg[out], n=h,
                      k=s.intermediate, split=s.down_split, residual=None if split else arg["x1"],
                      res_parts=s.x1_parts),
        writes=(r[out],), reads=("h",) + (() if split else ("x1",)),
        needs=(Need("h", "the h columns in the task's K-slice"),) + (() if split else (Need("x1", "the task's "
                                                                                           "output columns"),)),
        weights=w_down.streams,
        io_bytes=0 if split else m * h * 4, releases_next_launch=not split, band_args=gemv_band_args(1, None)),
        parallel.SITE_DOWN, s.ranks))
    if split:
        ops.append(down_all_reduce(s, r))
    return tuple(ops)


def down_all_reduce(s: LayerShape, r: dict[str, Region]) -> Op:
    """Under tensor parallelism, the all-reduce after the MLP's down projection (dense or routed):
    x_out = x1 + every rank's partial (``reduce_down``, or ``reduce_experts_down``: the region's writer)."""
    return parallel.reduce_op(r["x_out"].writer, r["x_out_part"], r["x1"], r["x_out"], parallel.SITE_DOWN, s.ranks, s.grid,
                              dict(s.params)["H_P"], io_bytes=s.m * s.hidden * 4, releases_next_launch=True)
