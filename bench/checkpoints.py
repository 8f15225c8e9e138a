"""Checkpoints that the tests, tools and benchmarks make, never the runtime's API: random
weights under HF names, scaled like a trained model's (bf16, or FP8 blockwise as a published FP8
checkpoint stores them), and an FP8 checkpoint dequantized for a framework without FP8 kernels."""

from __future__ import annotations

from collections.abc import Mapping

import torch

from ..runtime.weights import EXPERT_TENSORS, ROUTERS, SCALES, dequantize_blocks
from ..schema import Geometry, WeightQuant

FP8_MAX = 448.0  # the largest finite E4M3 value


def quantize_fp8_blocks(w: torch.Tensor, quant: WeightQuant) -> tuple[torch.Tensor, torch.Tensor]:
    """``w`` as an FP8 checkpoint stores it: E4M3 values and one fp32 ``weight_scale_inv`` per
    block (the block's largest magnitude maps to 448), so that ``values · scale`` is ``w``; over
    the last two dimensions (a stack of experts: each its own blocks, as each expert's tensor is
    quantized on its own)."""
    *lead, rows, cols = w.shape
    srows, scols = quant.scale_shape(rows, cols)
    br, bc = quant.block_rows, quant.block_cols
    padded = torch.zeros(*lead, srows * br, scols * bc, dtype=torch.float32, device=w.device)
    padded[..., :rows, :cols] = w.float()
    blocks = padded.view(*lead, srows, br, scols, bc)
    scale = blocks.abs().amax(dim=(-3, -1)).clamp(min=1e-12) / FP8_MAX
    values = (blocks / scale[..., :, None, :, None]).view(*lead, srows * br, scols * bc)[..., :rows, :cols]
    return values.to(torch.float8_e4m3fn).contiguous(), scale.contiguous()


def dequantized_state_dict(sd: Mapping, quant: WeightQuant, dtype: torch.dtype) -> dict:
    """An FP8 checkpoint's HF state_dict as an unquantized one: every tensor with its block scales
    beside it (``weight`` and ``weight_scale_inv``; transformers' fused experts ``gate_up_proj`` and
    ``gate_up_proj_scale_inv``) dequantized into ``dtype``, the scales dropped, the rest as is.

    What a framework without FP8 kernels computes with (the outside reference of an FP8 package)."""
    out = {}
    for name, t in sd.items():
        if name.endswith(SCALES):
            continue
        scale = sd.get(name + SCALES)
        out[name] = t if scale is None else dequantize_blocks(t, scale, quant, dtype)
    return out


def random_hf_state_dict(geometry: Geometry, dtype: torch.dtype, generator: torch.Generator,
                         quant: WeightQuant | None = None) -> dict:
    """Random weights under HF names, scaled like a trained model's (unit-RMS activations); with
    ``quant``, the projections and experts quantized as an FP8 checkpoint stores them (each
    expert's blocks its own, the stacks' scales beside them as transformers names them).

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
        }
        if g.is_moe(i):  # transformers' layout: the router, the experts' fused gate|up and down
            e = g.experts
            # a trained router is confident: its logits spread over several units, not one
            sd |= {p + "mlp.gate.weight": (4 * mat(e.count, h).float()).to(dtype),
                   p + "mlp.experts.gate_up_proj": mat(e.count * 2 * e.intermediate, h).view(e.count, -1, h),
                   p + "mlp.experts.down_proj": mat(e.count * h, e.intermediate).view(e.count, h, -1)}
        else:
            sd |= {p + "mlp.gate_proj.weight": mat(inter, h), p + "mlp.up_proj.weight": mat(inter, h),
                   p + "mlp.down_proj.weight": mat(h, inter)}
        if g.qkv_bias:
            for name, n in (("q", g.q_heads * d), ("k", g.kv_heads * d), ("v", g.kv_heads * d)):
                sd[p + f"self_attn.{name}_proj.bias"] = vec(n, 0.0, 0.5)
        if g.qk_norm:
            sd[p + "self_attn.q_norm.weight"] = vec(d)
            sd[p + "self_attn.k_norm.weight"] = vec(d)
        if quant is not None:
            for name in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                         "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"):
                if p + name + ".weight" in sd:  # a routed layer has no dense MLP
                    sd[p + name + ".weight"], sd[p + name + ".weight" + SCALES] = \
                        quantize_fp8_blocks(sd[p + name + ".weight"], quant)
            if g.is_moe(i):
                for name in ("mlp.experts.gate_up_proj", "mlp.experts.down_proj"):
                    sd[p + name], sd[p + name + SCALES] = quantize_fp8_blocks(sd[p + name], quant)
    return sd


def experts_apart(sd: dict, geometry: Geometry) -> dict:
    """``sd`` with each routed layer's experts stored apart, as the published checkpoints store
    them (``mlp.experts.N.gate_proj.weight``…; Mixtral's ``block_sparse_moe.experts.N.w1.weight``…
    and ``block_sparse_moe.gate.weight``), an FP8 checkpoint's scales apart with them
    (``…gate_proj.weight_scale_inv``): what a safetensors directory holds."""
    out = dict(sd)
    gate, up, down = EXPERT_TENSORS[geometry.family]
    for i in geometry.moe_layers:
        p = f"model.layers.{i}."
        router = out.pop(p + ROUTERS[0])
        out[p + (ROUTERS[1] if geometry.family == "mixtral" else ROUTERS[0])] = router
        for suffix in ("", SCALES):  # the weights, then an FP8 checkpoint's scales (their rows in blocks)
            gate_up = out.pop(p + "mlp.experts.gate_up_proj" + suffix, None)
            if gate_up is None:
                continue
            down_all = out.pop(p + "mlp.experts.down_proj" + suffix)
            half = gate_up.shape[1] // 2  # inter rows, or inter / block_rows scale rows
            for j in range(geometry.experts.count):
                out[p + gate.format(j=j) + suffix] = gate_up[j, :half].clone()
                out[p + up.format(j=j) + suffix] = gate_up[j, half:].clone()
                out[p + down.format(j=j) + suffix] = down_all[j].clone()
    return out


def fused_like_vllm(sd: dict, layers: int) -> dict:
    """``sd`` with each layer's q/k/v and gate/up in one tensor each, as vLLM holds them
    (``self_attn.qkv_proj``, ``mlp.gate_up_proj``: weights, biases and FP8 scales alike)."""
    out = dict(sd)
    fusions = (("self_attn.qkv_proj", ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj")),
               ("mlp.gate_up_proj", ("mlp.gate_proj", "mlp.up_proj")))
    for i in range(layers):
        p = f"model.layers.{i}."
        for suffix in ("weight", "bias", "weight_scale_inv"):
            for fused, parts in fusions:
                tensors = [out.pop(f"{p}{n}.{suffix}", None) for n in parts]
                if tensors[0] is not None:
                    out[f"{p}{fused}.{suffix}"] = torch.cat(tensors)
    return out
