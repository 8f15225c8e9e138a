"""A routed (mixture-of-experts) decoder layer as an op list: the dense layer's attention half,
then norm_up, router, experts_up, experts_down.

- **router**: the GEMV x̂_up · W_routerᵀ → the band's router logits (fp32, one partial per K split).
- **experts_up**: every CTA reads the logits and routes each live token row itself: its top-k
  experts (ties to the lower index, as ``torch.topk`` takes them) and their weights, the softmax
  over every expert taken at the chosen ones (renormalized over them where the model says). The
  union of the band's chosen experts, in expert order, is the step's *slots*; every CTA derives
  the same slots from the same logits, so the routing-dependent task list — (slot, tile of the
  expert's gate and up rows) — is laid out on the device, identically on each CTA, with no
  host synchronisation and nothing allocated per step. Task t runs on CTA t mod grid. A task
  writes h[slot] = w · silu(g)·u for every row of the band, w the row's weight of the slot's
  expert (0 where the row did not choose it), so the weighting is done before down. CTA 0 also
  writes the slots (``routed``: their count, then the experts; a step's record an engine can
  read back per layer).
- **experts_down**: x_out = x1 + Σ_slots h[slot] · W_down[expert]ᵀ: a GEMV over the slots'
  concatenated K (each slot's ``inter`` columns), in tiles of the hidden size × the layer's K
  splits, each split an even share of the concatenated chunks (the hidden state leaves the layer
  as that many partials, as a dense layer's down leaves it). Dead (padding) rows choose no expert,
  so their MLP adds nothing.

The expert weights are the engine's fused tensors, read in place: gate|up [experts, 2·inter,
hidden] (an expert's gate rows, then its up rows) and down [experts, hidden, inter], as
transformers (``Qwen3MoeExperts``, ``MixtralExperts``) and vLLM (``w13``, ``w2``) hold them; an
FP8 checkpoint's as E4M3 with their block scales beside them (``_expert_stack``), the router in
the model's dtype.

Every CTA signals each edge once whatever routing chose, so no wait's target depends on it
(contracts I4, I5 and the once-a-step signal rule, docs/contracts.md).
"""

from __future__ import annotations

from ...schema import DTYPE_BYTES, Arg, Region
from . import parallel
from .dense import (
    LayerShape,
    Projection,
    _tiles,
    attention_ops,
    attention_regions,
    down_all_reduce,
    gemv_bindings,
    norm_op,
    region_arg,
    tensor,
    x_hat_qkv,
    x_out,
)
from .spec import Need, Op, WeightStream


def routed_regions(s: LayerShape) -> list[Region]:
    """The routed MLP's regions (x̂_up is one [M, hidden] copy: the router and every expert task read it)."""
    e, m = s.routed, s.m
    return [
        Region("x_hat_up", "scratch", s.dtypes.activations, (m, s.hidden), "norm_up", ()),
        Region("router_logits", "scratch", "fp32", (e.router_split, m, e.count), "router", ()),
        Region("routed", "io", "i32", (1 + e.slots,), "experts_up", ()),
        Region("h_experts", "scratch", s.dtypes.activations, (e.slots, m, e.inter), "experts_up", ()),
    ]


def moe_layer_regions(s: LayerShape) -> dict[str, Region]:
    """Every region the routed layer's ops touch, by name."""
    return {r.name: r for r in [*attention_regions(s), x_hat_qkv(s), *routed_regions(s), *x_out(s, "experts_down")]}


def moe_layer_ops(s: LayerShape) -> tuple[Op, ...]:
    """The routed layer's ops in program order."""
    r = moe_layer_regions(s)
    return attention_ops(s, r) + routed_mlp_ops(s, r)


def _routing_bindings(s: LayerShape, logits) -> tuple[tuple[str, object], ...]:
    """What routing the band's rows takes (``kernels/moe.route``): the router's logits and the rows' liveness."""
    e = s.routed
    p = dict(s.params)
    return (("logits_ptr", logits), ("L_PARTS", e.router_split),
            ("context_lens_ptr", tensor("context_lens", "i32", "step_input")), ("M", s.m), ("ROWS_P", p["ROWS_P"]),
            ("TOKENS", s.tokens), ("E", e.count), ("E_P", p["E_P"]), ("TOPK", e.top_k), ("NORMALIZE", e.normalize),
            ("SLOTS", e.slots), ("SLOTS_P", p["SLOTS_P"]))


def _expert_stack(s: LayerShape, name: str, rows: int, cols: int) -> tuple[tuple[tuple[str, object], ...], int]:
    """The bindings of an expert stack ``name`` ([experts, rows, cols], in the projections' dtype)
    and its block scales (an FP8 checkpoint's ``weight_scale_inv``, [experts, ⌈rows/QBN⌉,
    ⌈cols/QBK⌉] fp32: ``kernels/moe`` scales each expert's products by its own), and the bytes one
    expert of it moves."""
    q = s.quant
    stack = tensor(name, s.dtypes.projection, "layer_weight")
    nbytes = rows * cols * DTYPE_BYTES[s.dtypes.projection]
    scale: Arg | None = None
    if q is not None:
        scale = tensor(name + "_scale", s.dtypes.scales, "layer_weight")
        srows, scols = q.scale_shape(rows, cols)
        nbytes += srows * scols * DTYPE_BYTES[s.dtypes.scales]
    return (("w_ptr", stack), ("scale_ptr", scale), ("QUANT", q is not None), ("QBN", q.block_rows if q else 1),
            ("QBK", q.block_cols if q else 1)), nbytes


