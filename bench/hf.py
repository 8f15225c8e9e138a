"""transformers as the outside reference: build an HF model from a config.json with given weights,
prefill rows, batch their caches for decode, and copy a prefill cache into the paged KV cache.

Used by ``tools/transformers_check.py`` on the GPU and by the CPU test that checks the float64
reference step against transformers. transformers is imported lazily: the runtime never needs it.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import torch

from ..runtime.kvcache import KVCache, write_positions
from ..schema import WeightQuant
from .checkpoints import dequantized_state_dict


def hf_model(config_json: Path, state_dict: dict, dtype: torch.dtype, device, quant: WeightQuant | None = None):
    """The transformers model of a config.json, built on ``device`` (nothing downloaded), with these weights.

    An FP8 checkpoint's (``quant``) is built unquantized, its weights dequantized into ``dtype``:
    the same products computed by transformers' own bf16 or float32 layers, so it is the outside
    reference of an FP8 package exactly as the bf16 model is of a bf16 one.
    """
    import transformers

    config = json.loads(Path(config_json).read_text())
    if quant is not None:
        config.pop("quantization_config", None)
        state_dict = dequantized_state_dict(state_dict, quant, dtype)
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "config.json").write_text(json.dumps(config))
        config = transformers.AutoConfig.from_pretrained(tmp)
    # a routed model's experts: transformers' default grouped GEMM takes 16- and 32-bit floats only
    routed = getattr(config, "num_experts", None) or getattr(config, "num_local_experts", None)
    eager = {"experts_implementation": "eager"} if routed and dtype == torch.float64 else {}
    with torch.device(device):
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=dtype, **eager)
    missing, unexpected = model.load_state_dict({k: v.to(dtype) for k, v in state_dict.items()}, strict=False)
    if unexpected or any(k != "lm_head.weight" for k in missing):
        raise SystemExit(f"{config_json}: weights do not fit the HF model: missing {missing}, unexpected {unexpected}")
    return model.eval()


def prefill(model, prompts: list[torch.Tensor]):
    """Prefill each row alone; returns per-row caches [(k, v) per layer] and last-token logits."""
    caches, last = [], []
    for ids in prompts:
        out = model(ids[None], use_cache=True)
        layers = [(layer.keys, layer.values) for layer in out.past_key_values.layers]
        caches.append(layers)
        last.append(out.logits[0, -1].float())
    return caches, torch.stack(last)


def batched_cache(caches):
    """Left-pad the rows' caches into one batch cache and its attention mask. A row's cache holds
    the positions it keeps: all of its prompt, or with a sliding window transformers' last ones,
    which then end, as the others, just before the next token (decode passes positions itself)."""
    from transformers import DynamicCache

    kept = [c[0][0].shape[2] for c in caches]
    longest = max(kept)
    layers = []
    for layer in range(len(caches[0])):
        k0, _ = caches[0][layer]
        shape = (len(caches), k0.shape[1], longest, k0.shape[3])
        k, v = k0.new_zeros(shape), k0.new_zeros(shape)
        for b, n in enumerate(kept):
            k[b, :, longest - n:] = caches[b][layer][0][0]
            v[b, :, longest - n:] = caches[b][layer][1][0]
        layers.append((k, v))
    mask = torch.zeros(len(caches), longest, dtype=torch.long, device=k0.device)
    for b, n in enumerate(kept):
        mask[b, longest - n:] = 1
    return DynamicCache(layers), mask


def fill_paged(kv: KVCache, caches, block_tables: torch.Tensor, lengths: list[int]) -> None:
    """Copy each row's prefill K/V [1, kv_heads, n, head_dim] into its pages of the paged cache, at
    their positions: the prompt's last n (all of it, or with a sliding window the ones
    transformers keeps; the positions before them are never seen again)."""
    for b, layers in enumerate(caches):
        for layer, (k, v) in enumerate(layers):
            write_positions(kv, layer, k[0], v[0], block_tables[b], lengths[b] - k.shape[2])
