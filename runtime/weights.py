"""The weights the programs read, bound in place from a Hugging Face- or vLLM-named state_dict.

The programs read each projection where the engine holds it: HF's separate q/k/v and gate/up
tensors, or vLLM's fused ``qkv_proj`` / ``gate_up_proj`` (bound as row views of the fused
tensor), so binding copies nothing and an engine does not hold its weights twice. A tensor is
copied only where it must be: moved to the package's device, or made contiguous and 16-byte
aligned (``ALIGNMENT``). An FP8 checkpoint's projections are E4M3 ``weight`` tensors with fp32
``weight_scale_inv`` block scales beside them (``WeightQuant``), bound the same way; so are its
routed experts (the fused stacks' ``…_scale_inv``, or each expert's own, stacked as its weights
are). The router stays in the model's dtype. A missing or mis-shaped tensor is an error naming it
with the expected shape and dtype.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch

from ..schema import Geometry, WeightQuant


class WeightError(Exception):
    """A tensor of the state_dict is missing or has the wrong shape or dtype."""


#: The programs' stacked projections and the tensors each is held as, in stacking order.
PROJECTIONS = {"qkv": ("w_q", "w_k", "w_v"), "o": ("w_o",), "gate_up": ("w_gate", "w_up"), "down": ("w_down",)}


@dataclass(frozen=True)
class LayerWeights:
    attn_norm: torch.Tensor
    w_q: torch.Tensor
    w_k: torch.Tensor
    w_v: torch.Tensor
    b_q: torch.Tensor | None
    b_k: torch.Tensor | None
    b_v: torch.Tensor | None
    q_norm: torch.Tensor | None
    k_norm: torch.Tensor | None
    w_o: torch.Tensor
    mlp_norm: torch.Tensor
    w_gate: torch.Tensor | None  # a dense layer's MLP (None in a routed layer)
    w_up: torch.Tensor | None
    w_down: torch.Tensor | None
    # an FP8 checkpoint's block scales of each projection tensor (None: the projections are unquantized)
    w_q_scale: torch.Tensor | None = None
    w_k_scale: torch.Tensor | None = None
    w_v_scale: torch.Tensor | None = None
    w_o_scale: torch.Tensor | None = None
    w_gate_scale: torch.Tensor | None = None
    w_up_scale: torch.Tensor | None = None
    w_down_scale: torch.Tensor | None = None
    quant: WeightQuant | None = None  # their blocks
    # a routed layer's MLP: the router [experts, hidden], the experts' gate|up [experts, 2·inter,
    # hidden] and down [experts, hidden, inter] (None in a dense layer), and an FP8 checkpoint's
    # block scales of each expert's ([experts, blocks of its rows, blocks of its columns])
    w_router: torch.Tensor | None = None
    w_experts_gate_up: torch.Tensor | None = None
    w_experts_down: torch.Tensor | None = None
    w_experts_gate_up_scale: torch.Tensor | None = None
    w_experts_down_scale: torch.Tensor | None = None

    def projection(self, name: str, dtype: torch.dtype) -> torch.Tensor:
        """Projection ``name`` (qkv, o, gate_up, down) stacked as the programs see it, in
        ``dtype`` and dequantized blockwise if it is FP8: what they multiply by. A new tensor
        (a copy), for references and baselines."""
        parts = []
        for t in PROJECTIONS[name]:
            w, scale = getattr(self, t), getattr(self, t + "_scale")
            parts.append(w.to(dtype) if scale is None else dequantize_blocks(w, scale, self.quant, dtype))
        return torch.cat(parts)

    def experts(self, name: str, index, dtype: torch.dtype) -> torch.Tensor:
        """The experts ``index`` (an int, or a tensor of them) of the stack ``name`` (gate_up,
        down) in ``dtype``, dequantized blockwise if they are FP8: what the programs multiply by.
        A new tensor (a copy), for references and baselines."""
        values, scale = getattr(self, "w_experts_" + name)[index], getattr(self, f"w_experts_{name}_scale")
        return values.to(dtype) if scale is None else dequantize_blocks(values, scale[index], self.quant, dtype)

    def bias(self) -> torch.Tensor | None:
        """The q/k/v bias stacked as qkv's rows (a copy), None without one."""
        return None if self.b_q is None else torch.cat([self.b_q, self.b_k, self.b_v])


