"""The packed weights the programs read, built from a Hugging Face-named state_dict.

q/k/v projections are packed into one ``w_qkv`` [(q + 2·kv heads)·head_dim, hidden] and gate/up
into one ``w_gate_up`` [2·intermediate, hidden] (vLLM's layout); every other tensor is used in
place. A missing or mis-shaped tensor is an error naming it with the expected shape and dtype.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch

from ..schema import Geometry


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


def pack_hf_state_dict(sd: Mapping, geometry: Geometry, dtype: torch.dtype, device=None) -> PackedWeights:
    """Pack an HF-named state_dict (``model.layers.N.self_attn.q_proj.weight``…) for the programs.

    Tensors already on ``device`` (default: where they are), contiguous and aligned are used in
    place; q/k/v and gate/up are concatenated once, on ``device``.
    """
    g = geometry
    h, d, inter = g.hidden, g.head_dim, g.intermediate
    nq, nkv = g.q_heads * d, g.kv_heads * d
    layers = []
    for i in range(g.layers):
        p = f"model.layers.{i}."
        take = lambda n, s, p=p: _take(sd, p + n, s, dtype, device)  # noqa: E731
        q, k, v = take("self_attn.q_proj.weight", (nq, h)), take("self_attn.k_proj.weight", (nkv, h)), \
            take("self_attn.v_proj.weight", (nkv, h))
        bias = None
        if g.qkv_bias:
            bias = torch.cat([take("self_attn.q_proj.bias", (nq,)), take("self_attn.k_proj.bias", (nkv,)),
                              take("self_attn.v_proj.bias", (nkv,))])
        layers.append(LayerWeights(
            attn_norm=take("input_layernorm.weight", (h,)),
            w_qkv=torch.cat([q, k, v]).contiguous(),
            b_qkv=bias,
            q_norm=take("self_attn.q_norm.weight", (d,)) if g.qk_norm else None,
            k_norm=take("self_attn.k_norm.weight", (d,)) if g.qk_norm else None,
            w_o=take("self_attn.o_proj.weight", (h, nq)),
            mlp_norm=take("post_attention_layernorm.weight", (h,)),
            w_gate_up=torch.cat([take("mlp.gate_proj.weight", (inter, h)), take("mlp.up_proj.weight", (inter, h))]),
            w_down=take("mlp.down_proj.weight", (h, inter)),
        ))
    embed = _take(sd, "model.embed_tokens.weight", (g.vocab, h), dtype, device)
    head = embed if g.tied_head else _take(sd, "lm_head.weight", (g.vocab, h), dtype, device)
    return PackedWeights(embed, tuple(layers), _take(sd, "model.norm.weight", (h,), dtype, device), head)


def random_hf_state_dict(geometry: Geometry, dtype: torch.dtype, generator: torch.Generator) -> dict:
    """Random weights under HF names, scaled like a trained model's (unit-RMS activations).

    Drawn on the generator's device (a CUDA generator draws a large model in seconds).
    """
    g = geometry
    dev = generator.device
    h, d, inter = g.hidden, g.head_dim, g.intermediate

    def mat(rows, cols):
        return (torch.randn(rows, cols, generator=generator, dtype=torch.float32, device=dev) / cols**0.5).to(dtype)

    def vec(n, base=1.0, spread=0.1):
        return (base + spread * torch.randn(n, generator=generator, dtype=torch.float32, device=dev)).to(dtype)

    sd = {"model.embed_tokens.weight": torch.randn(g.vocab, h, generator=generator, device=dev).to(dtype),
          "model.norm.weight": vec(h)}
    if not g.tied_head:
        sd["lm_head.weight"] = mat(g.vocab, h)
    for i in range(g.layers):
        p = f"model.layers.{i}."
        sd |= {
            p + "input_layernorm.weight": vec(h), p + "post_attention_layernorm.weight": vec(h),
            p + "self_attn.q_proj.weight": mat(g.q_heads * d, h),
            p + "self_attn.k_proj.weight": mat(g.kv_heads * d, h),
            p + "self_attn.v_proj.weight": mat(g.kv_heads * d, h),
            p + "self_attn.o_proj.weight": mat(h, g.q_heads * d),
            p + "mlp.gate_proj.weight": mat(inter, h), p + "mlp.up_proj.weight": mat(inter, h),
            p + "mlp.down_proj.weight": mat(h, inter),
        }
        if g.qkv_bias:
            for name, n in (("q", g.q_heads * d), ("k", g.kv_heads * d), ("v", g.kv_heads * d)):
                sd[p + f"self_attn.{name}_proj.bias"] = vec(n, 0.0, 0.5)
        if g.qk_norm:
            sd[p + "self_attn.q_norm.weight"] = vec(d)
            sd[p + "self_attn.k_norm.weight"] = vec(d)
    return sd
