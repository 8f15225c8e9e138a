"""TMA descriptors for the streaming programs' weights and KV caches, encoded when a step is bound.

A streaming program copies its weights and cached K/V by TMA (``cp.async.bulk.tensor``), which
reads a tensor through a descriptor: the tensor's address, shape and strides, and the box one
copy moves, with its shared-memory swizzle. The runtime encodes one per streamed tensor of each
launch, over the engine's tensor in place (nothing is copied; a paged KV cache seen as its token
rows), with the box and swizzle the compiled code was built for (the manifest's
``tensor_maps``), and passes it by value as the kernel parameter, followed by the tensor's shape
(i32) and strides (i64, elements), as Triton's kernels take it.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

import torch

from ..schema import TensorMap
from .cuda import _check, _driver

DESCRIPTOR_BYTES = 128  # a CUtensorMap
DESCRIPTOR_ALIGN = 64


@dataclass(frozen=True)
class Descriptor:
    """A TMA descriptor argument, ready for a parameter block: the encoded map and the tensor's
    shape and strides (outermost first)."""

    encoded: bytes
    shape: tuple[int, ...]
    strides: tuple[int, ...]


def _data_type(dtype: torch.dtype):
    types = _driver().CUtensorMapDataType
    table = {torch.bfloat16: types.CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, torch.float16: types.CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
             torch.float32: types.CU_TENSOR_MAP_DATA_TYPE_FLOAT32, torch.uint8: types.CU_TENSOR_MAP_DATA_TYPE_UINT8,
             torch.float8_e4m3fn: types.CU_TENSOR_MAP_DATA_TYPE_UINT8}  # TMA moves bytes: E4M3 as bytes
    if dtype not in table:
        raise ValueError(f"no TMA data type for {dtype}")
    return table[dtype]


def token_rows(cache: torch.Tensor) -> torch.Tensor:
    """A layer's paged cache [num_blocks, block_size, kv_heads, head_dim] as the 2-D tensor a
    streaming program's KV descriptor reads: a row a cached token, its heads side by side (a
    view: the cache tensors are contiguous, ``as_kv_cache`` checks)."""
    blocks, block_size, heads, head_dim = cache.shape
    return cache.view(blocks * block_size, heads * head_dim)


def stacked_rows(stack: torch.Tensor) -> torch.Tensor:
    """A routed layer's expert stack [experts, rows, cols] as the 2-D tensor a streaming program's
    descriptor reads, expert e's rows from e · rows (a view: the engine's tensor in place; a stack
    that is not one block of memory is refused, since a copy would not be the bound weights)."""
    experts, rows, cols = stack.shape
    if not stack.is_contiguous():
        raise ValueError(f"an expert stack of shape {tuple(stack.shape)} is not contiguous: a streaming program reads "
                         "it in place as [experts · rows, cols]")
    return stack.view(experts * rows, cols)


def descriptor(tensor: torch.Tensor, tmap: TensorMap) -> Descriptor:
    """The descriptor of ``tensor`` (a contiguous CUDA tensor whose rank is the box's) for ``tmap``."""
    driver = _driver()
    if tensor.dim() != len(tmap.box) or tensor.element_size() != tmap.elem_bytes:
        raise ValueError(f"{tmap.arg}: a {tensor.dim()}-D tensor of {tensor.element_size()}-byte elements, the program "
                         f"streams a {len(tmap.box)}-D one of {tmap.elem_bytes}-byte elements")
    if tensor.stride(-1) != 1 or any(s * tensor.element_size() % 16 for s in tensor.stride()[:-1]):
        raise ValueError(f"{tmap.arg}: TMA needs its last dimension contiguous and the other strides 16-byte multiples")
    rank = tensor.dim()
    dims = [driver.cuuint64_t(n) for n in reversed(tensor.shape)]  # innermost first
    strides = [driver.cuuint64_t(s * tensor.element_size()) for s in reversed(tensor.stride()[:-1])]
    box = [driver.cuuint32_t(n) for n in reversed(tmap.box)]
    ones = [driver.cuuint32_t(1)] * rank
    tensor_map = _check(driver.cuTensorMapEncodeTiled(
        _data_type(tensor.dtype), rank, tensor.data_ptr(), dims, strides, box, ones,
        driver.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE, driver.CUtensorMapSwizzle(tmap.swizzle),
        driver.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
        driver.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE), f"cuTensorMapEncodeTiled({tmap.arg})")
    encoded = ctypes.string_at(tensor_map.getPtr(), DESCRIPTOR_BYTES)
    return Descriptor(encoded, tuple(tensor.shape), tuple(tensor.stride()))
