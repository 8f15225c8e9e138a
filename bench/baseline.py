"""The PyTorch baseline: the same decode step written plainly in PyTorch, for torch.compile + a CUDA graph.

bf16 weights and activations (what a PyTorch serving stack runs), the same weights, with q/k/v
and gate/up fused once into copies of its own (as a PyTorch serving stack fuses them at load),
and the same paged KV cache: K/V pages are gathered through the block tables, the step's new K/V are
scattered into them, attention is SDPA over the gathered context with a length mask. An FP8
checkpoint's projections are dequantized in the graph, blockwise, before each product. A routed
layer's MLP routes each row (softmax, top-k, renormalized where the model says) and gathers its
chosen experts' weights by index out of the fused expert tensors (as gpt-fast's Mixtral does: no
host synchronisation, static shapes, so it captures in a graph; the gather moves the chosen
experts' bytes twice). Shapes are fixed per (band, pages) so torch.compile sees static shapes and
the result can be graph-captured. It is a timing baseline; the bench also reports how far its
logits are from ours.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..runtime.rope import rope_table
from ..runtime.weights import PROJECTIONS, LayerWeights, PackedWeights, dequantize_blocks
from ..schema import Experts, Geometry


def _rms(x, w, eps):
    x32 = x.float()
    return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * w


def _rotate(x, cos, sin):
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)


class _Fused:
    """One projection's tensors stacked into one (and an FP8 checkpoint's scales with them, each
    tensor's rows whole scale blocks), dequantized in the graph."""

    def __init__(self, lw: LayerWeights, name: str):
        names = PROJECTIONS[name]
        stack = lambda ts: ts[0] if len(ts) == 1 else torch.cat(ts)  # noqa: E731 — o and down are used as they are
        self.values = stack([getattr(lw, n) for n in names])
        scales = [getattr(lw, n + "_scale") for n in names]
        self.scale = None if scales[0] is None else stack(scales)
        self.quant = lw.quant

    def weight(self, dtype: torch.dtype) -> torch.Tensor:
        if self.scale is None:
            return self.values.to(dtype)
        return dequantize_blocks(self.values, self.scale, self.quant, dtype)


def routed_mlp(x: torch.Tensor, lw: LayerWeights, e: Experts) -> torch.Tensor:
    """A routed layer's MLP of the normed rows ``x`` [m, hidden], each row's chosen experts'
    weights gathered from the fused tensors by index (an FP8 checkpoint's with their scales,
    dequantized in the graph)."""
    probs = (x @ lw.w_router.T).float().softmax(-1)
    weight, chosen = probs.topk(e.top_k, -1)
    if e.normalize:
        weight = weight / weight.sum(-1, keepdim=True)
    gate, up = torch.einsum("mh,mkih->mki", x, lw.experts("gate_up", chosen, x.dtype)).chunk(2, -1)
    out = torch.einsum("mki,mkhi->mkh", F.silu(gate) * up, lw.experts("down", chosen, x.dtype))
    return (out * weight[..., None].to(out.dtype)).sum(1)


class TorchDecodeStep:
    """``step(tokens, positions, block_tables, context_lens)`` → fp32 logits, in plain PyTorch."""

    def __init__(self, geometry: Geometry, weights: PackedWeights, k_caches, v_caches, max_context: int, device):
        self.g, self.w, self.k, self.v = geometry, weights, list(k_caches), list(v_caches)
        self.rope = rope_table(geometry, max_context, device)
        self.fused = [{name: _Fused(lw, name) for name in PROJECTIONS if name in ("qkv", "o") or lw.w_gate is not None}
                      for lw in weights.layers]
        self.bias = [lw.bias() for lw in weights.layers]

    def __call__(self, tokens, positions, block_tables, context_lens):
        g, w = self.g, self.w
        eps, d, nq, nkv = g.norm_eps, g.head_dim, g.q_heads, g.kv_heads
        rows = context_lens.shape[0]
        tpr = tokens.shape[0] // rows
        block = self.k[0].shape[1]
        pages = block_tables.shape[1]
        half = d // 2
        table = self.rope[positions.long()]
        cos, sin = table[:, None, :half].to(w.embed.dtype), table[:, None, half:].to(w.embed.dtype)
        x = w.embed[tokens.long()]
        slot_block = block_tables.gather(1, (positions.view(rows, tpr).long() // block)).flatten().long()
        slot_off = positions.long() % block
        key_pos = torch.arange(pages * block, device=tokens.device)
        # Row b's token j sees cached positions < position + 1 (its own and the step's earlier tokens).
        visible = key_pos[None, :] <= positions.long()[:, None]  # every row live: the bench pads none
        if g.sliding_window:  # and, in a window, those > position − window
            visible &= key_pos[None, :] > positions.long()[:, None] - g.sliding_window
        for layer, lw in enumerate(w.layers):
            fused = self.fused[layer]
            qkv = _rms(x, lw.attn_norm, eps) @ fused["qkv"].weight(x.dtype).T
            if self.bias[layer] is not None:
                qkv = qkv + self.bias[layer]
            q = qkv[:, : nq * d].view(-1, nq, d)
            k = qkv[:, nq * d: (nq + nkv) * d].view(-1, nkv, d)
            v = qkv[:, (nq + nkv) * d:].view(-1, nkv, d)
            if lw.q_norm is not None:
                q, k = _rms(q, lw.q_norm, eps), _rms(k, lw.k_norm, eps)
            q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
            kc, vc = self.k[layer], self.v[layer]
            kc[slot_block, slot_off] = k.to(kc.dtype)
            vc[slot_block, slot_off] = v.to(vc.dtype)
            keys = kc[block_tables.long()].view(rows, pages * block, nkv, d).transpose(1, 2)
            vals = vc[block_tables.long()].view(rows, pages * block, nkv, d).transpose(1, 2)
            qr = q.view(rows, tpr, nq, d).transpose(1, 2)
            mask = visible.view(rows, 1, tpr, pages * block)
            attn = F.scaled_dot_product_attention(qr, keys, vals, attn_mask=mask, enable_gqa=True)
            attn = attn.transpose(1, 2).reshape(-1, nq * d)
            x1 = x + attn @ fused["o"].weight(x.dtype).T
            if g.is_moe(layer):
                x = x1 + routed_mlp(_rms(x1, lw.mlp_norm, eps), lw, g.experts)
                continue
            gate, up = (_rms(x1, lw.mlp_norm, eps) @ fused["gate_up"].weight(x.dtype).T).chunk(2, -1)
            x = x1 + (F.silu(gate) * up) @ fused["down"].weight(x.dtype).T
        return (_rms(x, w.final_norm, eps) @ w.w_head.T).float()
