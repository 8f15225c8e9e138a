"""The paged KV cache in vLLM's layout, bound in place.

Per layer a K and a V tensor ``[num_blocks, block_size, kv_heads, head_dim]``, int32 block tables
mapping each row's page p to a block. A serving engine passes its own tensors (as ``KVCache``,
as per-layer ``(k, v)`` pairs, or as vLLM's per-layer ``[2, num_blocks, …]`` tensors);
``allocate_kv_cache`` makes one for callers that have none.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from ..schema import Geometry
from .weights import ALIGNMENT


class KVCacheError(Exception):
    """A KV cache that does not fit the package: names the layer and tensor and what was expected."""


@dataclass(frozen=True)
class KVCache:
    k: tuple[torch.Tensor, ...]
    v: tuple[torch.Tensor, ...]

    @property
    def num_blocks(self) -> int:
        return self.k[0].shape[0]


def kv_shape(geometry: Geometry, block_size: int, num_blocks: int) -> tuple[int, int, int, int]:
    return num_blocks, block_size, geometry.kv_heads, geometry.head_dim


def allocate_kv_cache(geometry: Geometry, block_size: int, dtype: torch.dtype, num_blocks: int, device) -> KVCache:
    shape = kv_shape(geometry, block_size, num_blocks)
    layers = range(geometry.layers)
    return KVCache(tuple(torch.empty(shape, dtype=dtype, device=device) for _ in layers),
                   tuple(torch.empty(shape, dtype=dtype, device=device) for _ in layers))


def _is_pair(layer) -> bool:
    """vLLM's [2, num_blocks, …] tensor or a (k, v) pair."""
    if isinstance(layer, torch.Tensor):
        return layer.dim() == 5 and layer.shape[0] == 2
    return isinstance(layer, Sequence) and len(layer) == 2


def as_kv_cache(cache, geometry: Geometry, block_size: int, dtype: torch.dtype, device) -> KVCache:
    """Check a caller's cache against the package and return it as ``KVCache`` (no copy)."""
    if isinstance(cache, KVCache):
        k, v = cache.k, cache.v
    elif isinstance(cache, Sequence) and all(_is_pair(x) for x in cache):
        k, v = tuple(x[0] for x in cache), tuple(x[1] for x in cache)
    else:
        raise KVCacheError("kv_cache: expected a KVCache, per-layer (k, v) pairs or per-layer [2, num_blocks, "
                           "block_size, kv_heads, head_dim] tensors")
    if len(k) != geometry.layers:
        raise KVCacheError(f"kv_cache: {len(k)} layers, the package has {geometry.layers}")
    blocks = k[0].shape[0] if k[0].dim() == 4 else -1
    want = kv_shape(geometry, block_size, blocks)
    for layer, pair in enumerate(zip(k, v)):
        for which, t in zip("kv", pair):
            where = f"kv_cache layer {layer} {which.upper()}"
            if tuple(t.shape) != want or t.dtype != dtype:
                raise KVCacheError(f"{where}: expected {list(want)} {dtype}, got {list(t.shape)} {t.dtype}")
            if t.device != torch.device(device):
                raise KVCacheError(f"{where}: on {t.device}, the package runs on {device}")
            if not t.is_contiguous() or t.data_ptr() % ALIGNMENT:
                raise KVCacheError(f"{where}: must be contiguous and {ALIGNMENT}-byte aligned (it is written in place)")
    return KVCache(tuple(k), tuple(v))


def write_positions(kv: KVCache, layer: int, k: torch.Tensor, v: torch.Tensor, block_table: torch.Tensor,
                    first: int) -> None:
    """Write one row's keys and values ``[kv_heads, n, head_dim]`` (a prefill's, as transformers'
    cache holds them) for positions ``first`` … ``first + n − 1`` into its pages (``block_table``,
    the row's int32 block ids) of layer ``layer``."""
    n, block_size = k.shape[1], kv.k[layer].shape[1]
    pos = torch.arange(first, first + n, device=block_table.device)
    blocks = block_table[pos // block_size].long()
    kv.k[layer][blocks, pos % block_size] = k.transpose(0, 1).to(kv.k[layer].dtype)
    kv.v[layer][blocks, pos % block_size] = v.transpose(0, 1).to(kv.v[layer].dtype)