@dataclass(frozen=True)
class PackedWeights:
    embed: torch.Tensor
    layers: tuple[LayerWeights, ...]
    final_norm: torch.Tensor
    w_head: torch.Tensor


ALIGNMENT = 16  # the programs are compiled assuming 16-byte aligned pointers (16-byte vector loads)


def _checked(name: str, t: torch.Tensor, shape: tuple[int, ...], dtype: torch.dtype, device) -> torch.Tensor:
    """``t`` checked against ``shape`` and ``dtype``, on ``device``, contiguous and aligned
    (copied only if it is not)."""
    if tuple(t.shape) != shape or t.dtype != dtype:
        raise WeightError(f"{name}: expected {list(shape)} {dtype}, got {list(t.shape)} {t.dtype}")
    if device is not None:
        t = t.to(device)
    if not t.is_contiguous() or t.data_ptr() % ALIGNMENT:
        t = t.clone(memory_format=torch.contiguous_format)
    return t


def _take(sd: Mapping, name: str, shape: tuple[int, ...], dtype: torch.dtype, device) -> torch.Tensor:
    """The tensor ``name``, checked (``_checked``)."""
    if name not in sd:
        raise WeightError(f"{name}: missing (expected {list(shape)} {dtype})")
    return _checked(name, sd[name], shape, dtype, device)


