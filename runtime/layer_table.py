"""The offset table a layer loop reads (``layer_offsets``): one launch runs every decoder layer.

A program built with ``fuse_layers`` takes layer 0's tensors as its arguments and, for each layer
l, the element offset of each of layer l's tensors from layer 0's (columns in the manifest
format's order, ``LAYER_OFFSET_COLUMNS``). The tensors stay where the engine put them: nothing
is copied, and the table is written once, at bind. Every tensor is 16-byte aligned (checked
when the weights and the KV cache are bound), so each offset is a whole number of 16-byte
vectors, which the program's loads rely on.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from .manifest import LAYER_OFFSET_COLUMNS
from .weights import ALIGNMENT, PackedWeights


def layer_offsets(weights: PackedWeights, k_caches: Sequence[torch.Tensor], v_caches: Sequence[torch.Tensor],
                  device=None) -> torch.Tensor:
    """[layers, len(LAYER_OFFSET_COLUMNS)] int64 on ``device``: layer l's tensors as element
    offsets from layer 0's (0 where the geometry has no such tensor: a q/k/v bias, q/k norms)."""
    rows = []
    for layer in range(len(weights.layers)):
        row = []
        for name in LAYER_OFFSET_COLUMNS:
            tensors = k_caches if name == "k_cache" else v_caches if name == "v_cache" else \
                [getattr(w, name) for w in weights.layers]
            first, this = tensors[0], tensors[layer]
            row.append(0 if this is None else _elements_apart(this, first, name, layer))
        rows.append(row)
    return torch.tensor(rows, dtype=torch.int64, device=device)


def _elements_apart(t: torch.Tensor, base: torch.Tensor, name: str, layer: int) -> int:
    if t.dtype != base.dtype:
        raise ValueError(f"layer {layer} {name}: {t.dtype}, layer 0's is {base.dtype}")
    gap = t.data_ptr() - base.data_ptr()
    if gap % ALIGNMENT:
        raise ValueError(f"layer {layer} {name}: {gap} bytes from layer 0's, not a multiple of {ALIGNMENT}")
    return gap // t.element_size()