def routed_mlp_ops(s: LayerShape, r: dict[str, Region]) -> tuple[Op, ...]:
    """norm_up, router, experts_up, experts_down."""
    e = s.routed
    p = dict(s.params)
    arg = {name: region_arg(region) for name, region in r.items()}
    h, wb, m = s.hidden, s.w_bytes, s.m
    wt = lambda name: tensor(name, s.dtypes.weights, "layer_weight")  # noqa: E731
    ops = [norm_op(s, "norm_up", r["x1"], s.x1_parts, wt("mlp_norm"), r["x_hat_up"], "router and experts_up")]

    # router: x̂_up · W_routerᵀ → the band's router logits; the router stays in the model's dtype
    # in a quantized checkpoint (Qwen3-MoE's FP8 checkpoints keep it bf16)
    tasks, tiles = _tiles(e.count, s.block_n, e.router_split)
    router = Projection((wt("w_router"),), (), (), (WeightStream("w_router", e.count, h, wb, s.block_n,
                                                                  e.router_split),))
    ops.append(Op(
        "router", "gemv_op", "gemv_prefetch", tasks, "x̂_up · W_router rows " + tiles,
        gemv_bindings(s, x=arg["x_hat_up"], x_parts=1, norm=None, staged=None, w=router, out=arg["router_logits"],
                      n=e.count, k=h, split=e.router_split),
        writes=(r["router_logits"],), reads=("x_hat_up",),
        needs=(Need("x_hat_up", "the task's K-slice of every row"),), weights=router.streams))

    up_tiles = -(-e.inter // s.block_n)
    gate_up, gate_up_bytes = _expert_stack(s, "w_experts_gate_up", 2 * e.inter, h)
    ops.append(Op(
        "experts_up", "experts_up_op", None, e.slots * up_tiles,
        f"route every row (top {e.top_k} of {e.count}), then (slot, tile of {s.block_n} of the expert's gate and "
        f"up rows) over the experts the band's rows chose (at most {e.slots}): h[slot] = weight · silu(g)·u",
        (*_routing_bindings(s, arg["router_logits"]), ("routed_ptr", arg["routed"]), ("x_ptr", arg["x_hat_up"]),
         *gate_up, ("h_ptr", arg["h_experts"]), ("INTER", e.inter),
         ("K", h), ("BN", s.block_n), ("BK", p["BK"]), ("G", s.grid), ("DOT_IEEE", p["DOT_IEEE"]),
         ("W_STAGES", p["W_STAGES"])),
        writes=(r["routed"], r["h_experts"]), reads=("router_logits", "x_hat_up"),
        needs=(Need("router_logits", "every row's logits (all K-split partials)"),
               Need("x_hat_up", "every row's K columns")),
        bytes_per_expert=gate_up_bytes))

    tasks, tiles = _tiles(h, s.block_n, s.down_split)
    down, down_bytes = _expert_stack(s, "w_experts_down", h, e.inter)
    split = s.ranks > 1  # experts_down writes this rank's partial (its share of each expert); the all-reduce adds x1
    out = "x_out_part" if split else "x_out"
    ops.append(parallel.signalling(Op(
        "experts_down", "experts_down_op", None, tasks,
        "h[slots] · W_down[expert] rows over the chosen experts' concatenated columns " + ("" if split else "+ x1 ")
        + tiles,
        (("routed_ptr", arg["routed"]), ("h_ptr", arg["h_experts"]), *down,
         ("residual_ptr", None if split else arg["x1"]), ("RES_PARTS", 0 if split else s.x1_parts),
         ("out_ptr", arg[out]), ("N", h),
         ("INTER", e.inter), ("M", m), ("ROWS_P", p["ROWS_P"]), ("BN", s.block_n), ("BK", p["BK"]),
         ("SPLIT", s.down_split), ("SLOTS", e.slots), ("SLOTS_P", p["SLOTS_P"]), ("G", s.grid),
         ("DOT_IEEE", p["DOT_IEEE"]), ("W_STAGES", p["W_STAGES"])),
        writes=(r[out],), reads=("routed", "h_experts") + (() if split else ("x1",)),
        needs=(Need("routed", "the step's slots"), Need("h_experts", "the slots in the task's K share"))
        + (() if split else (Need("x1", "the task's output columns"),)),
        bytes_per_expert=down_bytes, io_bytes=0 if split else m * h * 4, releases_next_launch=not split),
        parallel.SITE_DOWN, s.ranks))
    if split:
        ops.append(down_all_reduce(s, r))
    return tuple(ops)
