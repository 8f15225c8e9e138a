"""A rank's shard of a whole HF-named state_dict, by the rules of ``monobuild.parallel``.

An engine that runs the model tensor-parallel already holds each rank's shard (vLLM loads it so);
this cuts the same shard out of a whole checkpoint, for the N-rank reference, the tests and a
serving setup that loads whole checkpoints. Each shard is a view of the whole tensor (narrowed, no
copy) except the vocabulary rows past the real vocabulary, which are zeros.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import torch

from ..parallel import TensorParallel
from ..schema import Geometry, WeightQuant
from .weights import SCALES, WeightError

_VOCAB = ("model.embed_tokens.weight", "lm_head.weight")
_LAYER = re.compile(r"model\.layers\.\d+\.(.+)")
#: A layer tensor's rule, by its name under ``model.layers.N.`` less ``.weight`` / ``.bias`` /
#: ``.weight_scale_inv`` (or, for transformers' fused experts, the scale suffix alone).
_RULES = (
    (re.compile(r"self_attn\.q_proj"), "q_rows"),
    (re.compile(r"self_attn\.[kv]_proj"), "kv_rows"),
    (re.compile(r"self_attn\.o_proj"), "q_cols"),
    (re.compile(r"mlp\.(gate|up)_proj"), "mlp_rows"),
    (re.compile(r"mlp\.down_proj"), "mlp_cols"),
    (re.compile(r"mlp\.experts\.\d+\.(gate|up)_proj|block_sparse_moe\.experts\.\d+\.w[13]"), "expert_rows"),
    (re.compile(r"mlp\.experts\.\d+\.down_proj|block_sparse_moe\.experts\.\d+\.w2"), "expert_cols"),
    (re.compile(r"mlp\.experts\.gate_up_proj"), "experts_gate_up"),
    (re.compile(r"mlp\.experts\.down_proj"), "experts_down"),
    (re.compile(r"self_attn\.qkv_proj|mlp\.gate_up_proj|mlp\.experts\.w(13|2)_weight"), "fused"),
)


def shard_state_dict(sd: Mapping, geometry: Geometry, tp: TensorParallel, rank: int,
                     quant: WeightQuant | None = None) -> dict[str, torch.Tensor]:
    """Rank ``rank``'s tensors of the whole HF-named ``sd`` (``geometry``'s, with ``quant``'s
    block scales where it is an FP8 checkpoint), under the same names: what
    ``pack_hf_state_dict(shard, tp.rank_geometry(geometry), …)`` binds for that rank."""
    if not 0 <= rank < tp.size:
        raise ValueError(f"rank {rank} of {tp.size}")
    reason = tp.refusal(geometry, quant)
    if reason is not None:
        raise WeightError(reason)
    if tp.size == 1:
        return dict(sd)
    g, r = geometry, tp.rank_geometry(geometry)
    d = g.head_dim
    kv = tp.kv_block(g, rank)
    inter = r.experts.intermediate if g.experts is not None else 0
    spans = {"q_rows": (rank * r.q_heads * d, r.q_heads * d), "kv_rows": (kv * r.kv_heads * d, r.kv_heads * d),
             "q_cols": (rank * r.q_heads * d, r.q_heads * d), "mlp_rows": (rank * r.intermediate, r.intermediate),
             "mlp_cols": (rank * r.intermediate, r.intermediate), "expert_rows": (rank * inter, inter),
             "expert_cols": (rank * inter, inter)}
    out = {}
    for name, t in sd.items():
        if name in _VOCAB:
            out[name] = _vocab_rows(t, *tp.vocab_range(g, rank))
            continue
        layer = _LAYER.fullmatch(name)
        base = layer.group(1) if layer else None
        rule = next((how for pattern, how in _RULES if base and pattern.match(base)), None)
        if rule is None:  # norms, the router, q/k norms: whole on every rank
            out[name] = t
            continue
        if rule == "fused":
            raise WeightError(f"{name}: a fused tensor (an engine's rank shard already); shard the HF-named "
                              "tensors it was made of")
        scale = name.endswith(SCALES)
        if rule in ("experts_gate_up", "experts_down"):  # [experts, rows, cols]: each expert as a dense MLP
            start, count = rank * inter, inter
            if rule == "experts_down":
                out[name] = _narrow(t, -1, start, count, quant.block_cols if scale else 1)
            else:
                rows = t.shape[1] // 2
                block = quant.block_rows if scale else 1
                out[name] = torch.cat([_narrow(t[:, :rows], 1, start, count, block),
                                       _narrow(t[:, rows:], 1, start, count, block)], dim=1)
            continue
        start, count = spans[rule]
        if rule.endswith("cols"):
            out[name] = _narrow(t, -1, start, count, quant.block_cols if scale else 1) if t.dim() > 1 else t
        else:
            out[name] = _narrow(t, 0, start, count, quant.block_rows if scale else 1)
    return out


def _narrow(t: torch.Tensor, dim: int, start: int, count: int, block: int) -> torch.Tensor:
    """Elements [start, start + count) of ``t`` along ``dim``; of a scale tensor (``block`` > 1)
    the blocks that cover them (whole blocks: ``TensorParallel.refusal``)."""
    return t.narrow(dim, start // block, count // block)


def _vocab_rows(t: torch.Tensor, start: int, stop: int) -> torch.Tensor:
    """Rows [start, stop) of a [vocab, hidden] tensor, zeros past its last row (the padding)."""
    have = max(0, min(stop, t.shape[0]) - start)
    if have == stop - start:
        return t[start:stop]
    out = torch.zeros(stop - start, *t.shape[1:], dtype=t.dtype, device=t.device)
    out[:have] = t[start:start + have]
    return out
