"""The packed weights the programs read, built from a Hugging Face-named state_dict.

q/k/v projections are packed into one ``w_qkv`` [(q + 2·kv heads)·head_dim, hidden] and gate/up
into one ``w_gate_up`` [2·intermediate, hidden] (vLLM's layout); every other tensor is used in
place. An FP8 checkpoint's projections are E4M3 ``weight`` tensors with fp32 ``weight_scale_inv``
block scales beside them (``WeightQuant``); their scales are packed the same way. A missing or
mis-shaped tensor is an error naming it with the expected shape and dtype.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch

from ..schema import Geometry, WeightQuant


class WeightError(Exception):
    """A tensor of the state_dict is missing or has the wrong shape or dtype."""


@dataclass(frozen=True)
class LayerWeights:
    attn_norm: torch.Tensor
    w_qkv: torch.Tensor
    b_qkv: torch.Tensor | None
    q_norm: torch.Tensor | None
    k_norm: torch.Tensor | None
    w_o: torch.Tensor
    mlp_norm: torch.Tensor
    w_gate_up: torch.Tensor
    w_down: torch.Tensor
    # an FP8 checkpoint's block scales of each projection (None: the projections are unquantized)
    w_qkv_scale: torch.Tensor | None = None
    w_o_scale: torch.Tensor | None = None
    w_gate_up_scale: torch.Tensor | None = None
    w_down_scale: torch.Tensor | None = None
    quant: WeightQuant | None = None  # their blocks

    def projection(self, name: str, dtype: torch.dtype) -> torch.Tensor:
        """Projection ``name`` (w_qkv, w_o, w_gate_up, w_down) in ``dtype``, dequantized blockwise
        if it is FP8: what the programs multiply by."""
        w, scale = getattr(self, name), getattr(self, name + "_scale")
        return w.to(dtype) if scale is None else dequantize_blocks(w, scale, self.quant, dtype)


@dataclass(frozen=True)
class PackedWeights:
    embed: torch.Tensor
    layers: tuple[LayerWeights, ...]
    final_norm: torch.Tensor
    w_head: torch.Tensor


ALIGNMENT = 16  # the programs are compiled assuming 16-byte aligned pointers (16-byte vector loads)


def _take(sd: Mapping, name: str, shape: tuple[int, ...], dtype: torch.dtype, device) -> torch.Tensor:
    """The tensor ``name``, checked, on ``device``, contiguous and aligned (copied only if it is not)."""
    if name not in sd:
        raise WeightError(f"{name}: missing (expected {list(shape)} {dtype})")
    t = sd[name]
    if tuple(t.shape) != shape or t.dtype != dtype:
        raise WeightError(f"{name}: expected {list(shape)} {dtype}, got {list(t.shape)} {t.dtype}")
    if device is not None:
        t = t.to(device)
    if not t.is_contiguous() or t.data_ptr() % ALIGNMENT:
        t = t.clone(memory_format=torch.contiguous_format)
    return t


def _projection(sd: Mapping, prefix: str, names: tuple[str, ...], rows: tuple[int, ...], cols: int,
                dtype: torch.dtype, device, quant: WeightQuant | None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The projections ``names`` (HF's, less ``.weight``) stacked as the programs read them (one
    tensor in place, several concatenated), and, for an FP8 checkpoint, their block scales stacked
    the same way."""
    def stack(tensors: list[torch.Tensor]) -> torch.Tensor:
        return tensors[0] if len(tensors) == 1 else torch.cat(tensors)

    if quant is None:
        return stack([_take(sd, prefix + n + ".weight", (r, cols), dtype, device) for n, r in zip(names, rows)]), None
    values = [_take(sd, prefix + n + ".weight", (r, cols), torch.float8_e4m3fn, device) for n, r in zip(names, rows)]
    scales = [_take(sd, prefix + n + ".weight_scale_inv", quant.scale_shape(r, cols), torch.float32, device)
              for n, r in zip(names, rows)]
    return stack(values), stack(scales)


def pack_hf_state_dict(sd: Mapping, geometry: Geometry, dtype: torch.dtype, device=None,
                       quant: WeightQuant | None = None) -> PackedWeights:
    """Pack an HF-named state_dict (``model.layers.N.self_attn.q_proj.weight``…) for the programs.

    Tensors already on ``device`` (default: where they are), contiguous and aligned are used in
    place; q/k/v and gate/up are concatenated once, on ``device``. With ``quant`` the projections
    are read as FP8 E4M3 with their ``weight_scale_inv`` block scales.
    """
    g = geometry
    h, d, inter = g.hidden, g.head_dim, g.intermediate
    nq, nkv = g.q_heads * d, g.kv_heads * d
    layers = []
    for i in range(g.layers):
        p = f"model.layers.{i}."
        take = lambda n, s, p=p: _take(sd, p + n, s, dtype, device)  # noqa: E731

        proj = lambda names, rows, cols, p=p: _projection(sd, p, names, rows, cols, dtype, device, quant)  # noqa: E731
        w_qkv, s_qkv = proj(("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"), (nq, nkv, nkv), h)
        w_o, s_o = proj(("self_attn.o_proj",), (h,), nq)
        w_gate_up, s_gate_up = proj(("mlp.gate_proj", "mlp.up_proj"), (inter, inter), h)
        w_down, s_down = proj(("mlp.down_proj",), (h,), inter)
        bias = None
        if g.qkv_bias:
            bias = torch.cat([take("self_attn.q_proj.bias", (nq,)), take("self_attn.k_proj.bias", (nkv,)),
                              take("self_attn.v_proj.bias", (nkv,))])
        layers.append(LayerWeights(
            attn_norm=take("input_layernorm.weight", (h,)),
            w_qkv=w_qkv,
            b_qkv=bias,
            q_norm=take("self_attn.q_norm.weight", (d,)) if g.qk_norm else None,
            k_norm=take("self_attn.k_norm.weight", (d,)) if g.qk_norm else None,
            w_o=w_o,
            mlp_norm=take("post_attention_layernorm.weight", (h,)),
            w_gate_up=w_gate_up,
            w_down=w_down,
            w_qkv_scale=s_qkv, w_o_scale=s_o, w_gate_up_scale=s_gate_up, w_down_scale=s_down, quant=quant,
        ))
    embed = _take(sd, "model.embed_tokens.weight", (g.vocab, h), dtype, device)
    head = embed if g.tied_head else _take(sd, "lm_head.weight", (g.vocab, h), dtype, device)
    return PackedWeights(embed, tuple(layers), _take(sd, "model.norm.weight", (h,), dtype, device), head)


def dequantize_blocks(values: torch.Tensor, scale: torch.Tensor, quant: WeightQuant, dtype: torch.dtype) -> torch.Tensor:
    """An FP8 projection in ``dtype``: each block of E4M3 ``values`` times its ``weight_scale_inv``."""
    rows, cols = values.shape
    full = scale.to(dtype).repeat_interleave(quant.block_rows, 0)[:rows]
    return values.to(dtype) * full.repeat_interleave(quant.block_cols, 1)[:, :cols]