def _views(sd: Mapping, fused: str, rows: tuple[int, ...], cols: int | None, dtype: torch.dtype, device,
           blocks: int = 1) -> list[torch.Tensor]:
    """A fused tensor (vLLM's ``qkv_proj``, ``gate_up_proj``; ``cols`` None for a bias), checked,
    as row views of its parts (``rows``, in rows of ``blocks``: a scale tensor's parts are whole
    blocks)."""
    if any(r % blocks for r in rows):
        raise WeightError(f"{fused}: its parts' rows {list(rows)} are not whole {blocks}-row scale blocks, so its "
                          "scales cannot be split between them")
    shape = (sum(rows) // blocks,) + (() if cols is None else (cols,))
    views = _take(sd, fused, shape, dtype, device).split([r // blocks for r in rows])
    return [v if v.data_ptr() % ALIGNMENT == 0 else v.clone() for v in views]  # a part off 16 bytes: copied


def _projection(sd: Mapping, prefix: str, names: tuple[str, ...], fused: str | None, rows: tuple[int, ...],
                cols: int, dtype: torch.dtype, device,
                quant: WeightQuant | None) -> tuple[list[torch.Tensor], list[torch.Tensor | None]]:
    """The tensors of one projection (HF's ``names``, less ``.weight``, or, where the state_dict
    has it, the ``fused`` tensor's row views) and, for an FP8 checkpoint, their block scales."""
    values_dtype = dtype if quant is None else torch.float8_e4m3fn
    if fused is not None and prefix + fused + ".weight" in sd:
        values = _views(sd, prefix + fused + ".weight", rows, cols, values_dtype, device)
        if quant is None:
            return values, [None] * len(rows)
        scale_cols = quant.scale_shape(1, cols)[1]
        return values, _views(sd, prefix + fused + ".weight_scale_inv", rows, scale_cols, torch.float32, device,
                              quant.block_rows)
    values = [_take(sd, prefix + n + ".weight", (r, cols), values_dtype, device) for n, r in zip(names, rows)]
    if quant is None:
        return values, [None] * len(rows)
    return values, [_take(sd, prefix + n + ".weight_scale_inv", quant.scale_shape(r, cols), torch.float32, device)
                    for n, r in zip(names, rows)]


#: Where a routed layer's tensors are, under ``model.layers.N.``: the router, then the experts'
#: fused tensors (transformers', vLLM's), then each expert's own (the published checkpoints'),
#: by family: (gate, up, down) of expert ``{j}``. An FP8 checkpoint's block scales of each are
#: the tensor's name + ``SCALES`` (``gate_up_proj_scale_inv``, ``w13_weight_scale_inv``,
#: ``gate_proj.weight_scale_inv``).
ROUTERS = ("mlp.gate.weight", "block_sparse_moe.gate.weight")
FUSED_EXPERTS = (("mlp.experts.gate_up_proj", "mlp.experts.down_proj"),
                 ("mlp.experts.w13_weight", "mlp.experts.w2_weight"))
EXPERT_TENSORS = {"qwen3_moe": ("mlp.experts.{j}.gate_proj.weight", "mlp.experts.{j}.up_proj.weight",
                                "mlp.experts.{j}.down_proj.weight"),
                  "mixtral": ("block_sparse_moe.experts.{j}.w1.weight", "block_sparse_moe.experts.{j}.w3.weight",
                              "block_sparse_moe.experts.{j}.w2.weight")}
SCALES = "_scale_inv"


def _routed(sd: Mapping, prefix: str, g: Geometry, dtype: torch.dtype, device,
            quant: WeightQuant | None) -> dict[str, torch.Tensor]:
    """A routed layer's router and experts (module docstring), checked, with an FP8 checkpoint's
    block scales; per-expert tensors stacked (gate rows above up rows, scales alike)."""
    e, h = g.experts, g.hidden
    inter = e.intermediate
    router = next((n for n in ROUTERS if prefix + n in sd), ROUTERS[0])
    out = {"w_router": _take(sd, prefix + router, (e.count, h), dtype, device)}
    values = dtype if quant is None else torch.float8_e4m3fn
    shapes = {"gate_up": (2 * inter, h), "down": (h, inter)}
    for gate_up, down in FUSED_EXPERTS:
        if prefix + gate_up in sd:
            for field, name in (("gate_up", gate_up), ("down", down)):
                out["w_experts_" + field] = _take(sd, prefix + name, (e.count, *shapes[field]), values, device)
                if quant is not None:
                    out[f"w_experts_{field}_scale"] = _take(sd, prefix + name + SCALES,
                                                            (e.count, *quant.scale_shape(*shapes[field])), torch.float32,
                                                            device)
            return out
    gate, up, down = EXPERT_TENSORS.get(g.family, EXPERT_TENSORS["qwen3_moe"])
    if prefix + gate.format(j=0) not in sd:
        raise WeightError(f"{prefix}{FUSED_EXPERTS[0][0]}: missing (expected {[e.count, *shapes['gate_up']]} "
                          f"{values}), and no per-expert tensors ({prefix}{gate.format(j=0)}…) either")
    where = device if device is not None else sd[prefix + gate.format(j=0)].device
    for field, pieces in (("gate_up", (gate, up)), ("down", (down,))):
        rows, cols = shapes[field][0] // len(pieces), shapes[field][1]
        stack = torch.empty((e.count, *shapes[field]), dtype=values, device=where)
        scales = piece_scales = None
        if quant is not None:  # a piece's scales are whole blocks of the stack's (the recipe's rule)
            piece_scales = quant.scale_shape(rows, cols)
            scales = torch.empty((e.count, len(pieces) * piece_scales[0], piece_scales[1]), dtype=torch.float32,
                                 device=where)
        for j in range(e.count):
            for k, piece in enumerate(pieces):
                name = prefix + piece.format(j=j)
                stack[j, k * rows:(k + 1) * rows] = _take(sd, name, (rows, cols), values, None)
                if scales is not None:
                    srows = piece_scales[0]
                    scales[j, k * srows:(k + 1) * srows] = _take(sd, name + SCALES, piece_scales, torch.float32, None)
        out["w_experts_" + field] = stack
        if scales is not None:
            out[f"w_experts_{field}_scale"] = scales
    return out


def pack_hf_state_dict(sd: Mapping, geometry: Geometry, dtype: torch.dtype, device=None,
                       quant: WeightQuant | None = None) -> PackedWeights:
    """Bind an HF-named state_dict (``model.layers.N.self_attn.q_proj.weight``…), or one with
    vLLM's fused ``self_attn.qkv_proj`` and ``mlp.gate_up_proj``, for the programs.

    Tensors already on ``device`` (default: where they are), contiguous and aligned are used in
    place, the fused ones as views; nothing is concatenated except a published checkpoint's
    per-expert tensors (one stack per routed layer). With ``quant`` the projections and the
    experts are read as FP8 E4M3 with their ``weight_scale_inv`` block scales.
    """
    g = geometry
    h, d, inter = g.hidden, g.head_dim, g.intermediate
    nq, nkv = g.q_heads * d, g.kv_heads * d
    layers = []
    for i in range(g.layers):
        p = f"model.layers.{i}."
        take = lambda n, s, p=p: _take(sd, p + n, s, dtype, device)  # noqa: E731
        proj = lambda names, fused, rows, cols, p=p: _projection(sd, p, names, fused, rows, cols, dtype, device,  # noqa: E731
                                                                 quant)
        (w_q, w_k, w_v), (s_q, s_k, s_v) = proj(("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),
                                                "self_attn.qkv_proj", (nq, nkv, nkv), h)
        (w_o,), (s_o,) = proj(("self_attn.o_proj",), None, (h,), nq)
        routed = {}
        if g.is_moe(i):
            routed = _routed(sd, p, g, dtype, device, quant)
            w_gate = w_up = w_down = s_gate = s_up = s_down = None
        else:
            (w_gate, w_up), (s_gate, s_up) = proj(("mlp.gate_proj", "mlp.up_proj"), "mlp.gate_up_proj", (inter, inter),
                                                  h)
            (w_down,), (s_down,) = proj(("mlp.down_proj",), None, (h,), inter)
        b_q = b_k = b_v = None
        if g.qkv_bias:
            fused = p + "self_attn.qkv_proj.bias"
            if fused in sd:
                b_q, b_k, b_v = _views(sd, fused, (nq, nkv, nkv), None, dtype, device)
            else:
                b_q, b_k, b_v = (take(f"self_attn.{n}_proj.bias", (r,)) for n, r in zip("qkv", (nq, nkv, nkv)))
        layers.append(LayerWeights(
            attn_norm=take("input_layernorm.weight", (h,)),
            w_q=w_q, w_k=w_k, w_v=w_v, b_q=b_q, b_k=b_k, b_v=b_v,
            q_norm=take("self_attn.q_norm.weight", (d,)) if g.qk_norm else None,
            k_norm=take("self_attn.k_norm.weight", (d,)) if g.qk_norm else None,
            w_o=w_o,
            mlp_norm=take("post_attention_layernorm.weight", (h,)),
            w_gate=w_gate, w_up=w_up, w_down=w_down,
            w_q_scale=s_q, w_k_scale=s_k, w_v_scale=s_v, w_o_scale=s_o, w_gate_scale=s_gate, w_up_scale=s_up,
            w_down_scale=s_down, quant=quant, **routed,
        ))
    embed = _take(sd, "model.embed_tokens.weight", (g.vocab, h), dtype, device)
    head = embed if g.tied_head else _take(sd, "lm_head.weight", (g.vocab, h), dtype, device)
    return PackedWeights(embed, tuple(layers), _take(sd, "model.norm.weight", (h,), dtype, device), head)


def dequantize_blocks(values: torch.Tensor, scale: torch.Tensor, quant: WeightQuant, dtype: torch.dtype) -> torch.Tensor:
    """An FP8 projection in ``dtype``: each block of E4M3 ``values`` times its ``weight_scale_inv``
    (over the last two dimensions: a stack of experts, each with its own scales)."""
    rows, cols = values.shape[-2:]
    full = scale.to(dtype).repeat_interleave(quant.block_rows, -2)[..., :rows, :]
    return values.to(dtype) * full.repeat_interleave(quant.block_cols, -1)[..., :cols]
